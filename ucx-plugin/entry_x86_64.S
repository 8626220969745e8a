/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Every function the preloaded object interposes, for x86-64: one jump
 * through a pointer that shim.c fills in (the function of the same name in
 * the process's own UCX, or the backend's wrapper of it). The checked ones
 * first load the generation and compare it with its value at the last
 * drain: one load and compare, then the jump.
 *
 * Written in assembly so that the arguments are never touched: only %r11
 * (scratch in every call) is used on the way through, and every way out is
 * a jump with the caller's stack as it was. The preloaded object knows no
 * UCX's signatures (ucs_rcache_get has 7 arguments from UCX 1.17 on, the
 * seventh on the stack): a call reaches the function it was made for as it
 * was made, whatever UCX the process runs.
 */
#include "entry_hot.h"
#include "gnu_property.h"
#include "entry_list.h"

/* The UCP entry points' checks; 0 builds the tests' negative control. */
#ifndef MRN_UCX_ENTRY_CHECKS
#define MRN_UCX_ENTRY_CHECKS 1
#endif

#if defined(__x86_64__)

/* An indirect-branch target (reached through the PLT) where CET is on. */
#if defined(__CET__) && (__CET__ & 1)
#define ENDBR endbr64
#else
#define ENDBR
#endif

	.text

/* A function's start and end, as every symbol below has them. */
	.macro	FUNC name
	.type	\name, @function
	.p2align 4
\name:
	.cfi_startproc
	ENDBR
	.endm

	.macro	ENDFUNC name
	.cfi_endproc
	.size	\name, .-\name
	.endm

/*
 * Around a C call from a function entry: the six argument registers, and
 * %rax (the count of vector registers of a variadic call; it also keeps
 * the stack 16-byte aligned at the call). None of these functions takes
 * floating-point arguments.
 */
	.macro	SAVE_ARGS
	pushq	%rdi
	.cfi_adjust_cfa_offset 8
	pushq	%rsi
	.cfi_adjust_cfa_offset 8
	pushq	%rdx
	.cfi_adjust_cfa_offset 8
	pushq	%rcx
	.cfi_adjust_cfa_offset 8
	pushq	%r8
	.cfi_adjust_cfa_offset 8
	pushq	%r9
	.cfi_adjust_cfa_offset 8
	pushq	%rax
	.cfi_adjust_cfa_offset 8
	.endm

	.macro	RESTORE_ARGS
	popq	%rax
	.cfi_adjust_cfa_offset -8
	popq	%r9
	.cfi_adjust_cfa_offset -8
	popq	%r8
	.cfi_adjust_cfa_offset -8
	popq	%rcx
	.cfi_adjust_cfa_offset -8
	popq	%rdx
	.cfi_adjust_cfa_offset -8
	popq	%rsi
	.cfi_adjust_cfa_offset -8
	popq	%rdi
	.cfi_adjust_cfa_offset -8
	.endm

/*
 * Where mrn_ucx_real_NAME points until the shim has bound to the process's
 * UCX (the first call of any interposed function, or at load where UCX is
 * already loaded): bind, then jump to what the pointer now holds.
 */
	.macro	MRN_UNBOUND name
	.globl	mrn_ucx_unbound_\name
	.hidden	mrn_ucx_unbound_\name
	FUNC	mrn_ucx_unbound_\name
	SAVE_ARGS
	leaq	mrn_ucx_real_\name(%rip), %rdi
	call	mrn_ucx_bind_call
	RESTORE_ARGS
	jmp	*mrn_ucx_real_\name(%rip)
	ENDFUNC	mrn_ucx_unbound_\name
	.endm

/* A function the backend wraps: only the jump. */
	.macro	MRN_WRAPPED name
	.globl	\name
	FUNC	\name
	jmp	*mrn_ucx_real_\name(%rip)
	ENDFUNC	\name
	MRN_UNBOUND \name
	.endm

/*
 * A function whose callers may hit a cached registration: the compare,
 * then the jump. The slow path (the generation moved, or checks are
 * counted) calls mrn_ucx_entry_slow(KIND), which drains, with the
 * arguments saved.
 */
	.macro	MRN_CHECKED name, kind
	.globl	\name
	FUNC	\name
	movq	mrn_ucx_hot+MRN_UCX_HOT_GENERATION(%rip), %r11
	movq	(%r11), %r11
	cmpq	mrn_ucx_hot+MRN_UCX_HOT_SEEN(%rip), %r11
	jne	1f
	cmpl	$0, mrn_ucx_hot+MRN_UCX_HOT_COUNT_CHECKS(%rip)
	jne	1f
	jmp	*mrn_ucx_real_\name(%rip)
1:	SAVE_ARGS
	movl	$\kind, %edi
	call	mrn_ucx_entry_slow
	RESTORE_ARGS
	jmp	*mrn_ucx_real_\name(%rip)
	ENDFUNC	\name
	MRN_UNBOUND \name
	.endm

/*
 * ucs_rcache_get(): every lookup of every cache in UCX 1.13, and every
 * miss of UCP's cache later.
 */
	MRN_CHECKED ucs_rcache_get, MRN_UCX_SLOW_GET

#define MRN_UCX_WRAPPED_ASM(name) MRN_WRAPPED name;
MRN_UCX_WRAPPED(MRN_UCX_WRAPPED_ASM)

#if MRN_UCX_ENTRY_CHECKS
/* A UCP entry point (entry_list.h). */
#define MRN_UCX_ENTRY_ASM(name) MRN_CHECKED name, MRN_UCX_SLOW_ENTRY;
MRN_UCX_ENTRIES(MRN_UCX_ENTRY_ASM)
#endif

/*
 * With -fcf-protection the C objects say they support IBT and shadow
 * stacks; one object without the note would turn both off for the whole
 * library. Every symbol above starts with ENDBR and every call returns.
 */
#if defined(__CET__)
/* GNU_PROPERTY_X86_FEATURE_1_AND: IBT 1, SHSTK 2 */
MRN_GNU_PROPERTY(0xc0000002, (__CET__ & 3))
#endif
#endif /* __x86_64__ */

	.section .note.GNU-stack, "", %progbits

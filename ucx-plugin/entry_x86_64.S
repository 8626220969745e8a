/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The check on every lookup, for x86-64: one load of the generation and a
 * compare with its value at the last drain, then a jump to UCX's function.
 *
 * Written in assembly so that the arguments are never touched: only %r11
 * (scratch in every call) is used on the way through, and every way out is
 * a jump with the caller's stack as it was. When the plugin is not active
 * the generation never moves, and a call with any signature (ucs_rcache_get
 * has 7 arguments from UCX 1.17 on, the seventh on the stack) reaches UCX's
 * function as it was made.
 */
#include "entry_hot.h"
#include "gnu_property.h"
#include "entry_list.h"
#ifndef MRN_UCX_ENTRY_CHECKS
#include "ucx_versions.h"
#endif

#if defined(__x86_64__)

/* An indirect-branch target (reached through the PLT) where CET is on. */
#if defined(__CET__) && (__CET__ & 1)
#define ENDBR endbr64
#else
#define ENDBR
#endif

	.text

/*
 * ucs_rcache_get(): every lookup of every cache in UCX 1.13, and every
 * miss of UCP's cache later. A moved generation or counted lookups leave
 * for the C functions in drain.c, which take the signature of the UCX
 * this was built for (reached only when the plugin is active).
 */
	.globl	ucs_rcache_get
	.type	ucs_rcache_get, @function
	.p2align 4
ucs_rcache_get:
	.cfi_startproc
	ENDBR
	cmpl	$0, mrn_ucx_hot+MRN_UCX_HOT_COUNT_CHECKS(%rip)
	jne	mrn_ucx_get_counted
	movq	mrn_ucx_hot+MRN_UCX_HOT_GENERATION(%rip), %r11
	movq	(%r11), %r11
	cmpq	mrn_ucx_hot+MRN_UCX_HOT_SEEN(%rip), %r11
	jne	mrn_ucx_get_after_drain
	jmp	*mrn_ucx_hot+MRN_UCX_HOT_REAL_GET(%rip)
	.cfi_endproc
	.size	ucs_rcache_get, .-ucs_rcache_get

#if MRN_UCX_ENTRY_CHECKS
/*
 * A UCP entry point (entry_list.h): the same compare, then a jump to UCX's
 * function through mrn_ucx_real_NAME. The slow path needs no signature: it
 * saves the six argument registers (and %rax, which keeps the stack 16-byte
 * aligned at the call; none of these functions takes floating-point or
 * variadic arguments) around mrn_ucx_entry_slow, which drains.
 */
	.macro	MRN_TRAMPOLINE name
	.globl	\name
	.type	\name, @function
	.p2align 4
\name:
	.cfi_startproc
	ENDBR
	movq	mrn_ucx_hot+MRN_UCX_HOT_GENERATION(%rip), %r11
	movq	(%r11), %r11
	cmpq	mrn_ucx_hot+MRN_UCX_HOT_SEEN(%rip), %r11
	jne	1f
	cmpl	$0, mrn_ucx_hot+MRN_UCX_HOT_COUNT_CHECKS(%rip)
	jne	1f
	jmp	*mrn_ucx_real_\name(%rip)
1:	pushq	%rdi
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
	call	mrn_ucx_entry_slow
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
	jmp	*mrn_ucx_real_\name(%rip)
	.cfi_endproc
	.size	\name, .-\name
	.endm

#define MRN_UCX_ENTRY_ASM(name) MRN_TRAMPOLINE name;
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

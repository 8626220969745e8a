/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Every function the preloaded object interposes, for aarch64
 * (entry_x86_64.S says what they are for): a branch through a pointer that
 * shim.c fills in, after, for the checked ones, one acquire load of the
 * generation and a compare with its value at the last drain.
 *
 * The arguments (x0-x7, and x8 for a returned structure) are never touched
 * on the way through: only x16 and x17 (the intra-procedure-call scratch
 * registers, which a veneer or PLT may clobber at any call) and x9 (a
 * temporary the callee owns) are used, and every way out is a branch with
 * the caller's stack and return address as they were. The function is
 * reached with "br x16", which a "bti c" landing pad accepts.
 */
#include "entry_hot.h"
#include "gnu_property.h"
#include "entry_list.h"

/* The UCP entry points' checks; 0 builds the tests' negative control. */
#ifndef MRN_UCX_ENTRY_CHECKS
#define MRN_UCX_ENTRY_CHECKS 1
#endif

#if defined(__aarch64__)

/* An indirect-branch target (reached through the PLT) where BTI is on. */
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define BTI_C bti c
#else
#define BTI_C
#endif

	.text

/* A function's start and end, as every symbol below has them. */
	.macro	FUNC name
	.type	\name, %function
	.p2align 4
\name:
	.cfi_startproc
	BTI_C
	.endm

	.macro	ENDFUNC name
	.cfi_endproc
	.size	\name, .-\name
	.endm

/*
 * Around a C call from a function entry: x0-x8 with the frame record (none
 * of these functions takes floating-point or variadic arguments).
 */
	.macro	SAVE_ARGS
	stp	x29, x30, [sp, #-96]!
	.cfi_def_cfa_offset 96
	.cfi_offset 29, -96
	.cfi_offset 30, -88
	mov	x29, sp
	stp	x0, x1, [sp, #16]
	stp	x2, x3, [sp, #32]
	stp	x4, x5, [sp, #48]
	stp	x6, x7, [sp, #64]
	str	x8, [sp, #80]
	.endm

	.macro	RESTORE_ARGS
	ldp	x0, x1, [sp, #16]
	ldp	x2, x3, [sp, #32]
	ldp	x4, x5, [sp, #48]
	ldp	x6, x7, [sp, #64]
	ldr	x8, [sp, #80]
	ldp	x29, x30, [sp], #96
	.cfi_def_cfa_offset 0
	.cfi_restore 29
	.cfi_restore 30
	.endm

	.macro	JUMP_REAL name
	adrp	x16, mrn_ucx_real_\name
	ldr	x16, [x16, :lo12:mrn_ucx_real_\name]
	br	x16
	.endm

/* Until the shim has bound (entry_x86_64.S): bind, then branch. */
	.macro	MRN_UNBOUND name
	.globl	mrn_ucx_unbound_\name
	.hidden	mrn_ucx_unbound_\name
	FUNC	mrn_ucx_unbound_\name
	SAVE_ARGS
	adrp	x0, mrn_ucx_real_\name
	add	x0, x0, :lo12:mrn_ucx_real_\name
	bl	mrn_ucx_bind_call
	RESTORE_ARGS
	JUMP_REAL \name
	ENDFUNC	mrn_ucx_unbound_\name
	.endm

/* A function the backend wraps: only the branch. */
	.macro	MRN_WRAPPED name
	.globl	\name
	FUNC	\name
	JUMP_REAL \name
	ENDFUNC	\name
	MRN_UNBOUND \name
	.endm

/* The compare, then the branch; the slow path calls mrn_ucx_entry_slow(KIND). */
	.macro	MRN_CHECKED name, kind
	.globl	\name
	FUNC	\name
	adrp	x16, mrn_ucx_hot
	add	x16, x16, :lo12:mrn_ucx_hot
	ldr	x17, [x16, #MRN_UCX_HOT_GENERATION]
	ldar	x17, [x17]
	ldr	x9, [x16, #MRN_UCX_HOT_SEEN]
	cmp	x17, x9
	b.ne	1f
	ldr	w17, [x16, #MRN_UCX_HOT_COUNT_CHECKS]
	cbnz	w17, 1f
	JUMP_REAL \name
1:	SAVE_ARGS
	mov	w0, #\kind
	bl	mrn_ucx_entry_slow
	RESTORE_ARGS
	JUMP_REAL \name
	ENDFUNC	\name
	MRN_UNBOUND \name
	.endm

/* ucs_rcache_get(): entry_x86_64.S says when it is reached. */
	MRN_CHECKED ucs_rcache_get, MRN_UCX_SLOW_GET

#define MRN_UCX_WRAPPED_ASM(name) MRN_WRAPPED name;
MRN_UCX_WRAPPED(MRN_UCX_WRAPPED_ASM)

#if MRN_UCX_ENTRY_CHECKS
/* A UCP entry point (entry_list.h). */
#define MRN_UCX_ENTRY_ASM(name) MRN_CHECKED name, MRN_UCX_SLOW_ENTRY;
MRN_UCX_ENTRIES(MRN_UCX_ENTRY_ASM)
#endif

/*
 * With -mbranch-protection the C objects say they support BTI (and PAC);
 * one object without the note would turn that off for the whole library.
 * Every symbol above starts with "bti c" where BTI is on, and none returns
 * through a signed return address of its own.
 */
#if (defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT) || \
	(defined(__ARM_FEATURE_PAC_DEFAULT) && __ARM_FEATURE_PAC_DEFAULT)
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define MRN_FEATURE_BTI 1
#else
#define MRN_FEATURE_BTI 0
#endif
#if defined(__ARM_FEATURE_PAC_DEFAULT) && __ARM_FEATURE_PAC_DEFAULT
#define MRN_FEATURE_PAC 2
#else
#define MRN_FEATURE_PAC 0
#endif
/* GNU_PROPERTY_AARCH64_FEATURE_1_AND: BTI 1, PAC 2 */
MRN_GNU_PROPERTY(0xc0000000, (MRN_FEATURE_BTI | MRN_FEATURE_PAC))
#endif
#endif /* __aarch64__ */

	.section .note.GNU-stack, "", %progbits

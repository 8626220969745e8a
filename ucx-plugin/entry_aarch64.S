/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The check on every lookup, for aarch64 (entry_x86_64.S says what it is
 * for): one acquire load of the generation and a compare with its value at
 * the last drain, then a branch to UCX's function.
 *
 * The arguments (x0-x7, and x8 for a returned structure) are never touched
 * on the way through: only x16 and x17 (the intra-procedure-call scratch
 * registers, which a veneer or PLT may clobber at any call) and x9 (a
 * temporary the callee owns) are used, and every way out is a branch with
 * the caller's stack and return address as they were. UCX's function is
 * reached with "br x16", which a "bti c" landing pad accepts.
 */
#include "entry_hot.h"
#include "gnu_property.h"
#include "entry_list.h"
#ifndef MRN_UCX_ENTRY_CHECKS
#include "ucx_versions.h"
#endif

#if defined(__aarch64__)

/* An indirect-branch target (reached through the PLT) where BTI is on. */
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define BTI_C bti c
#else
#define BTI_C
#endif

	.text

/* ucs_rcache_get(): entry_x86_64.S says when it is reached. */
	.globl	ucs_rcache_get
	.type	ucs_rcache_get, %function
	.p2align 4
ucs_rcache_get:
	.cfi_startproc
	BTI_C
	adrp	x16, mrn_ucx_hot
	add	x16, x16, :lo12:mrn_ucx_hot
	ldr	w17, [x16, #MRN_UCX_HOT_COUNT_CHECKS]
	cbnz	w17, 2f
	ldr	x17, [x16, #MRN_UCX_HOT_GENERATION]
	ldar	x17, [x17]
	ldr	x9, [x16, #MRN_UCX_HOT_SEEN]
	cmp	x17, x9
	b.ne	3f
	ldr	x16, [x16, #MRN_UCX_HOT_REAL_GET]
	br	x16
2:	b	mrn_ucx_get_counted
3:	b	mrn_ucx_get_after_drain
	.cfi_endproc
	.size	ucs_rcache_get, .-ucs_rcache_get

#if MRN_UCX_ENTRY_CHECKS
/*
 * A UCP entry point (entry_list.h): the same compare, then a branch to
 * UCX's function through mrn_ucx_real_NAME. The slow path saves the
 * argument registers x0-x8 with the frame record around the call of
 * mrn_ucx_entry_slow (none of these functions takes floating-point or
 * variadic arguments), restores them and the return address, and branches.
 */
	.macro	MRN_TRAMPOLINE name
	.globl	\name
	.type	\name, %function
	.p2align 4
\name:
	.cfi_startproc
	BTI_C
	adrp	x16, mrn_ucx_hot
	add	x16, x16, :lo12:mrn_ucx_hot
	ldr	x17, [x16, #MRN_UCX_HOT_GENERATION]
	ldar	x17, [x17]
	ldr	x9, [x16, #MRN_UCX_HOT_SEEN]
	cmp	x17, x9
	b.ne	1f
	ldr	w17, [x16, #MRN_UCX_HOT_COUNT_CHECKS]
	cbnz	w17, 1f
	adrp	x16, mrn_ucx_real_\name
	ldr	x16, [x16, :lo12:mrn_ucx_real_\name]
	br	x16
1:	stp	x29, x30, [sp, #-96]!
	.cfi_def_cfa_offset 96
	.cfi_offset 29, -96
	.cfi_offset 30, -88
	mov	x29, sp
	stp	x0, x1, [sp, #16]
	stp	x2, x3, [sp, #32]
	stp	x4, x5, [sp, #48]
	stp	x6, x7, [sp, #64]
	str	x8, [sp, #80]
	bl	mrn_ucx_entry_slow
	ldp	x0, x1, [sp, #16]
	ldp	x2, x3, [sp, #32]
	ldp	x4, x5, [sp, #48]
	ldp	x6, x7, [sp, #64]
	ldr	x8, [sp, #80]
	ldp	x29, x30, [sp], #96
	.cfi_def_cfa_offset 0
	.cfi_restore 29
	.cfi_restore 30
	adrp	x16, mrn_ucx_real_\name
	ldr	x16, [x16, :lo12:mrn_ucx_real_\name]
	br	x16
	.cfi_endproc
	.size	\name, .-\name
	.endm

#define MRN_UCX_ENTRY_ASM(name) MRN_TRAMPOLINE name;
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

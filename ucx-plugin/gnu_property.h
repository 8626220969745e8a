/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * For the assembly: a GNU property note (NT_GNU_PROPERTY_TYPE_0) holding one
 * 4-byte property, as the compiler emits for C objects built with
 * -fcf-protection (x86-64) or -mbranch-protection (aarch64). The linker
 * keeps a feature for the library only when every object's note has it.
 */
#ifndef MRN_GNU_PROPERTY_H
#define MRN_GNU_PROPERTY_H

/* name size 4 ("GNU\0"), descriptor size 16 (type, size 4, value, padding) */
#define MRN_GNU_PROPERTY(type, value)                                                              \
	.section .note.gnu.property, "a";                                                          \
	.p2align 3;                                                                                \
	.long 4;                                                                                   \
	.long 16;                                                                                  \
	.long 5;                                                                                   \
	.asciz "GNU";                                                                              \
	.long type;                                                                                \
	.long 4;                                                                                   \
	.long value;                                                                               \
	.p2align 3

#endif

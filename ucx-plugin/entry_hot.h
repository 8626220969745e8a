/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All that the hit paths read, together: the assembly (entry_<arch>.S) and
 * the C code share this header, so that the offsets are stated once and
 * checked against the struct. The preloaded object (shim.c) owns it; the
 * backend that the shim loads for the running UCX writes it.
 */
#ifndef MRN_UCX_ENTRY_HOT_H
#define MRN_UCX_ENTRY_HOT_H

#define MRN_UCX_HOT_GENERATION   0  /* the word the kernel bumps */
#define MRN_UCX_HOT_SEEN         8  /* its value at the last drain */
#define MRN_UCX_HOT_COUNT_CHECKS 16 /* nonzero: lookups are counted */

/* What mrn_ucx_entry_slow() is told: which counter a check goes to. */
#define MRN_UCX_SLOW_ENTRY 0 /* a UCP entry point */
#define MRN_UCX_SLOW_GET   1 /* ucs_rcache_get() */

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct mrn_ucx_hot {
	/* A watch's word when active, else one that never moves. */
	const volatile uint64_t *generation;
	uint64_t seen;
	int count_checks;
} mrn_ucx_hot_t;

_Static_assert(offsetof(mrn_ucx_hot_t, generation) == MRN_UCX_HOT_GENERATION, "entry_*.S");
_Static_assert(offsetof(mrn_ucx_hot_t, seen) == MRN_UCX_HOT_SEEN, "entry_*.S");
_Static_assert(offsetof(mrn_ucx_hot_t, count_checks) == MRN_UCX_HOT_COUNT_CHECKS, "entry_*.S");
#endif

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * All that the hit paths read, together: the assembly (entry_<arch>.S) and
 * the C code share this header, so that the offsets are stated once and
 * checked against the struct.
 */
#ifndef MRN_UCX_ENTRY_HOT_H
#define MRN_UCX_ENTRY_HOT_H

#define MRN_UCX_HOT_GENERATION   0  /* the word the kernel bumps */
#define MRN_UCX_HOT_SEEN         8  /* its value at the last drain */
#define MRN_UCX_HOT_REAL_GET     16 /* UCX's ucs_rcache_get() */
#define MRN_UCX_HOT_COUNT_CHECKS 24 /* nonzero: lookups are counted */

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct mrn_ucx_hot {
	/* A watch's word when active, else one that never moves. */
	const volatile uint64_t *generation;
	uint64_t seen;
	void *real_get;
	int count_checks;
} mrn_ucx_hot_t;

_Static_assert(offsetof(mrn_ucx_hot_t, generation) == MRN_UCX_HOT_GENERATION, "entry_*.S");
_Static_assert(offsetof(mrn_ucx_hot_t, seen) == MRN_UCX_HOT_SEEN, "entry_*.S");
_Static_assert(offsetof(mrn_ucx_hot_t, real_get) == MRN_UCX_HOT_REAL_GET, "entry_*.S");
_Static_assert(offsetof(mrn_ucx_hot_t, count_checks) == MRN_UCX_HOT_COUNT_CHECKS, "entry_*.S");

/* Not static, so that the assembly can name it; hidden like all but the API. */
extern __attribute__((visibility("hidden"))) mrn_ucx_hot_t mrn_ucx_hot;
#endif

#endif

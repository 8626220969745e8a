/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The test programs that drive ucs_rcache directly, for UCX 1.13 to 1.18:
 * the alignment moved from the params to ucs_rcache_get() in 1.17, and the
 * ops gained a merge callback in 1.18, which UCX calls without checking.
 */
#ifndef MRN_UCX_RCACHE_COMPAT_H
#define MRN_UCX_RCACHE_COMPAT_H

#include <ucp/api/ucp_version.h>
#include <ucs/memory/rcache.h>

#if UCP_API_MINOR >= 17
/* (rcache, address, length, prot, arg, region_p), at the minimum alignment. */
#define MRN_RCACHE_GET(get, rc, a, l, prot, arg, rp)                                               \
	get(rc, a, l, UCS_RCACHE_MIN_ALIGNMENT, prot, arg, rp)
typedef ucs_status_t (*mrn_rcache_get_fn)(ucs_rcache_t *, void *, size_t, size_t, int, void *,
					  ucs_rcache_region_t **);
#define MRN_RCACHE_PARAMS_ALIGN(p, align, max)                                                     \
	do {                                                                                       \
		(void)(align), (void)(max);                                                        \
	} while (0)
#else
#define MRN_RCACHE_GET(get, rc, a, l, prot, arg, rp) get(rc, a, l, prot, arg, rp)
typedef ucs_status_t (*mrn_rcache_get_fn)(ucs_rcache_t *, void *, size_t, int, void *,
					  ucs_rcache_region_t **);
#define MRN_RCACHE_PARAMS_ALIGN(p, align, max)                                                     \
	do {                                                                                       \
		(p)->alignment = (align);                                                          \
		(p)->max_alignment = (max);                                                        \
	} while (0)
#endif

static inline void mrn_rcache_merge_nothing(void *context, ucs_rcache_t *rcache, void *arg,
					    ucs_rcache_region_t *region)
{
	(void)context, (void)rcache, (void)arg, (void)region;
}

#if UCP_API_MINOR >= 18
#define MRN_RCACHE_OPS_MERGE .merge = mrn_rcache_merge_nothing,
#else
#define MRN_RCACHE_OPS_MERGE
#endif

#endif

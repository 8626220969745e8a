/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What changed between the UCX releases the plugin knows, in one place: the
 * plugin, the tests that drive ucs_rcache directly and the benchmarks' UCX
 * baseline include this header, and nothing else tests UCP_API_MINOR.
 *
 * Read in openucx/ucx's tags (docs/ucx.md has the table):
 *  - 1.14: UCP looks its own cache up inline (ucs_rcache_lookup_unsafe() in
 *    ucp_memh_get()); only misses call ucs_rcache_get().
 *  - 1.15: the configuration parser takes a table handle
 *    (UCS_CONFIG_GET_TABLE) and no separate table prefix.
 *  - 1.17: ucs_rcache_get() takes an alignment, the params lose theirs, and
 *    UCP's cache asks for synchronous events (UCS_RCACHE_FLAG_SYNC_EVENTS):
 *    an unmap event only queues the range while a lookup may run without
 *    the page-table lock.
 *  - 1.18: the ops gain a merge callback, which UCX calls unchecked.
 *  - 1.19 to 1.23: nothing the plugin uses changed (1.21 keeps the pending
 *    invalidations in a tree, not a queue; a lookup with any pending still
 *    misses).
 */
#ifndef MRN_UCX_VERSIONS_H
#define MRN_UCX_VERSIONS_H

/* Macros only, so that the assembly can read the predicates too. */
#include <ucp/api/ucp_version.h>

/* The releases the plugin was read against and tested with. */
#define MRN_UCX_NEWEST_KNOWN_MINOR 23

#define MRN_UCX_UCP_INLINES_HITS    (UCP_API_MINOR >= 14)
/* From 1.14 ucp_mem_map() hands out a new handle onto a cached registration. */
#define MRN_UCX_MEMH_FROM_CACHE     (UCP_API_MINOR >= 14)
#define MRN_UCX_CONFIG_TABLE_HANDLE (UCP_API_MINOR >= 15)
#define MRN_UCX_GET_HAS_ALIGNMENT   (UCP_API_MINOR >= 17)
#define MRN_UCX_HAS_SYNC_EVENTS     (UCP_API_MINOR >= 17)
#define MRN_UCX_OPS_HAVE_MERGE      (UCP_API_MINOR >= 18)

/*
 * UCP's inlined lookups (1.14 on) need the plugin's entry-point checks
 * (entry_list.h). The tests build a copy without them
 * (-DMRN_UCX_ENTRY_CHECKS=0) as the negative control that shows what they
 * catch; never a configuration to ship.
 */
#ifndef MRN_UCX_ENTRY_CHECKS
#define MRN_UCX_ENTRY_CHECKS MRN_UCX_UCP_INLINES_HITS
#endif

#ifndef __ASSEMBLER__
#include <ucs/memory/rcache.h>

/*
 * ucs_rcache_get()'s parameters and arguments, for wrappers that pass a
 * call on, and calls for callers (at an alignment, or at the minimum).
 */
#if MRN_UCX_GET_HAS_ALIGNMENT
#define MRN_UCX_GET_PARAMS                                                                         \
	ucs_rcache_t *rcache, void *address, size_t length, size_t alignment, int prot, void *arg, \
		ucs_rcache_region_t **region_p
#define MRN_UCX_GET_ARGS rcache, address, length, alignment, prot, arg, region_p
#define MRN_RCACHE_GET_ALIGNED(get, rc, a, l, align, prot, arg, rp)                               \
	get(rc, a, l, align, prot, arg, rp)
#define MRN_RCACHE_GET(get, rc, a, l, prot, arg, rp)                                               \
	get(rc, a, l, UCS_RCACHE_MIN_ALIGNMENT, prot, arg, rp)
#else
#define MRN_UCX_GET_PARAMS                                                                         \
	ucs_rcache_t *rcache, void *address, size_t length, int prot, void *arg,                   \
		ucs_rcache_region_t **region_p
#define MRN_UCX_GET_ARGS rcache, address, length, prot, arg, region_p
/* The alignment is the params' (MRN_RCACHE_PARAMS_ALIGN). */
#define MRN_RCACHE_GET_ALIGNED(get, rc, a, l, align, prot, arg, rp)                               \
	((void)(align), get(rc, a, l, prot, arg, rp))
#define MRN_RCACHE_GET(get, rc, a, l, prot, arg, rp) get(rc, a, l, prot, arg, rp)
#endif
typedef ucs_status_t (*mrn_rcache_get_fn)(MRN_UCX_GET_PARAMS);

/* Before 1.17 the params carry the alignment (and its maximum). */
#if MRN_UCX_GET_HAS_ALIGNMENT
#define MRN_RCACHE_PARAMS_ALIGN(p, align, max) ((void)(p), (void)(align), (void)(max))
#else
#define MRN_RCACHE_PARAMS_ALIGN(p, align, max) ((p)->alignment = (align), (p)->max_alignment = (max))
#endif

/*
 * From 1.18 UCX calls ops->merge without checking it: caches with nothing
 * to merge set it to this (in an initializer, or with the SET form).
 */
static inline void mrn_rcache_merge_nothing(void *context, ucs_rcache_t *rcache, void *arg,
					    ucs_rcache_region_t *region)
{
	(void)context, (void)rcache, (void)arg, (void)region;
}
#if MRN_UCX_OPS_HAVE_MERGE
#define MRN_RCACHE_OPS_MERGE                 .merge = mrn_rcache_merge_nothing,
#define MRN_RCACHE_OPS_SET_MERGE(ops, fn)    ((ops)->merge = (fn))
#else
#define MRN_RCACHE_OPS_MERGE
#define MRN_RCACHE_OPS_SET_MERGE(ops, fn)    ((void)(ops), (void)(fn))
#endif

#endif /* __ASSEMBLER__ */
#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: Open MPI's registration cache framework (rcache) on top of
 * libmrnotify. The cache itself (lookup, LRU, limits, invalidation by the
 * kernel or by userfaultfd) is the library's; this is the glue that maps the
 * framework's registrations, flags and callbacks onto it.
 *
 * The same sources build two components: "mrnotify" (for transports that let
 * the user name the cache, e.g. btl_openib_rcache) and, with
 * MRN_RCACHE_NAME=grdma, a stand-in for grdma for the transports that ask for
 * "grdma" by name (btl/ofi, btl/uct, vader's knem path).
 */
#ifndef MCA_RCACHE_MRNOTIFY_H
#define MCA_RCACHE_MRNOTIFY_H

#include "opal_config.h"

#include "opal/mca/rcache/rcache.h"

#include <mrnotify.h>

#include <stdbool.h>
#include <stdint.h>

#ifndef MRN_RCACHE_NAME
#define MRN_RCACHE_NAME mrnotify
#endif

#define MRN_STR_(x) #x
#define MRN_STR(x) MRN_STR_(x)
#define MRN_PASTE_(a, b, c) a##b##c
#define MRN_PASTE(a, b, c) MRN_PASTE_(a, b, c)

/* The loader finds the component by this symbol: mca_rcache_<name>_component. */
#define mca_rcache_mrnotify_component MRN_PASTE(mca_rcache_, MRN_RCACHE_NAME, _component)
#define MRN_RCACHE_NAME_STR MRN_STR(MRN_RCACHE_NAME)
#define MRN_IS_SHADOW_ (sizeof(MRN_RCACHE_NAME_STR) == sizeof("grdma"))
/* How messages name this component: "rcache mrnotify" or "rcache grdma (mrnotify)". */
#define MRN_LOG_PREFIX (MRN_IS_SHADOW_ ? "rcache " MRN_RCACHE_NAME_STR " (mrnotify)" : "rcache mrnotify")

BEGIN_C_DECLS

/* Registrations made outside the cache (BYPASS, PERSIST, INVALID). */
#define MRN_REG_FLAG_UNCACHED MCA_RCACHE_FLAGS_MOD_RESV0

typedef struct mrn_rcache_component {
	mca_rcache_base_component_t super;

	/* MCA parameter storage (owned by the MCA variable system). */
	char *monitor;
	char *max_pinned;
	char *max_entries;
	char *fork_policy;
	bool print_stats;
	int verbose;
	char *usage;

	/* Their indices, to tell values set by the user from defaults. */
	int var_monitor, var_max_pinned, var_max_entries, var_fork;

	/* Parsed. */
	mrn_monitor_t monitor_kind;
	uint64_t max_pinned_bytes;
	uint64_t max_entries_count;
	mrn_fork_policy_t fork_kind;
	/* A parameter had a bad value: no cache is created. */
	bool config_error;
} mrn_rcache_component_t;

OPAL_DECLSPEC extern mrn_rcache_component_t mca_rcache_mrnotify_component;

/*
 * Ranges reported by Open MPI's memory hooks (monitor "none"), queued
 * without locks or allocation (the hook may run inside free() or munmap()),
 * applied by the next call into the cache. When it overflows, everything is
 * invalidated.
 */
#define MRN_HOOK_RING_SIZE 1024

struct mrn_hook_slot {
	uint64_t seq;
	uintptr_t start;
	size_t len;
};

struct mrn_hook_ring {
	uint64_t head;			/* next ticket of producers */
	char pad0[56];
	uint64_t tail;			/* next ticket of the consumer */
	char pad1[56];
	int overflow;
	uint64_t queued;		/* statistics */
	uint64_t overflows;
	struct mrn_hook_slot slots[MRN_HOOK_RING_SIZE];
};

/*
 * One libmrnotify cache, shared by every module that names the same cache
 * and registers through the same callbacks and context.
 */
typedef struct mrn_shared_cache {
	struct mrn_shared_cache *next;
	char *name;			/* copied: callers free theirs after init */
	int refs;			/* modules using it (component lock) */
	void *reg_data;
	size_t sizeof_reg;
	int (*register_mem)(void *reg_data, void *base, size_t size,
			    mca_rcache_base_registration_t *reg);
	int (*deregister_mem)(void *reg_data, mca_rcache_base_registration_t *reg);
	mrn_cache_t *cache;
	mrn_monitor_t monitor;		/* what the library uses */
	bool keep_idle;			/* leave_pinned as decided at creation */
	bool hooks;			/* fed by Open MPI's memory hooks */
	struct mrn_hook_ring *ring;	/* when hooks */
	uint64_t uncached_live;		/* atomics */
	uint64_t uncached_total;
	uint64_t hook_invalidations;
} mrn_shared_cache_t;

typedef struct mrn_rcache_module {
	mca_rcache_base_module_t super;
	mca_rcache_base_resources_t resources;	/* cache_name points to name */
	char *name;
	mrn_shared_cache_t *shared;
} mrn_rcache_module_t;

/* rcache_mrnotify_module.c */
void mrn_module_setup(mrn_rcache_module_t *module);
int mrn_reg_callback(void *context, void *addr, size_t len, uint32_t access, void *payload);
int mrn_dereg_callback(void *context, void *payload);
void mrn_hook_ring_init(struct mrn_hook_ring *ring);

/* rcache_mrnotify_component.c */
void mrn_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mrn_shared_release(mrn_shared_cache_t *shared);

END_C_DECLS

#endif

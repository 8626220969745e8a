/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The backend's shared state and the functions its files call in each
 * other (see activation.c for what the plugin does, docs/ucx.md for why).
 * The backend is what the preloaded libmrnotify-ucx.so (shim.c, which owns
 * the hit paths) loads for the UCX release it was built against.
 *
 * The files, one purpose each:
 *   activation.c     settings, the decision to become UCX's unmap source,
 *                    ucp_init_version(), attaching to the shim, exit
 *   drain.c          the generation moved: the dead ranges the library's
 *                    validity service (mrn_watch_set_*, which watches each
 *                    range once for every cache) delivers become
 *                    ucm_vm_munmap(); the word the hit paths follow
 *   rcache_wrap.c    our callbacks around each cache's, ucs_rcache_create(),
 *                    ucs_rcache_destroy(), ucm_set_event_handler(),
 *                    ucm_test_external_events()
 *   shim.c           (the preloaded object, not the backend) the check on
 *                    every lookup: ucs_rcache_get() and (UCX 1.14 on) UCP's
 *                    public entry points; the assembly is in entry_<arch>.S,
 *                    the list in entry_list.h
 *   lookup_hook.c    UCX's own check at lookup, where libucs has the hook of
 *                    ucx-plugin/upstream/ (not in any UCX release)
 *   fork.c           the library's fork story: prepare, parent, child
 *   verbs_fork.c     ibv_fork_init()
 *   ucx_versions.h   what changed between UCX releases (shared with the
 *                    tests and the bench)
 */
#ifndef MRN_UCX_PLUGIN_H
#define MRN_UCX_PLUGIN_H

/* dlsym(RTLD_NEXT), RTLD_NOLOAD. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#ifdef HAVE_CONFIG_H
#include "config.h" /* MRN_DEBUG */
#endif

#include <mrnotify.h>

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>
#include <ucs/memory/rcache.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "entry_list.h"
#include "shim.h"
#include "ucx_versions.h"

/* configure refuses these with the reasons; the source says so too. */
#if UCP_API_MAJOR != 1 || UCP_API_MINOR < 13
#error "libmrnotify-ucx supports UCX 1.13 and 1.17 to 1.23"
#elif UCP_API_MINOR >= 14 && UCP_API_MINOR <= 16
#error "UCX 1.14 to 1.16: UCP's cache has no synchronous events, a drain would race its lookups"
#elif UCP_API_MINOR > MRN_UCX_NEWEST_KNOWN_MINOR && !defined(MRN_UCX_UNTESTED)
#error "a UCX newer than the newest tested: configure --enable-ucx-untested builds for it"
#endif

/* The backend exports its attach function alone (shim.h). */
#define MRN_UCX_EXPORT __attribute__((visibility("default")))
#define MRN_UCX_LIKELY(x)   __builtin_expect(!!(x), 1)
#define MRN_UCX_UNLIKELY(x) __builtin_expect(!!(x), 0)

typedef struct mrn_ucx_config {
	int enable; /* UCS_YES, UCS_NO or UCS_TRY */
	int stats;
	int lookup_hook; /* use UCX's lookup hook where libucs has it */
} mrn_ucx_config_t;

/* One rcache we watch for: UCX's callbacks and where our per-region data is. */
typedef struct mrn_ucx_rcache {
	const ucs_rcache_ops_t *ops;
	void *context;
	size_t trailer; /* offset of struct mrn_ucx_region in a region */
	ucs_rcache_t *rcache;
	/*
	 * The cache's own VM_UNMAPPED handler (seen when it registers it):
	 * invalidates a range in this cache only.
	 */
	ucm_event_callback_t unmapped_cb;
	void *unmapped_arg;
	char name[40];
	int hooked; /* follows our word through UCX's lookup hook */
	struct mrn_ucx_rcache *next;
} mrn_ucx_rcache_t;

/*
 * Appended to every region of a watched rcache (UCX zeroes it): the
 * region's hold on its range in the watch set (0: not watched). A hold
 * from before fork() is refused by the child's set.
 */
typedef struct mrn_ucx_region {
	uint64_t hold;
} mrn_ucx_region_t;

typedef struct mrn_ucx_stats {
	uint64_t checks;          /* lookups that compared the generation */
	uint64_t entry_checks;    /* UCP entry points that did (UCX >= 1.14) */
	uint64_t drains;          /* generation moved: dirty list read */
	uint64_t ranges;          /* ranges turned into ucm_vm_munmap() */
	uint64_t watched;         /* regions whose range is watched */
	uint64_t shared;          /* ... through a watch another region made */
	uint64_t unwatched;       /* regions deregistered */
	uint64_t unwatched_dirty; /* watches removed that had gone invalid, undrained */
	uint64_t watch_failures;  /* regions kept out of their cache instead */
	uint64_t rcaches;         /* rcaches created with our callbacks */
	uint64_t hooked;          /* ... of them checked by UCX's lookup hook */
	uint64_t hook_refreshes;  /* the hook's calls to drain */
} mrn_ucx_stats_t;

/* What activation decided. */
typedef enum mrn_ucx_state {
	MRN_UCX_STATE_NEW,         /* UCX not used yet: not activated */
	MRN_UCX_STATE_OFF,         /* UCX_MRNOTIFY_ENABLE=no */
	MRN_UCX_STATE_INACTIVE,    /* cannot be used (try): UCX runs as configured */
	MRN_UCX_STATE_REFUSED,     /* cannot be used (yes, or a bad setting): UCP contexts fail */
	MRN_UCX_STATE_ACTIVE,      /* the kernel is UCX's VM_UNMAPPED source */
} mrn_ucx_state_t;

typedef ucs_status_t (*mrn_ucx_create_fn)(const ucs_rcache_params_t *, const char *,
					  ucs_stats_node_t *, ucs_rcache_t **);
typedef void (*mrn_ucx_destroy_fn)(ucs_rcache_t *);
typedef ucs_status_t (*mrn_ucx_test_fn)(int);
typedef ucs_status_t (*mrn_ucx_init_fn)(unsigned, unsigned, const ucp_params_t *,
					const ucp_config_t *, ucp_context_h *);
typedef ucs_status_t (*mrn_ucx_set_handler_fn)(int, int, ucm_event_callback_t, void *);

/*
 * Who may touch what:
 *  - Written when the shim attaches the backend, read-only after: hot,
 *    real_*, version, table_added.
 *  - Written by the one activation (pthread_once) before it publishes
 *    state with a release store, read-only after: config, config_filled,
 *    refusal, why. Read state with mrn_ucx_state().
 *  - Guarded by lock (held across fork(): fork.c): set (the pointer; the
 *    set itself is thread safe), rcaches, and the statistics but for the four counted with atomics from paths that do
 *    not take it (checks, entry_checks, watch_failures, hook_refreshes:
 *    mrn_ucx_count).
 *  - *hot (entry_hot.h, the shim's): read without any lock by the hit
 *    paths; generation and seen are stored with atomics, seen only under
 *    lock.
 * The lock is never held while UCX takes a lock of its own that UCX may
 * hold when it calls us, except the one documented call: a drain calls
 * ucm_vm_munmap() under it, which takes each cache's locks (UCX calls our
 * mem_reg and mem_dereg without the lock, so no cycle).
 */
struct mrn_ucx_globals {
	mrn_ucx_hot_t *hot;
	mrn_ucx_state_t state;
	pthread_once_t once;
	mrn_ucx_config_t config;
	int config_filled;
	int table_added;      /* our table is in UCX's list */
	unsigned version[3];  /* the running UCX's, from the shim */
	ucs_status_t refusal; /* REFUSED: what ucp_init returns */
	char why[200];        /* not ACTIVE: the reason, for messages */
	mrn_watch_set_t *set;
	pthread_mutex_t lock;
	uintptr_t lock_owner; /* pthread_self() of the holder, 0: none (mrn_ucx_lock) */
	mrn_ucx_rcache_t *rcaches;
	mrn_ucx_stats_t stats;
	mrn_ucx_create_fn real_create;
	mrn_ucx_destroy_fn real_destroy;
	mrn_ucx_test_fn real_test_external;
	mrn_ucx_init_fn real_init;
	mrn_ucx_set_handler_fn real_set_handler;
};

extern struct mrn_ucx_globals mrn_ucx;

/* Never moves: the hit paths compare it when the plugin is inactive. */
extern const volatile uint64_t mrn_ucx_still;

/*
 * The lock, with its holder noted, so that a function that runs with it held
 * says so in code (MRN_UCX_ASSERT_LOCKED, checked in --enable-debug builds).
 * A plain mutex, not an error-checking one (fork.c says why); the holder is
 * pthread_self(), which a forked child's thread keeps, so the child's
 * unlock of what prepare locked passes the check.
 */
static inline void mrn_ucx_lock(void)
{
	pthread_mutex_lock(&mrn_ucx.lock);
	__atomic_store_n(&mrn_ucx.lock_owner, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
}

static inline void mrn_ucx_unlock(void)
{
	__atomic_store_n(&mrn_ucx.lock_owner, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&mrn_ucx.lock);
}

static inline int mrn_ucx_locked_here(void)
{
	return __atomic_load_n(&mrn_ucx.lock_owner, __ATOMIC_RELAXED) == (uintptr_t)pthread_self();
}

#ifdef MRN_DEBUG
#define MRN_UCX_ASSERT_LOCKED()                                                                    \
	do {                                                                                       \
		if (!mrn_ucx_locked_here()) {                                                      \
			fprintf(stderr, "libmrnotify-ucx: %s: called without the lock\n", __func__); \
			abort();                                                                   \
		}                                                                                  \
	} while (0)
#else
#define MRN_UCX_ASSERT_LOCKED() ((void)0)
#endif

static inline mrn_ucx_state_t mrn_ucx_state(void)
{
	return __atomic_load_n(&mrn_ucx.state, __ATOMIC_ACQUIRE);
}

static inline void mrn_ucx_count(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

/* The generation moved since the last drain. */
static inline int mrn_ucx_moved(void)
{
	return __atomic_load_n(mrn_ucx.hot->generation, __ATOMIC_ACQUIRE) !=
	       __atomic_load_n(&mrn_ucx.hot->seen, __ATOMIC_RELAXED);
}

/*
 * With the lock held: points the hit paths and every cache checked by UCX's
 * lookup hook at GEN (the set's word, or mrn_ucx_still) as drained up to
 * SEEN. The one way the word changes, so that the two never differ.
 */
void mrn_ucx_follow(const volatile uint64_t *gen, uint64_t seen);

/*
 * What the backend puts in place of UCX's functions (MRN_UCX_WRAPPED),
 * each calling UCX's own through real_* (activation.c, rcache_wrap.c,
 * verbs_fork.c).
 */
ucs_status_t mrn_ucx_init_version(unsigned api_major_version, unsigned api_minor_version,
				  const ucp_params_t *params, const ucp_config_t *config,
				  ucp_context_h *context_p);
ucs_status_t mrn_ucx_rcache_create(const ucs_rcache_params_t *params, const char *name,
				   ucs_stats_node_t *stats_parent, ucs_rcache_t **rcache_p);
void mrn_ucx_rcache_destroy(ucs_rcache_t *rcache);
ucs_status_t mrn_ucx_set_event_handler(int events, int priority, ucm_event_callback_t cb,
				       void *arg);
ucs_status_t mrn_ucx_test_external_events(int events);
int mrn_ucx_fork_init(void);

/* activation.c */
void mrn_ucx_activate(void);

/* drain.c */
void mrn_ucx_drain(void);
void mrn_ucx_slow(int kind); /* the hit paths' slow path (MRN_UCX_SLOW_*) */
int mrn_ucx_self_test(const char **why);

/* lookup_hook.c; attach and follow with the lock held */
void mrn_ucx_hook_resolve(void *(*real)(const char *name));
int mrn_ucx_hook_present(void);
void mrn_ucx_hook_attach(mrn_ucx_rcache_t *rc);
void mrn_ucx_hook_follow(void);

/* fork.c: the shim's pthread_atfork() handlers call the first three. */
void mrn_ucx_fork_prepare(void);
void mrn_ucx_fork_parent(void);
void mrn_ucx_fork_child(void);

#endif

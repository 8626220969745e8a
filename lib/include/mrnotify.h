/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify: a registration cache for RDMA memory ("leave pinned") that
 * learns of unmaps from the kernel, not from hooks in glibc.
 *
 * The caller supplies the functions that register and deregister memory
 * (ibv_reg_mr / ibv_dereg_mr, or a transport's callbacks) and the size of
 * the data they keep per registration (the "payload", e.g. a struct ibv_mr
 * pointer). mrn_get() returns a referenced entry that covers a range,
 * registering it on a miss; mrn_put() drops the reference.
 *
 * How the cache hears of unmaps is its "monitor":
 *   kernel  /dev/mrnotify (mrnotify.ko): every registration is tracked by the
 *           kernel; a hit costs one load and compare of a counter the kernel
 *           bumps before munmap() returns. The default when the device opens.
 *   uffd    userfaultfd unmap/remove/remap events read by a monitor thread;
 *           works on stock kernels. No window: the kernel holds the
 *           unmapping thread until the monitor has read the event, and the
 *           monitor moves the counter before each read, so a get() that
 *           starts after munmap(), mmap(MAP_FIXED), mremap() or
 *           madvise(MADV_DONTNEED) has returned misses, also in the thread
 *           that unmapped. Blind to hole punches and truncation of shared
 *           memory: registrations of shared or file-backed pages are
 *           uncached. Registers whole 2 MiB granules around cached ranges
 *           (docs/libmrnotify.md).
 *   none    no monitor: idle entries are not kept (leave_pinned is off), so
 *           a registration lives only while it is in use. Invalidations can
 *           still be fed with mrn_invalidate_range().
 *   external  no monitor of its own, but idle entries are kept: the caller
 *           promises to report every unmap with mrn_invalidate_range() (for
 *           instance from memory hooks it already has, as Open MPI's
 *           patcher). As safe as those hooks, and no safer. Never chosen by
 *           AUTO nor by the MRNOTIFY_MONITOR environment variable.
 * MRN_MONITOR_AUTO picks kernel, then uffd, then none, and says why at
 * verbose level 1.
 *
 * Thread safety: every function may be called from any thread. Hits take no
 * exclusive lock and make no system call.
 *
 * Fork: registrations are never inherited. In a child the cache starts
 * empty, never calls deregister for the parent's registrations, and opens
 * its own monitor when first used. Whether registered pages are also made
 * non-inheritable (MADV_DONTFORK) is the fork policy: `auto` (the default)
 * does it only on kernels older than 5.13, which do not keep pages pinned
 * for DMA with the parent across fork; `dontfork` always (a child then
 * cannot touch anything that shares a page with a registered buffer);
 * `none` never. Advice is counted per page, so overlapping registrations do
 * not undo each other, and bounded by vm.max_map_count: registrations past
 * that budget are not cached.
 *
 * Registrations that are not cached ("uncached": the limits are reached and
 * nothing is idle, the monitor cannot watch the memory, fork advice is out
 * of budget) are still handed out, and deregistered at their last put.
 *
 * Environment (read by mrn_config_init; a bad value is an error):
 *   MRNOTIFY_MONITOR=auto|kernel|uffd|none   MRNOTIFY_LEAVE_PINNED=0|1
 *   MRNOTIFY_MAX_PINNED=<bytes, K/M/G/T suffix, 0 = unlimited>
 *   MRNOTIFY_MAX_ENTRIES=<count, 0 = unlimited>
 *   MRNOTIFY_FORK=auto|dontfork|none   MRNOTIFY_VERBOSE=<0..3>
 *   MRNOTIFY_STATS=0|1 (print statistics when the cache is destroyed)
 */
#ifndef MRNOTIFY_H
#define MRNOTIFY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The source interface's version: raised by every addition and every
 * change; the soname (libmrnotify.so.0) and the symbol node (MRNOTIFY_1)
 * change only as docs/libmrnotify.md ("Versions") says.
 */
#define MRN_API_VERSION 8

typedef struct mrn_cache mrn_cache_t;
typedef struct mrn_entry mrn_entry_t;

typedef enum mrn_monitor {
	MRN_MONITOR_AUTO = 0,
	MRN_MONITOR_KERNEL,
	MRN_MONITOR_UFFD,
	MRN_MONITOR_NONE,
	/* 4 is no monitor: refused with -EINVAL (the values above are ABI). */
	MRN_MONITOR_EXTERNAL = 5,
	/*
	 * kernel, else uffd, else external (API 5): for callers whose own
	 * memory hooks report unmaps, when neither the kernel nor userfaultfd
	 * can. Like external, only code chooses it, never MRNOTIFY_MONITOR.
	 */
	MRN_MONITOR_AUTO_EXTERNAL = 6
} mrn_monitor_t;

typedef enum mrn_fork_policy {
	MRN_FORK_DONTFORK = 0, /* madvise(MADV_DONTFORK) registered pages */
	MRN_FORK_NONE,         /* leave it to the kernel (copy-on-fork of pinned pages) */
	MRN_FORK_AUTO          /* dontfork before Linux 5.13, none since (the default) */
} mrn_fork_policy_t;

/*
 * Registers [addr, addr + len) with the given access flags (the caller's
 * own encoding, e.g. IBV_ACCESS_*), filling payload (payload_size bytes).
 * context is the cache's (mrn_config.context); arg is the one given to the
 * mrn_get() that missed (per-call state, as ucs_rcache_get's arg). Returns
 * 0 or a negative errno; -ENOMEM and -EAGAIN make the cache evict idle
 * entries and try again.
 */
typedef int (*mrn_register_fn)(void *context, void *arg, void *addr, size_t len, uint32_t access,
			       void *payload);
/* Deregisters what register_fn put in payload. Returns 0 or a negative errno. */
typedef int (*mrn_deregister_fn)(void *context, void *payload);

struct mrn_config {
	size_t size;      /* sizeof(struct mrn_config), set by mrn_config_init */
	const char *name; /* for messages and statistics; copied */
	mrn_register_fn reg;
	mrn_deregister_fn dereg;
	void *context;       /* passed to reg and dereg */
	size_t payload_size; /* bytes of payload per entry (<= 4096) */
	mrn_monitor_t monitor;
	mrn_fork_policy_t fork_policy;
	int leave_pinned;          /* 1: keep idle entries registered (LRU) */
	uint64_t max_pinned_bytes; /* 0 = unlimited */
	uint64_t max_entries;      /* 0 = unlimited */
	int verbose;               /* 0 errors only .. 3 debug; messages go to stderr */
	int print_stats;           /* print statistics in mrn_cache_destroy */
};

/*
 * Defaults (auto monitor, leave_pinned on, no limits, fork policy auto), then the
 * MRNOTIFY_* environment. Returns 0, or -EINVAL with a message on stderr
 * naming the bad variable.
 */
int mrn_config_init(struct mrn_config *config);

/* Parse helpers for configuration front ends (MCA, UCX). 0 or -EINVAL. */
int mrn_monitor_from_string(const char *s, mrn_monitor_t *out);
const char *mrn_monitor_to_string(mrn_monitor_t m);
int mrn_fork_policy_from_string(const char *s, mrn_fork_policy_t *out);
const char *mrn_fork_policy_to_string(mrn_fork_policy_t p);
int mrn_size_from_string(const char *s, uint64_t *out);

/*
 * Creates a cache. Fails with -EINVAL for a bad configuration, -ENODEV when
 * the requested monitor cannot be used (the reason is printed), -ENOMEM.
 */
int mrn_cache_create(const struct mrn_config *config, mrn_cache_t **cache);

/*
 * Deregisters every idle entry and frees the cache. Entries still referenced
 * are deregistered too (and reported at verbose level 1): the caller must
 * not use them afterwards.
 */
void mrn_cache_destroy(mrn_cache_t *cache);

/*
 * Returns in *entry a referenced entry that covers [addr, addr + len) with
 * at least the access flags asked for. arg is handed to the register
 * function if this call registers (NULL if unused). On a miss, or when the cached entry
 * lacks access (it is replaced by one with the union of both), calls the
 * register function. Returns 0 or a negative errno (-EINVAL for len 0 or a
 * range that wraps).
 */
int mrn_get(mrn_cache_t *cache, void *addr, size_t len, uint32_t access, void *arg,
	    mrn_entry_t **entry);

/*
 * mrn_get() with flags (API 6). MRN_GET_UNCACHED: never looked up or kept,
 * a registration of its own, made with the same register function (and
 * the same retry after evicting an idle entry when it fails with -ENOMEM
 * or -EAGAIN), deregistered at its mrn_put(); counted in mrn_stats.uncached.
 * For registrations a cache must not keep (a caller's "bypass" or
 * "persistent" ones). MRN_GET_EXACT, only with MRN_GET_UNCACHED: exactly
 * [addr, addr + len), not whole pages, and no fork advice: for memory the
 * kernel does not map, such as a device's. 0 is mrn_get(). Unknown flags:
 * -EINVAL.
 */
#define MRN_GET_UNCACHED 0x1u
#define MRN_GET_EXACT    0x2u
int mrn_get_flags(mrn_cache_t *cache, void *addr, size_t len, uint32_t access, uint32_t flags,
		  void *arg, mrn_entry_t **entry);

/* Drops the reference mrn_get() took. */
void mrn_put(mrn_cache_t *cache, mrn_entry_t *entry);

/* The entry's payload and registered range (it may be larger than asked). */
void *mrn_entry_payload(const mrn_entry_t *entry);
/* The entry whose payload this is (for glue that hands payloads out). */
mrn_entry_t *mrn_entry_from_payload(void *payload);
void *mrn_entry_addr(const mrn_entry_t *entry);
size_t mrn_entry_length(const mrn_entry_t *entry);
uint32_t mrn_entry_access(const mrn_entry_t *entry);

/*
 * Looks up without registering: a referenced entry covering the range, or
 * -ENOENT. Release it with mrn_put().
 */
int mrn_find(mrn_cache_t *cache, void *addr, size_t len, mrn_entry_t **entry);

/*
 * Tells the cache that [addr, addr + len) changed (for callers with their own
 * memory hooks). Idle entries overlapping it are deregistered, entries in use
 * are deregistered when released. Returns the number of entries invalidated.
 */
long mrn_invalidate_range(mrn_cache_t *cache, void *addr, size_t len);

/* Deregisters one idle entry, the least recently used. 1 if one was, else 0. */
int mrn_evict_one(mrn_cache_t *cache);

/* Deregisters every idle entry. Returns how many. */
long mrn_flush(mrn_cache_t *cache);

/* The monitor in use (never AUTO). */
mrn_monitor_t mrn_cache_monitor(const mrn_cache_t *cache);

struct mrn_stats {
	uint64_t hits;
	uint64_t misses;          /* register function calls for new entries */
	uint64_t access_upgrades; /* misses caused by missing access rights */
	uint64_t evictions;       /* idle entries dropped for limits or by request */
	uint64_t invalidations;   /* entries invalidated by the monitor or the caller */
	uint64_t drains;          /* times the monitor's dirty list was read */
	uint64_t retries;         /* registrations retried (raced an unmap, or out of resources) */
	uint64_t register_failures;
	uint64_t pinned_bytes;         /* now: bytes covered by live registrations */
	uint64_t entries;              /* now: entries in the cache (in use or idle) */
	uint64_t idle_entries;         /* now */
	uint64_t in_use_detached;      /* now: invalidated entries still referenced */
	uint64_t uncached;             /* registrations handed out uncached (see above) */
	uint64_t merges;               /* misses that merged overlapping entries into one */
	uint64_t drain_failures;       /* drains that failed (everything idle was dropped) */
	uint64_t fork_advice_failures; /* MADV_DONTFORK failed or was out of budget */
	/* Added later: callers built without them pass a smaller size (see below). */
	uint64_t uffd_ranges;        /* now: userfaultfd registrations that may split a mapping */
	uint64_t uffd_out_of_budget; /* registrations uncached: uffd_ranges at its bound */
	/* API 7: monitors none and external (mrn_report_unmap). */
	uint64_t hook_reports;   /* unmaps reported and queued */
	uint64_t hook_overflows; /* ... that found the queue full: merged (2 MiB granules) */
	/* API 8: the kernel's validity word per registration. */
	uint64_t valid_word_hits; /* hits (counted in hits too) served by the entry's own
				   * validity word while something else had become invalid:
				   * each a drain not made */
};

/*
 * Every field of struct mrn_stats, in order: X(field) for each. The one list
 * of statistics names, for printing them (mrn_cache_print_stats, the Open
 * MPI component, the UCX plugin):
 *   #define PRINT(f) printf(" %s %llu", #f, (unsigned long long)s.f);
 *   MRN_STATS_FIELDS(PRINT)
 */
#define MRN_STATS_FIELDS(X)                                                                        \
	X(hits)                                                                                    \
	X(misses) X(access_upgrades) X(evictions) X(invalidations) X(drains) X(retries)            \
		X(register_failures) X(pinned_bytes) X(entries) X(idle_entries) X(in_use_detached) \
			X(uncached) X(merges) X(drain_failures) X(fork_advice_failures)            \
				X(uffd_ranges) X(uffd_out_of_budget) X(hook_reports) X(hook_overflows) \
					X(valid_word_hits)

/*
 * Fills *stats. size is sizeof(struct mrn_stats) as the caller was built;
 * a caller built against an older header, with fewer fields, gets those.
 * 0 or -EINVAL.
 */
int mrn_cache_stats(mrn_cache_t *cache, struct mrn_stats *stats, size_t size);

/*
 * From memory hooks (monitors none and external, API 7): an unmap of
 * [addr, addr + len), queued without a lock or an allocation, so that it
 * may be called inside free(), munmap() or a signal handler, from any
 * thread; the cache's next call applies it before it looks anything up (a
 * registration over the range is not handed out again). Ranges outside
 * everything the cache registered are dropped. A full queue (1024 ranges)
 * merges ranges into one span of 2 MiB granules, whose registrations are
 * all invalidated. 1 queued, 0 dropped, -EOPNOTSUPP when the cache's
 * monitor hears unmaps itself (kernel, uffd), -EINVAL. Not during
 * mrn_cache_destroy().
 */
int mrn_report_unmap(mrn_cache_t *cache, void *addr, size_t len);

/* Writes the statistics as text, one line, to stderr. */
void mrn_cache_print_stats(mrn_cache_t *cache);

/* Memory the cache uses per entry beyond the payload (for benchmarks). */
size_t mrn_cache_bytes_per_entry(mrn_cache_t *cache);

/*
 * Watches without a cache, for glue that feeds another cache (UCX's rcache)
 * from the kernel: watch ranges under cookies, compare the generation on the
 * lookup path, and drain what became invalid. Only the kernel monitor can
 * name ranges by cookie; mrn_watch_open() accepts MRN_MONITOR_KERNEL (or
 * AUTO, which then means kernel) and fails with -ENODEV when the device is
 * missing.
 */
typedef struct mrn_watch mrn_watch_t;

int mrn_watch_open(mrn_monitor_t monitor, mrn_watch_t **watch);
void mrn_watch_close(mrn_watch_t *watch);

/*
 * In a forked child, instead of mrn_watch_close(): lets go of the watch the
 * parent opened (its file descriptor, which in the child answers only the
 * parent) without touching the parent's watches or its status page, which
 * the child does not have. No call on the watch may have been in progress
 * in another thread at fork (hold the lock that serialises them across
 * fork, as a pthread_atfork prepare handler can). API 4.
 */
void mrn_watch_abandon(mrn_watch_t *watch);

/* Watches [addr, addr + len) under cookie; *id is the handle for removal. */
int mrn_watch_add(mrn_watch_t *watch, void *addr, size_t len, uint64_t cookie, uint64_t *id);

/*
 * Stops watching. Returns 0, or 1 when the range had already become invalid
 * and had not been drained yet (it will not be reported by a drain).
 */
int mrn_watch_remove(mrn_watch_t *watch, uint64_t id);

/*
 * The word that moves when something watched became invalid: read it with
 * an acquire load and compare it with the generation the last drain gave.
 */
const uint64_t *mrn_watch_generation(const mrn_watch_t *watch);

typedef void (*mrn_watch_fn)(void *arg, uint64_t cookie, void *addr, size_t len);

/*
 * Calls fn for each watched range that became invalid (each is reported
 * once and is no longer watched), then stores in *generation the value of
 * the generation word that everything reported corresponds to. Thread safe.
 * Returns the number reported, or a negative errno.
 */
long mrn_watch_drain(mrn_watch_t *watch, mrn_watch_fn fn, void *arg, uint64_t *generation);

/*
 * The validity service (API 7), for glue that keeps another cache right
 * (UCX's rcache, libfabric's MR cache): the ranges that cache holds, each
 * watched once in the kernel however many regions and caches hold it, and
 * the ranges the kernel reports dead, delivered to that cache. Its rules:
 * one kernel watch per range at a time, shared and counted; each death
 * delivered once; after a failed drain every held range is delivered dead;
 * in a forked child every range held at fork() is delivered dead, handles
 * from before fork() are refused, and the first drain opens the child's
 * own kernel context. Thread safe. docs/libmrnotify.md, "The validity
 * service".
 */
typedef struct mrn_watch_set mrn_watch_set_t;

/*
 * Opens the kernel monitor for a set of at most max_ranges ranges (0: no
 * bound). 0, -ENODEV when /dev/mrnotify is missing, or another -errno.
 */
int mrn_watch_set_open(size_t max_ranges, mrn_watch_set_t **set);
void mrn_watch_set_close(mrn_watch_set_t *set);

/*
 * Holds [addr, addr + len): shares the range's live watch or makes one.
 * 0 with *handle (never 0) and *shared (1: the watch was live already; may
 * be NULL), or -ENOSPC, -EINVAL, -ENODEV, or the kernel's error.
 */
int mrn_watch_set_hold(mrn_watch_set_t *set, void *addr, size_t len, uint64_t *handle,
		       int *shared);

/*
 * Lets go of a handle: 0; 1 when it was the range's last holder and its
 * watch had died undrained (it will not be delivered); -ESTALE for a
 * handle from before fork() or one already released.
 */
int mrn_watch_set_release(mrn_watch_set_t *set, uint64_t handle);

/*
 * The hit path: the word to read with an acquire load and compare with
 * what the last mrn_watch_set_deliver() returned in *drained. The pointer
 * changes across fork() and the child's first deliver: read it again after
 * each of those.
 */
const uint64_t *mrn_watch_set_generation(const mrn_watch_set_t *set);

typedef void (*mrn_death_fn)(void *arg, void *addr, size_t len);

/*
 * Drains the kernel's dirty list (opening the context of a forked child
 * first) and calls fn for each range that died
 * and was not delivered yet; *drained is then the value the generation
 * word had when everything delivered was found. Returns the number
 * delivered, or a negative errno when the drain failed (every held range
 * was then delivered as dead, and *drained is the word's current value).
 * Deliveries are serialised: when one returns, every death found before
 * it was delivered. fn may call hold and release, not deliver.
 */
long mrn_watch_set_deliver(mrn_watch_set_t *set, mrn_death_fn fn, void *arg, uint64_t *drained);

/*
 * Watches a scratch page, unmaps it and checks that the kernel reported
 * it: 0, or a negative errno with *why (a static string).
 */
int mrn_watch_set_self_test(mrn_watch_set_t *set, const char **why);

/*
 * For pthread_atfork() handlers that the caller registers: prepare holds
 * the set's lock across fork(), parent and child release it; the child's
 * set has none of the parent's watches (see above). No other call on the
 * set may be in progress in the thread that forks.
 */
void mrn_watch_set_fork_prepare(mrn_watch_set_t *set);
void mrn_watch_set_fork_parent(mrn_watch_set_t *set);
void mrn_watch_set_fork_child(mrn_watch_set_t *set);

struct mrn_watch_stats {
	uint64_t holds;          /* holds that succeeded */
	uint64_t shared;         /* ... through a watch that was live already */
	uint64_t hold_failures;  /* holds refused */
	uint64_t releases;       /* handles released */
	uint64_t released_dirty; /* last releases of a watch that had died undrained */
	uint64_t drains;         /* drains of the kernel's dirty list */
	uint64_t drain_failures;
	uint64_t deaths;         /* ranges found dead (including failed drains, fork) */
	uint64_t delivered;      /* deaths delivered */
	uint64_t ranges;         /* ranges now held or waiting for delivery */
	uint64_t watched;        /* live kernel watches now */
};

/* Copies min(size, sizeof(*stats)) bytes of the counts; 0 or -EINVAL. */
int mrn_watch_set_stats(mrn_watch_set_t *set, struct mrn_watch_stats *stats, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* MRNOTIFY_H */

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify-ucx: makes mrnotify.ko the source of UCX's memory events, so
 * that UCX's registration caches stay correct without UCM's glibc patching
 * (which misses raw system calls, static binaries and several language
 * runtimes, and which, once turned off, silently turns UCX's caches off).
 *
 * Loaded with LD_PRELOAD (see mrnotify-ucx-run), for UCX 1.13.x only:
 *
 *  - At load, once /dev/mrnotify is open and has passed a self-test, it tells
 *    UCM that UCM_EVENT_VM_UNMAPPED is "external" (reported by us, not by
 *    hooks). Declaring it without a working source would leave the caches
 *    blind, so nothing is declared when the device cannot be used.
 *  - It interposes ucs_rcache_create(): every cache that listens to
 *    VM_UNMAPPED gets our registration callbacks around its own, which ask
 *    the kernel to watch each region's range (the region's, not the user
 *    buffer's: UCX merges and aligns regions) before UCX pins it, and stop
 *    watching when UCX deregisters it.
 *  - It interposes ucs_rcache_get(). In UCX 1.13 every lookup of every cache
 *    (UCP's, the IB memory domain's, knem, xpmem, gdr_copy, rocm) is a call
 *    through the PLT to that function, so this is the one place to check the
 *    kernel's generation word: one load and compare. When it moved, the
 *    dirty list is drained and each dead range becomes ucm_vm_munmap(),
 *    which removes it from every cache before the lookup proceeds.
 *  - It interposes ucm_test_external_events() so that callers that ask
 *    whether external VM_UNMAPPED events work (Open MPI with
 *    opal_common_ucx_opal_mem_hooks=1) get our self-test's answer instead of
 *    UCM's, which expects events synchronously inside munmap().
 *
 * Settings: UCX_MRNOTIFY_ENABLE=try|yes|no, UCX_MRNOTIFY_STATS=y|n, a
 * registered UCX configuration table (ucx_info -c shows them, UCX does not
 * call them unused).
 */
#define _GNU_SOURCE
#include <mrnotify.h>
#include <linux/mrnotify.h>

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>
#include <ucs/config/parser.h>
#include <ucs/debug/log_def.h>
#include <ucs/memory/rcache.h>

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * The rcache params, ops and region layouts and the ucs_rcache_get()
 * signature changed in 1.14, 1.17 and 1.18, and from 1.14 on UCP's hits are
 * inlined and never call ucs_rcache_get(): building this file against
 * another UCX would compile, and silently miss lookups.
 */
#if UCP_API_MAJOR != 1 || UCP_API_MINOR != 13
#error "libmrnotify-ucx supports UCX 1.13.x only (it interposes ucs_rcache_*, whose ABI and call paths change with each minor release)"
#endif

#define MRN_UCX_EXPORT __attribute__((visibility("default")))
#define MRN_UCX_LIKELY(x) __builtin_expect(!!(x), 1)
#define MRN_UCX_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Cookie of the watch the self-test makes; region watches use slot numbers. */
#define MRN_UCX_SELFTEST_COOKIE UINT64_MAX

typedef struct mrn_ucx_config {
	int enable;	/* UCS_YES, UCS_NO or UCS_TRY */
	int stats;
} mrn_ucx_config_t;

static ucs_config_field_t mrn_ucx_config_table[] = {
	{"ENABLE", "try",
	 "Make the mrnotify kernel module (" MRN_DEVICE_PATH ") the source of UCX's\n"
	 "VM_UNMAPPED memory events, so that registration caches stay correct with UCM's\n"
	 "memory hooks off (UCX_MEM_MMAP_HOOK_MODE=none).\n"
	 " try - use it when the device opens and passes a self-test, else leave UCX as it is\n"
	 " yes - the same, but exit with an error when the device cannot be used\n"
	 " no  - do nothing",
	 ucs_offsetof(mrn_ucx_config_t, enable), UCS_CONFIG_TYPE_TERNARY},
	{"STATS", "n",
	 "Print the plugin's statistics (checks, drains, ranges invalidated, regions\n"
	 "watched) to stderr when the process exits.",
	 ucs_offsetof(mrn_ucx_config_t, stats), UCS_CONFIG_TYPE_BOOL},
	{NULL}
};

UCS_CONFIG_DECLARE_TABLE(mrn_ucx_config_table, "mrnotify (kernel memory events)", "MRNOTIFY_",
			 mrn_ucx_config_t)

typedef ucs_status_t (*mrn_ucx_create_fn)(const ucs_rcache_params_t *, const char *,
					  ucs_stats_node_t *, ucs_rcache_t **);
typedef void (*mrn_ucx_destroy_fn)(ucs_rcache_t *);
typedef ucs_status_t (*mrn_ucx_get_fn)(ucs_rcache_t *, void *, size_t, int, void *,
				       ucs_rcache_region_t **);
typedef ucs_status_t (*mrn_ucx_test_fn)(int);

/* One rcache we watch for: UCX's callbacks and where our per-region data is. */
typedef struct mrn_ucx_rcache {
	const ucs_rcache_ops_t *ops;
	void *context;
	size_t trailer;		/* offset of struct mrn_ucx_region in a region */
	ucs_rcache_t *rcache;
	char name[40];
	struct mrn_ucx_rcache *next;
} mrn_ucx_rcache_t;

/* Appended to every region of a watched rcache (UCX zeroes it). */
typedef struct mrn_ucx_region {
	uint32_t slot;		/* 0: not watched */
	uint32_t epoch;		/* the process generation the slot belongs to */
} mrn_ucx_region_t;

/*
 * The kernel's cookie for a region is a slot number, not the region's
 * address: a drain may report a region at any time, and a slot (ours, never
 * freed) can be written when the region itself might be gone.
 */
typedef struct mrn_ucx_slot {
	uint64_t id;		/* kernel watch id; 0 once the kernel dropped it */
	uintptr_t start;	/* the watched range, for invalidating it */
	size_t len;		/* without the kernel's help (see mrn_ucx_forget_all) */
	uint32_t next_free;
	uint32_t used;
} mrn_ucx_slot_t;

typedef struct mrn_ucx_stats {
	uint64_t checks;		/* lookups that compared the generation */
	uint64_t drains;		/* generation moved: dirty list read */
	uint64_t ranges;		/* ranges turned into ucm_vm_munmap() */
	uint64_t watched;		/* regions the kernel was asked to watch */
	uint64_t unwatched;		/* watches removed at deregistration */
	uint64_t unwatched_dirty;	/* ... that had gone invalid, undrained */
	uint64_t watch_failures;	/* regions kept out of the cache instead */
	uint64_t rcaches;		/* rcaches created with our callbacks */
} mrn_ucx_stats_t;

static struct {
	/*
	 * The hit path reads these two: the word the kernel bumps (a local
	 * one when inactive) and its value at the last drain.
	 */
	const volatile uint64_t *generation;
	uint64_t seen;
	int count_checks;
	int active;		/* the kernel is UCX's VM_UNMAPPED source */
	int child_reopen;	/* forked: open our own context before the next lookup */
	uint32_t epoch;
	mrn_ucx_config_t config;
	int config_filled;
	mrn_watch_t *watch;
	pthread_mutex_t lock;	/* watch table, slots, rcache list, drains */
	mrn_ucx_slot_t *slots;
	uint32_t nslots, slot_cap, free_slot;
	mrn_ucx_rcache_t *rcaches;
	mrn_ucx_stats_t stats;
	mrn_ucx_create_fn real_create;
	mrn_ucx_destroy_fn real_destroy;
	mrn_ucx_get_fn real_get;
	mrn_ucx_test_fn real_test_external;
} mrn_ucx = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Never moves: the hit path compares it when the plugin is inactive. */
static const volatile uint64_t mrn_ucx_still;
/* Reads 1 while seen is 0: makes a forked child's next lookup reopen. */
static const volatile uint64_t mrn_ucx_forked = 1;

static void mrn_ucx_count(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static void *mrn_ucx_resolve(const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (p == NULL) {
		/* Without the real function nothing can work: no way to go on. */
		fprintf(stderr, "libmrnotify-ucx: %s not found after this library (%s); is UCX loaded?\n",
			name, dlerror());
		abort();
	}
	return p;
}

/* ---- kernel watches ------------------------------------------------------ */

/* Lock held. 0 when no slot can be had (the region then stays unwatched). */
static uint32_t mrn_ucx_slot_alloc(void *start, size_t len)
{
	uint32_t s;

	if (mrn_ucx.free_slot != 0) {
		s = mrn_ucx.free_slot;
		mrn_ucx.free_slot = mrn_ucx.slots[s].next_free;
	} else {
		if (mrn_ucx.nslots == mrn_ucx.slot_cap) {
			uint32_t cap = mrn_ucx.slot_cap ? mrn_ucx.slot_cap * 2 : 1024;
			mrn_ucx_slot_t *p;

			if (cap <= mrn_ucx.slot_cap)
				return 0;
			p = realloc(mrn_ucx.slots, cap * sizeof(*p));
			if (p == NULL)
				return 0;
			mrn_ucx.slots = p;
			mrn_ucx.slot_cap = cap;
			if (mrn_ucx.nslots == 0)
				mrn_ucx.nslots = 1; /* slot 0 means "none" */
		}
		s = mrn_ucx.nslots++;
	}
	mrn_ucx.slots[s].id = 0;
	mrn_ucx.slots[s].start = (uintptr_t)start;
	mrn_ucx.slots[s].len = len;
	mrn_ucx.slots[s].used = 1;
	mrn_ucx.slots[s].next_free = 0;
	return s;
}

/* Lock held. */
static void mrn_ucx_slot_free(uint32_t s)
{
	mrn_ucx.slots[s].used = 0;
	mrn_ucx.slots[s].id = 0;
	mrn_ucx.slots[s].next_free = mrn_ucx.free_slot;
	mrn_ucx.free_slot = s;
}

/*
 * Lock held. Invalidates every range watched through the slot table, in
 * every cache, without asking the kernel: when a drain fails, and in a
 * forked child, whose watches were the parent's. Range by range: in UCX
 * 1.13 one ucm_vm_munmap() of the whole address space makes the page-table
 * search of a cache that spans less of it walk the address space (it
 * stops at the requested end, not at the table's).
 */
static void mrn_ucx_forget_all(void)
{
	for (uint32_t s = 1; s < mrn_ucx.nslots; s++) {
		if (!mrn_ucx.slots[s].used)
			continue;
		ucm_vm_munmap((void *)mrn_ucx.slots[s].start, mrn_ucx.slots[s].len);
		mrn_ucx.stats.ranges++;
	}
}

typedef struct mrn_ucx_drain_ctx {
	int selftest_seen;
} mrn_ucx_drain_ctx_t;

/*
 * Called for each watch the kernel reports dead, with the lock held. The
 * region's deregistration waits for the lock before it frees the slot, so
 * the slot is still this region's.
 */
static void mrn_ucx_drained(void *arg, uint64_t cookie, void *addr, size_t len)
{
	mrn_ucx_drain_ctx_t *ctx = arg;

	if (cookie == MRN_UCX_SELFTEST_COOKIE) {
		if (ctx != NULL)
			ctx->selftest_seen = 1;
		return;
	}
	if (cookie < mrn_ucx.nslots && mrn_ucx.slots[cookie].used)
		mrn_ucx.slots[cookie].id = 0; /* the kernel dropped it */
	ucs_trace("mrnotify: range %p..%p invalidated", addr, (char *)addr + len);
	/*
	 * Removes the range from every rcache now (or queues it on a cache
	 * whose page-table lock is busy; its next get drains that queue before
	 * looking up). Never deregisters inside: UCX defers that.
	 */
	ucm_vm_munmap(addr, len);
	mrn_ucx.stats.ranges++;
}

static void mrn_ucx_child_reopen(void);

/* The generation moved: apply what the kernel reports. */
static void __attribute__((noinline)) mrn_ucx_drain(mrn_ucx_drain_ctx_t *ctx)
{
	uint64_t gen;
	long n;

	pthread_mutex_lock(&mrn_ucx.lock);
	if (mrn_ucx.child_reopen)
		mrn_ucx_child_reopen();
	if (mrn_ucx.watch != NULL) {
		n = mrn_watch_drain(mrn_ucx.watch, mrn_ucx_drained, ctx, &gen);
		if (n < 0) {
			/* Nothing was taken: all we can do is forget everything. */
			ucs_error("mrnotify: draining %s failed: %s; invalidating every watched registration",
				  MRN_DEVICE_PATH, strerror((int)-n));
			mrn_ucx_forget_all();
			gen = __atomic_load_n(mrn_ucx.generation, __ATOMIC_ACQUIRE);
		}
		mrn_ucx.stats.drains++;
		__atomic_store_n(&mrn_ucx.seen, gen, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mrn_ucx.lock);
}

/* The generation moved: drain, then look up. Out of line, so that the hit
 * path below needs no stack frame and ends in a jump to UCX's function. */
static ucs_status_t __attribute__((noinline))
mrn_ucx_get_after_drain(ucs_rcache_t *rcache, void *address, size_t length, int prot, void *arg,
			ucs_rcache_region_t **region_p)
{
	mrn_ucx_drain(NULL);
	return mrn_ucx.real_get(rcache, address, length, prot, arg, region_p);
}

/*
 * Watch a scratch page, unmap it, and expect the generation to move and the
 * drain to name it: the device is not just open but reports unmaps.
 */
static int mrn_ucx_self_test(const char **why)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	mrn_ucx_drain_ctx_t ctx = {0};
	uint64_t id, before;
	char *p;
	int rc;

	p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		*why = "mmap of a scratch page failed";
		return -errno;
	}
	p[0] = 1;
	pthread_mutex_lock(&mrn_ucx.lock);
	rc = mrn_watch_add(mrn_ucx.watch, p, page, MRN_UCX_SELFTEST_COOKIE, &id);
	pthread_mutex_unlock(&mrn_ucx.lock);
	if (rc < 0) {
		munmap(p, page);
		*why = "watching a scratch page failed";
		return rc;
	}
	before = __atomic_load_n(&mrn_ucx.seen, __ATOMIC_RELAXED);
	munmap(p, page);
	if (__atomic_load_n(mrn_ucx.generation, __ATOMIC_ACQUIRE) == before) {
		*why = "munmap of a watched page did not move the generation";
		return -EPROTO;
	}
	mrn_ucx_drain(&ctx);
	if (!ctx.selftest_seen) {
		*why = "munmap of a watched page was not reported by a drain";
		return -EPROTO;
	}
	return 0;
}

/* ---- registration callbacks around UCX's --------------------------------- */

static mrn_ucx_region_t *mrn_ucx_trailer(mrn_ucx_rcache_t *rc, ucs_rcache_region_t *region)
{
	return (mrn_ucx_region_t *)((char *)region + rc->trailer);
}

static ucs_status_t mrn_ucx_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
				    ucs_rcache_region_t *region, uint16_t flags)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);
	void *start = (void *)region->super.start;
	size_t len = region->super.end - region->super.start;
	ucs_status_t status;
	uint64_t id = 0;
	int err = -ENODEV;

	/*
	 * Watch before UCX pins: an unmap racing the registration then makes
	 * the (fresh) region look dead, which costs a miss, never a stale hit.
	 */
	pthread_mutex_lock(&mrn_ucx.lock);
	if (mrn_ucx.watch != NULL) {
		const uint32_t slot = mrn_ucx_slot_alloc(start, len);

		err = -ENOMEM;
		if (slot != 0)
			err = mrn_watch_add(mrn_ucx.watch, start, len, slot, &id);
		if (err == 0) {
			mrn_ucx.slots[slot].id = id;
			tr->slot = slot;
			tr->epoch = mrn_ucx.epoch;
			mrn_ucx.stats.watched++;
		} else if (slot != 0) {
			mrn_ucx_slot_free(slot);
		}
	}
	pthread_mutex_unlock(&mrn_ucx.lock);

	status = rc->ops->mem_reg(rc->context, rcache, arg, region, flags);

	if (status != UCS_OK) {
		/* UCX keeps a failed region without deregistering it. */
		pthread_mutex_lock(&mrn_ucx.lock);
		if (tr->slot != 0 && tr->epoch == mrn_ucx.epoch) {
			if (mrn_ucx.slots[tr->slot].id != 0)
				mrn_watch_remove(mrn_ucx.watch, mrn_ucx.slots[tr->slot].id);
			mrn_ucx_slot_free(tr->slot);
			mrn_ucx.stats.watched--;
		}
		tr->slot = 0;
		pthread_mutex_unlock(&mrn_ucx.lock);
		return status;
	}

	if (err != 0) {
		/*
		 * Nobody would tell us when this region dies, so it must not
		 * stay cached: queue its own invalidation (this cache's
		 * page-table lock is ours now, so UCM's callback queues it)
		 * and the next lookup in this cache drops it. The caller
		 * still gets it, registered and valid, for this use.
		 */
		mrn_ucx_count(&mrn_ucx.stats.watch_failures, 1);
		ucs_diag("mrnotify: %s: cannot watch %p..%p (%s); not caching it", rc->name, start,
			 (char *)start + len, strerror(-err));
		ucm_vm_munmap(start, len);
	}
	return UCS_OK;
}

static void mrn_ucx_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);

	pthread_mutex_lock(&mrn_ucx.lock);
	/* A region from before fork() has a slot in the parent's table. */
	if (tr->slot != 0 && tr->epoch == mrn_ucx.epoch) {
		const uint64_t id = mrn_ucx.slots[tr->slot].id;

		if (id != 0 && mrn_ucx.watch != NULL) {
			if (mrn_watch_remove(mrn_ucx.watch, id) == 1)
				mrn_ucx.stats.unwatched_dirty++;
		}
		mrn_ucx_slot_free(tr->slot);
		mrn_ucx.stats.unwatched++;
	}
	tr->slot = 0;
	pthread_mutex_unlock(&mrn_ucx.lock);
	rc->ops->mem_dereg(rc->context, rcache, region);
}

static void mrn_ucx_dump_region(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region,
				char *buf, size_t max)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);
	size_t n;

	if (rc->ops->dump_region != NULL)
		rc->ops->dump_region(rc->context, rcache, region, buf, max);
	else if (max > 0)
		buf[0] = '\0';
	n = strnlen(buf, max);
	if (n + 1 < max)
		snprintf(buf + n, max - n, " mrnotify_slot=%u", tr->slot);
}

static const ucs_rcache_ops_t mrn_ucx_ops = {
	.mem_reg = mrn_ucx_mem_reg,
	.mem_dereg = mrn_ucx_mem_dereg,
	.dump_region = mrn_ucx_dump_region,
};

/* ---- the interposed UCX functions ---------------------------------------- */

/* Every lookup of every cache in UCX 1.13: the check is one load and compare. */
MRN_UCX_EXPORT ucs_status_t ucs_rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
					   int prot, void *arg, ucs_rcache_region_t **region_p)
{
	const volatile uint64_t *gen = __atomic_load_n(&mrn_ucx.generation, __ATOMIC_ACQUIRE);

	if (MRN_UCX_UNLIKELY(mrn_ucx.count_checks))
		mrn_ucx_count(&mrn_ucx.stats.checks, 1);
	if (MRN_UCX_UNLIKELY(__atomic_load_n(gen, __ATOMIC_ACQUIRE) !=
			     __atomic_load_n(&mrn_ucx.seen, __ATOMIC_RELAXED)))
		return mrn_ucx_get_after_drain(rcache, address, length, prot, arg, region_p);
	return mrn_ucx.real_get(rcache, address, length, prot, arg, region_p);
}

MRN_UCX_EXPORT ucs_status_t ucs_rcache_create(const ucs_rcache_params_t *params, const char *name,
					      ucs_stats_node_t *stats_parent,
					      ucs_rcache_t **rcache_p)
{
	ucs_rcache_params_t ours;
	mrn_ucx_rcache_t *rc;
	ucs_status_t status;

	if (!mrn_ucx.active || !(params->ucm_events & UCM_EVENT_VM_UNMAPPED))
		return mrn_ucx.real_create(params, name, stats_parent, rcache_p);

	rc = calloc(1, sizeof(*rc));
	if (rc == NULL)
		return UCS_ERR_NO_MEMORY;
	rc->ops = params->ops;
	rc->context = params->context;
	rc->trailer = (params->region_struct_size + 7) & ~(size_t)7;
	snprintf(rc->name, sizeof(rc->name), "%s", name ? name : "?");

	ours = *params;
	ours.ops = &mrn_ucx_ops;
	ours.context = rc;
	ours.region_struct_size = rc->trailer + sizeof(mrn_ucx_region_t);
	status = mrn_ucx.real_create(&ours, name, stats_parent, rcache_p);
	if (status != UCS_OK) {
		free(rc);
		return status;
	}
	rc->rcache = *rcache_p;
	pthread_mutex_lock(&mrn_ucx.lock);
	rc->next = mrn_ucx.rcaches;
	mrn_ucx.rcaches = rc;
	mrn_ucx.stats.rcaches++;
	pthread_mutex_unlock(&mrn_ucx.lock);
	ucs_debug("mrnotify: rcache %s (%p): regions watched by %s", rc->name, (void *)rc->rcache,
		  MRN_DEVICE_PATH);
	return UCS_OK;
}

MRN_UCX_EXPORT void ucs_rcache_destroy(ucs_rcache_t *rcache)
{
	mrn_ucx_rcache_t **pp, *rc = NULL;

	/* UCX deregisters the remaining regions through our callbacks. */
	mrn_ucx.real_destroy(rcache);
	pthread_mutex_lock(&mrn_ucx.lock);
	for (pp = &mrn_ucx.rcaches; *pp != NULL; pp = &(*pp)->next) {
		if ((*pp)->rcache == rcache) {
			rc = *pp;
			*pp = rc->next;
			break;
		}
	}
	pthread_mutex_unlock(&mrn_ucx.lock);
	free(rc);
}

MRN_UCX_EXPORT ucs_status_t ucm_test_external_events(int events)
{
	const char *why = NULL;
	int rc;

	if (mrn_ucx.active && (events & UCM_EVENT_VM_UNMAPPED)) {
		/*
		 * UCM's test wants the event inside munmap(); ours arrives
		 * before the next lookup, which is what caches need. Answer
		 * for VM_UNMAPPED with our own test, UCM for the rest.
		 */
		rc = mrn_ucx_self_test(&why);
		if (rc < 0) {
			ucs_warn("mrnotify: self-test failed: %s (%s)", why, strerror(-rc));
			return UCS_ERR_UNSUPPORTED;
		}
		events &= ~UCM_EVENT_VM_UNMAPPED;
		if (events == 0)
			return UCS_OK;
	}
	return mrn_ucx.real_test_external(events);
}

/* ---- process life -------------------------------------------------------- */

/*
 * In a forked child the status page is gone (the kernel does not copy it)
 * and the context answers only the parent: point the hit path at a word that
 * makes the next lookup reopen (only system calls and stores here).
 */
static void mrn_ucx_atfork_child(void)
{
	pthread_mutex_init(&mrn_ucx.lock, NULL);
	mrn_ucx.watch = NULL; /* the parent's; not ours to close */
	mrn_ucx.epoch++;
	mrn_ucx.child_reopen = 1;
	__atomic_store_n(&mrn_ucx.seen, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mrn_ucx.generation, &mrn_ucx_forked, __ATOMIC_RELEASE);
}

/* Lock held. */
static void mrn_ucx_child_reopen(void)
{
	int rc;

	mrn_ucx.child_reopen = 0;
	rc = mrn_watch_open(MRN_MONITOR_KERNEL, &mrn_ucx.watch);
	if (rc == 0) {
		const volatile uint64_t *gen = mrn_watch_generation(mrn_ucx.watch);

		__atomic_store_n(&mrn_ucx.seen, __atomic_load_n(gen, __ATOMIC_ACQUIRE),
				 __ATOMIC_RELAXED);
		__atomic_store_n(&mrn_ucx.generation, gen, __ATOMIC_RELEASE);
	} else {
		/* New regions then stay out of the caches (see mem_reg). */
		mrn_ucx.watch = NULL;
		__atomic_store_n(&mrn_ucx.seen, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&mrn_ucx.generation, &mrn_ucx_still, __ATOMIC_RELEASE);
		ucs_warn("mrnotify: forked child cannot open %s (%s); registrations will not be cached",
			 MRN_DEVICE_PATH, strerror(-rc));
	}
	/*
	 * Regions inherited from the parent were watched by the parent's
	 * context, which will not tell us about them: out of every cache,
	 * and their slots (the parent's numbering) are forgotten.
	 */
	mrn_ucx_forget_all();
	mrn_ucx.nslots = mrn_ucx.slot_cap ? 1 : 0;
	mrn_ucx.free_slot = 0;
}

static const char *mrn_ucx_enable_name(int v)
{
	return v == UCS_YES ? "yes" : v == UCS_NO ? "no" : "try";
}

/* Not usable: say why, and with ENABLE=yes stop the process. */
static void mrn_ucx_unusable(const char *fmt, const char *arg, int err)
{
	char msg[256];

	snprintf(msg, sizeof(msg), fmt, arg);
	if (mrn_ucx.config.enable == UCS_YES) {
		fprintf(stderr,
			"libmrnotify-ucx: UCX_MRNOTIFY_ENABLE=yes, but %s%s%s. Load mrnotify.ko, "
			"or set UCX_MRNOTIFY_ENABLE=try to run with UCX's own memory hooks.\n",
			msg, err ? ": " : "", err ? strerror(err) : "");
		exit(1);
	}
	ucs_diag("mrnotify: not used (UCX_MRNOTIFY_ENABLE=try): %s%s%s; UCX runs as configured", msg,
		 err ? ": " : "", err ? strerror(err) : "");
}

static void mrn_ucx_enable(void)
{
	unsigned major, minor, release;
	const char *why = NULL;
	int rc;

	ucp_get_version(&major, &minor, &release);
	if (major != UCP_API_MAJOR || minor != UCP_API_MINOR) {
		char v[64];

		snprintf(v, sizeof(v), "%u.%u.%u", major, minor, release);
		mrn_ucx_unusable("this plugin was built for UCX 1.13.x and the process runs UCX %s", v, 0);
		return;
	}
	rc = mrn_watch_open(MRN_MONITOR_KERNEL, &mrn_ucx.watch);
	if (rc < 0) {
		const int err = access(MRN_DEVICE_PATH, F_OK) == 0 ? -rc : ENOENT;

		mrn_ucx_unusable(err == ENOENT ? "%s is missing (mrnotify.ko not loaded?)"
					       : "%s cannot be opened",
				 MRN_DEVICE_PATH, err == ENOENT ? 0 : err);
		mrn_ucx.watch = NULL;
		return;
	}
	mrn_ucx.generation = mrn_watch_generation(mrn_ucx.watch);
	__atomic_store_n(&mrn_ucx.seen, __atomic_load_n(mrn_ucx.generation, __ATOMIC_ACQUIRE),
			 __ATOMIC_RELAXED);
	rc = mrn_ucx_self_test(&why);
	if (rc < 0) {
		mrn_ucx_unusable("%s failed its self-test", MRN_DEVICE_PATH, 0);
		ucs_diag("mrnotify: self-test: %s (%s)", why, strerror(-rc));
		mrn_watch_close(mrn_ucx.watch);
		mrn_ucx.watch = NULL;
		mrn_ucx.generation = &mrn_ucx_still;
		__atomic_store_n(&mrn_ucx.seen, 0, __ATOMIC_RELAXED);
		return;
	}
	/* Only now: from here on UCX relies on us for every unmap. */
	ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
	pthread_atfork(NULL, NULL, mrn_ucx_atfork_child);
	mrn_ucx.active = 1;
	ucs_debug("mrnotify: %s is UCX's source of VM_UNMAPPED events", MRN_DEVICE_PATH);
}

__attribute__((constructor)) static void mrn_ucx_init(void)
{
	ucs_status_t status;

	mrn_ucx.generation = &mrn_ucx_still;
	mrn_ucx.real_create = (mrn_ucx_create_fn)mrn_ucx_resolve("ucs_rcache_create");
	mrn_ucx.real_destroy = (mrn_ucx_destroy_fn)mrn_ucx_resolve("ucs_rcache_destroy");
	mrn_ucx.real_get = (mrn_ucx_get_fn)mrn_ucx_resolve("ucs_rcache_get");
	mrn_ucx.real_test_external = (mrn_ucx_test_fn)mrn_ucx_resolve("ucm_test_external_events");

	/* Listed by ucx_info -c; parsing marks our variables as used. */
	UCS_CONFIG_ADD_TABLE(mrn_ucx_config_table, &ucs_config_global_list);
	status = ucs_config_parser_fill_opts(&mrn_ucx.config, mrn_ucx_config_table, "UCX_",
					     "MRNOTIFY_", 0);
	if (status != UCS_OK) {
		fprintf(stderr, "libmrnotify-ucx: bad UCX_MRNOTIFY_* setting (%s)\n",
			ucs_status_string(status));
		exit(1);
	}
	mrn_ucx.config_filled = 1;
	mrn_ucx.count_checks = mrn_ucx.config.stats;
	if (mrn_ucx.config.enable != UCS_NO)
		mrn_ucx_enable();
	ucs_debug("mrnotify: UCX_MRNOTIFY_ENABLE=%s: %s", mrn_ucx_enable_name(mrn_ucx.config.enable),
		  mrn_ucx.active ? "active" : "inactive");
}

__attribute__((destructor)) static void mrn_ucx_fini(void)
{
	const mrn_ucx_stats_t *s = &mrn_ucx.stats;

	if (mrn_ucx.config_filled && mrn_ucx.config.stats) {
		fprintf(stderr,
			"libmrnotify-ucx: pid %d: %s, checks %" PRIu64 ", drains %" PRIu64
			", ranges invalidated %" PRIu64 ", regions watched %" PRIu64
			" (unwatched %" PRIu64 ", of them dirty %" PRIu64 "), watch failures %" PRIu64
			", rcaches %" PRIu64 "\n",
			(int)getpid(), mrn_ucx.active ? "active" : "inactive", s->checks, s->drains,
			s->ranges, s->watched, s->unwatched, s->unwatched_dirty, s->watch_failures,
			s->rcaches);
	}
	UCS_CONFIG_REMOVE_TABLE(mrn_ucx_config_table);
	/* The watch stays open: UCX may still deregister through us at exit. */
}

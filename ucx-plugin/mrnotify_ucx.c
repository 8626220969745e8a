/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify-ucx: makes mrnotify.ko the source of UCX's memory events, so
 * that UCX's registration caches stay correct without UCM's glibc patching
 * (which misses raw system calls, static binaries and several language
 * runtimes, and which, once turned off, silently turns UCX's caches off).
 *
 * Loaded with LD_PRELOAD (see mrnotify-ucx-run), for the UCX 1.13 to 1.18
 * it was built for (the running UCX's major.minor must be the headers'):
 *
 *  - At load it only registers its settings: a site may preload it into
 *    every program, most of which never use UCX, and none of them may fail
 *    because of it. It activates once, when the process first creates a UCP
 *    context (ucp_init_version), a registration cache, or opens an IB device
 *    (ibv_fork_init): it reads the settings, checks the running UCX, and
 *    once /dev/mrnotify is open and has passed a self-test, tells UCM that
 *    UCM_EVENT_VM_UNMAPPED is "external" (reported by us, not by hooks).
 *    Declaring it without a working source would leave the caches blind, so
 *    nothing is declared when the device cannot be used; with
 *    UCX_MRNOTIFY_ENABLE=yes creating a UCP context then fails instead.
 *  - It interposes ucs_rcache_create(): every cache that listens to
 *    VM_UNMAPPED gets our registration callbacks around its own, which ask
 *    the kernel to watch each region's range (the region's, not the user
 *    buffer's: UCX merges and aligns regions) before UCX pins it, and stop
 *    watching when UCX deregisters it. A range is watched once however many
 *    caches hold it (UCP's cache and the IB domain's hold the same ranges).
 *  - It interposes ucs_rcache_get(). In UCX 1.13 every lookup of every cache
 *    (UCP's, the IB memory domain's, knem, xpmem, gdr_copy, rocm) is a call
 *    through the PLT to that function, so this is the one place to check the
 *    kernel's generation word: one load and compare. When it moved, the
 *    dirty list is drained and each dead range becomes ucm_vm_munmap(),
 *    which removes it from every cache before the lookup proceeds. On x86-64
 *    the wrapper is a few instructions of assembly that end in a jump and
 *    never touch the arguments, so that when the plugin is not active (say,
 *    another UCX, whose ucs_rcache_get has 7 arguments from 1.17 on) any
 *    signature passes through unchanged.
 *  - From UCX 1.14 on, UCP looks its own cache up inline (ucp_memh_get():
 *    ucs_rcache_lookup_unsafe()), and only misses call ucs_rcache_get(). The
 *    plugin then also interposes UCP's public functions that can look up a
 *    registration (the tag, stream, active-message, RMA and atomic calls,
 *    ucp_mem_map, ucp_memh_pack, ucp_rkey_pack) and ucp_worker_progress(),
 *    where posted requests register their buffers later (rendezvous). Each
 *    is an x86-64 trampoline with the same compare, that drains before it
 *    jumps to UCX's function: the dead ranges become ucm_vm_munmap(), which
 *    queues them on UCP's cache (it asks for synchronous events), and an
 *    inline lookup with a queue pending misses and calls ucs_rcache_get(),
 *    which applies the queue first. UCT's own caches (xpmem, gdr_copy, rocm;
 *    the IB domain's until 1.15) still look up by calling ucs_rcache_get().
 *    Programs that register through UCT's API bypass the entry points and
 *    are covered only where UCT's lookups are calls (docs/ucx.md).
 *  - It interposes ucm_test_external_events() so that callers that ask
 *    whether external VM_UNMAPPED events work (Open MPI with
 *    opal_common_ucx_opal_mem_hooks=1) get our self-test's answer instead of
 *    UCM's, which expects events synchronously inside munmap().
 *  - It interposes ibv_fork_init(): where the kernel keeps pinned pages with
 *    the parent across fork() (ibv_is_fork_initialized() says
 *    IBV_FORK_UNNEEDED, kernels >= 5.13), it does not turn on rdma-core's
 *    madvise(MADV_DONTFORK) of every registered range, as rdma-core >= 52
 *    does not either. That madvise splits the mapping, which splits a huge
 *    page's PMD, which the kernel reports as a change of the whole 2 MiB:
 *    every registration on that huge page would be invalidated each time.
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * One source, two designs, chosen from the UCX headers it is built against
 * (docs/ucx.md):
 *  - UCX 1.13: every lookup of every cache is a call to ucs_rcache_get(),
 *    the one place the generation is checked.
 *  - UCX 1.14 to 1.18: UCP's hits are inlined (ucs_rcache_lookup_unsafe()
 *    in ucp_memh_get()) and never call ucs_rcache_get(); the generation is
 *    also checked at each public UCP entry point that can look up a
 *    registration (MRN_UCX_ENTRY_CHECKS).
 * The rcache params, ops and region layouts and the ucs_rcache_get()
 * signature changed in 1.14, 1.17 and 1.18: they are taken from the headers,
 * and at run time the plugin is active only under the UCX major.minor it was
 * built for (mrn_ucx_version_ok); under any other it passes every call on.
 */
#if UCP_API_MAJOR != 1 || UCP_API_MINOR < 13 || UCP_API_MINOR > 18
#error "libmrnotify-ucx supports UCX 1.13 to 1.18 (it interposes ucs_rcache_*, whose ABI and call paths change with each minor release)"
#endif
/* ucs_rcache_get() takes an alignment (1.17) and the ops a merge callback (1.18). */
#define MRN_UCX_GET_HAS_ALIGNMENT (UCP_API_MINOR >= 17)
#define MRN_UCX_OPS_HAVE_MERGE    (UCP_API_MINOR >= 18)
/*
 * UCP's inlined lookups (1.14 on) need the entry-point checks. The tests
 * build a copy without them (-DMRN_UCX_ENTRY_CHECKS=0) as the negative
 * control that shows what they catch; never a configuration to ship.
 */
#ifndef MRN_UCX_ENTRY_CHECKS
#define MRN_UCX_ENTRY_CHECKS (UCP_API_MINOR >= 14)
#endif
#if MRN_UCX_ENTRY_CHECKS && !defined(__x86_64__)
#error "libmrnotify-ucx: the UCP entry-point checks (UCX >= 1.14) are written for x86-64 only"
#endif

#define MRN_UCX_EXPORT __attribute__((visibility("default")))
/* Reached from the assembly hit path only: kept, and not exported. */
#define MRN_UCX_ASM_TARGET  __attribute__((visibility("hidden"), used, noinline))
#define MRN_UCX_LIKELY(x)   __builtin_expect(!!(x), 1)
#define MRN_UCX_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Cookie of the watch the self-test makes; region watches use slot numbers. */
#define MRN_UCX_SELFTEST_COOKIE UINT64_MAX

/*
 * rdma-core's enum ibv_fork_status value (stable ABI since rdma-core 35);
 * spelled here so that the plugin builds without the verbs headers.
 */
#define MRN_UCX_IBV_FORK_UNNEEDED 2

typedef struct mrn_ucx_config {
	int enable; /* UCS_YES, UCS_NO or UCS_TRY */
	int stats;
} mrn_ucx_config_t;

static ucs_config_field_t mrn_ucx_config_table[] = {
	{"ENABLE", "try",
	 "Make the mrnotify kernel module (" MRN_DEVICE_PATH ") the source of UCX's\n"
	 "VM_UNMAPPED memory events, so that registration caches stay correct with UCM's\n"
	 "memory hooks off (UCX_MEM_MMAP_HOOK_MODE=none). Decided when the process first\n"
	 "creates a UCP context or a registration cache, never at load.\n"
	 " try - use it when the device opens and passes a self-test, else leave UCX as it is\n"
	 " yes - the same, but make creating a UCP context fail when the device cannot be used\n"
	 " no  - do nothing",
	 ucs_offsetof(mrn_ucx_config_t, enable), UCS_CONFIG_TYPE_TERNARY},
	{"STATS", "n",
	 "Print the plugin's statistics (checks, drains, ranges invalidated, regions\n"
	 "watched) to stderr when the process exits.",
	 ucs_offsetof(mrn_ucx_config_t, stats), UCS_CONFIG_TYPE_BOOL},
	{NULL}};

UCS_CONFIG_DECLARE_TABLE(mrn_ucx_config_table, "mrnotify (kernel memory events)", "MRNOTIFY_",
			 mrn_ucx_config_t)

typedef ucs_status_t (*mrn_ucx_create_fn)(const ucs_rcache_params_t *, const char *,
					  ucs_stats_node_t *, ucs_rcache_t **);
typedef void (*mrn_ucx_destroy_fn)(ucs_rcache_t *);
#if MRN_UCX_GET_HAS_ALIGNMENT
#define MRN_UCX_GET_PARAMS                                                                         \
	ucs_rcache_t *rcache, void *address, size_t length, size_t alignment, int prot, void *arg, \
		ucs_rcache_region_t **region_p
#define MRN_UCX_GET_ARGS rcache, address, length, alignment, prot, arg, region_p
#else
#define MRN_UCX_GET_PARAMS                                                                         \
	ucs_rcache_t *rcache, void *address, size_t length, int prot, void *arg,                   \
		ucs_rcache_region_t **region_p
#define MRN_UCX_GET_ARGS rcache, address, length, prot, arg, region_p
#endif
typedef ucs_status_t (*mrn_ucx_get_fn)(MRN_UCX_GET_PARAMS);
typedef ucs_status_t (*mrn_ucx_test_fn)(int);
typedef ucs_status_t (*mrn_ucx_init_fn)(unsigned, unsigned, const ucp_params_t *,
					const ucp_config_t *, ucp_context_h *);
typedef ucs_status_t (*mrn_ucx_set_handler_fn)(int, int, ucm_event_callback_t, void *);
typedef int (*mrn_ucx_fork_init_fn)(void);
typedef int (*mrn_ucx_fork_status_fn)(void);

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
	struct mrn_ucx_rcache *next;
} mrn_ucx_rcache_t;

/* Appended to every region of a watched rcache (UCX zeroes it). */
typedef struct mrn_ucx_region {
	uint32_t slot;  /* 0: not watched */
	uint32_t epoch; /* the process generation the slot belongs to */
} mrn_ucx_region_t;

/*
 * The kernel's cookie for a watch is a slot number, not a region's address:
 * a drain may report a watch at any time, and a slot (ours, never freed)
 * can be written when the regions themselves might be gone. Regions of
 * several caches with the same range share one slot (refs).
 */
typedef struct mrn_ucx_slot {
	uint64_t id;     /* kernel watch id; 0 once the kernel dropped it */
	uintptr_t start; /* the watched range, for invalidating it */
	size_t len;      /* without the kernel's help (see mrn_ucx_forget_all) */
	uint32_t refs;   /* regions using it; 0: free */
	uint32_t next;   /* free list, or the hash chain while live */
} mrn_ucx_slot_t;

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
} mrn_ucx_stats_t;

/* What activation decided. */
typedef enum mrn_ucx_state {
	MRN_UCX_STATE_NEW,         /* UCX not used yet: not activated */
	MRN_UCX_STATE_OFF,         /* UCX_MRNOTIFY_ENABLE=no */
	MRN_UCX_STATE_INACTIVE,    /* cannot be used (try): UCX runs as configured */
	MRN_UCX_STATE_REFUSED,     /* cannot be used (yes, or a bad setting): UCP contexts fail */
	MRN_UCX_STATE_PASSTHROUGH, /* another UCX version: nothing touched */
	MRN_UCX_STATE_ACTIVE,      /* the kernel is UCX's VM_UNMAPPED source */
} mrn_ucx_state_t;

/* Never moves: the hit path compares it when the plugin is inactive. */
static const volatile uint64_t mrn_ucx_still;
/* Reads 1 while seen is 0: makes a forked child's next lookup reopen. */
static const volatile uint64_t mrn_ucx_forked = 1;

/*
 * All that the ucs_rcache_get() hit path reads, together (the assembly below
 * uses these offsets): the word the kernel bumps (one that never moves when
 * the plugin is not active), its value at the last drain, UCX's function,
 * and whether lookups are counted.
 */
typedef struct mrn_ucx_hot {
	const volatile uint64_t *generation;
	uint64_t seen;
	mrn_ucx_get_fn real_get;
	int count_checks;
} mrn_ucx_hot_t;

_Static_assert(offsetof(mrn_ucx_hot_t, generation) == 0, "offset used by the hit path");
_Static_assert(offsetof(mrn_ucx_hot_t, seen) == 8, "offset used by the hit path");
_Static_assert(offsetof(mrn_ucx_hot_t, real_get) == 16, "offset used by the hit path");
_Static_assert(offsetof(mrn_ucx_hot_t, count_checks) == 24, "offset used by the hit path");

/* Not static, so that the assembly can name it; hidden like all but the API. */
__attribute__((visibility("hidden"))) mrn_ucx_hot_t mrn_ucx_hot = {
	.generation = &mrn_ucx_still,
};

static struct {
	mrn_ucx_state_t state; /* written once, by mrn_ucx_activate */
	pthread_once_t once;
	int child_reopen; /* forked: open our own context before the next lookup */
	uint32_t epoch;
	mrn_ucx_config_t config;
	int config_filled;
	int table_added;      /* our table is in UCX's list (only on 1.13) */
	unsigned version[3];  /* the running UCX's, read at load */
	ucs_status_t refusal; /* REFUSED: what ucp_init returns */
	char why[200];        /* not ACTIVE: the reason, for messages */
	mrn_watch_t *watch;
	pthread_mutex_t lock;   /* watch table, slots, rcache list, drains */
	uint64_t selftest_seen; /* drains that reported the self-test's watch */
	mrn_ucx_slot_t *slots;
	uint32_t nslots, slot_cap, free_slot;
	uint32_t *hash; /* live slots by range: slot_cap heads */
	mrn_ucx_rcache_t *rcaches;
	mrn_ucx_stats_t stats;
	mrn_ucx_create_fn real_create;
	mrn_ucx_destroy_fn real_destroy;
	mrn_ucx_test_fn real_test_external;
	mrn_ucx_init_fn real_init;
	mrn_ucx_set_handler_fn real_set_handler;
} mrn_ucx = {
	.once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Set while our ucs_rcache_create() runs UCX's, to see its event handler. */
static __thread mrn_ucx_rcache_t *mrn_ucx_creating;

static void mrn_ucx_activate(void);

static mrn_ucx_state_t mrn_ucx_state(void)
{
	return __atomic_load_n(&mrn_ucx.state, __ATOMIC_ACQUIRE);
}

static void mrn_ucx_count(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static void *mrn_ucx_resolve(const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (p == NULL) {
		/*
		 * Cannot happen while this library links against UCX (whose
		 * libraries therefore load with it); without the real function
		 * there is nothing to pass the call on to.
		 */
		fprintf(stderr,
			"libmrnotify-ucx: %s not found after this library (%s); is UCX loaded?\n",
			name, dlerror());
		abort();
	}
	return p;
}

/* ---- kernel watches ------------------------------------------------------ */

static size_t mrn_ucx_hash_of(uintptr_t start, size_t len)
{
	uint64_t h = (uint64_t)start * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)len * 0xc2b2ae3d27d4eb4full;

	return (size_t)(h >> 32) & (mrn_ucx.slot_cap - 1);
}

/* Lock held. The live (watched, not reported dead) slot for this range, or 0. */
static uint32_t mrn_ucx_slot_find(uintptr_t start, size_t len)
{
	if (mrn_ucx.hash == NULL)
		return 0;
	for (uint32_t s = mrn_ucx.hash[mrn_ucx_hash_of(start, len)]; s != 0;
	     s = mrn_ucx.slots[s].next) {
		if (mrn_ucx.slots[s].start == start && mrn_ucx.slots[s].len == len)
			return s;
	}
	return 0;
}

/* Lock held. Makes slot s findable by its range (it has a kernel watch). */
static void mrn_ucx_slot_hash(uint32_t s)
{
	uint32_t *head =
		&mrn_ucx.hash[mrn_ucx_hash_of(mrn_ucx.slots[s].start, mrn_ucx.slots[s].len)];

	mrn_ucx.slots[s].next = *head;
	*head = s;
}

/* Lock held. No new region may share slot s any more (its watch is gone). */
static void mrn_ucx_slot_unhash(uint32_t s)
{
	uint32_t *p = &mrn_ucx.hash[mrn_ucx_hash_of(mrn_ucx.slots[s].start, mrn_ucx.slots[s].len)];

	for (; *p != 0; p = &mrn_ucx.slots[*p].next) {
		if (*p == s) {
			*p = mrn_ucx.slots[s].next;
			break;
		}
	}
	mrn_ucx.slots[s].next = 0;
}

/* Lock held. Doubles the slot table and rebuilds the hash; 0 on failure. */
static int mrn_ucx_slots_grow(void)
{
	const uint32_t cap = mrn_ucx.slot_cap ? mrn_ucx.slot_cap * 2 : 1024;
	mrn_ucx_slot_t *p;
	uint32_t *h;

	if (cap <= mrn_ucx.slot_cap)
		return 0;
	p = realloc(mrn_ucx.slots, cap * sizeof(*p));
	if (p == NULL)
		return 0;
	mrn_ucx.slots = p;
	h = calloc(cap, sizeof(*h));
	if (h == NULL)
		return 0; /* the larger table is kept; the old hash still fits it */
	free(mrn_ucx.hash);
	mrn_ucx.hash = h;
	mrn_ucx.slot_cap = cap;
	if (mrn_ucx.nslots == 0)
		mrn_ucx.nslots = 1; /* slot 0 means "none" */
	for (uint32_t s = 1; s < mrn_ucx.nslots; s++) {
		if (mrn_ucx.slots[s].refs != 0 && mrn_ucx.slots[s].id != 0)
			mrn_ucx_slot_hash(s);
	}
	return 1;
}

/* Lock held. 0 when no slot can be had (the region then stays unwatched). */
static uint32_t mrn_ucx_slot_alloc(void *start, size_t len)
{
	uint32_t s;

	if (mrn_ucx.free_slot != 0) {
		s = mrn_ucx.free_slot;
		mrn_ucx.free_slot = mrn_ucx.slots[s].next;
	} else {
		if (mrn_ucx.nslots == mrn_ucx.slot_cap && !mrn_ucx_slots_grow())
			return 0;
		s = mrn_ucx.nslots++;
	}
	mrn_ucx.slots[s].id = 0;
	mrn_ucx.slots[s].start = (uintptr_t)start;
	mrn_ucx.slots[s].len = len;
	mrn_ucx.slots[s].refs = 1;
	mrn_ucx.slots[s].next = 0;
	return s;
}

/* Lock held; slot s is unhashed. */
static void mrn_ucx_slot_free(uint32_t s)
{
	mrn_ucx.slots[s].refs = 0;
	mrn_ucx.slots[s].id = 0;
	mrn_ucx.slots[s].next = mrn_ucx.free_slot;
	mrn_ucx.free_slot = s;
}

/*
 * Lock held. A region stops using slot s; the last one removes the kernel's
 * watch (returns 1 when that watch had gone invalid, undrained).
 */
static int mrn_ucx_slot_put(uint32_t s)
{
	int dirty = 0;

	if (--mrn_ucx.slots[s].refs != 0)
		return 0;
	if (mrn_ucx.slots[s].id != 0) {
		mrn_ucx_slot_unhash(s);
		if (mrn_ucx.watch != NULL)
			dirty = mrn_watch_remove(mrn_ucx.watch, mrn_ucx.slots[s].id) == 1;
	}
	mrn_ucx_slot_free(s);
	return dirty;
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
		if (mrn_ucx.slots[s].refs == 0)
			continue;
		ucm_vm_munmap((void *)mrn_ucx.slots[s].start, mrn_ucx.slots[s].len);
		mrn_ucx.stats.ranges++;
	}
}

/*
 * Called for each watch the kernel reports dead, with the lock held. The
 * regions' deregistration waits for the lock before it releases the slot,
 * so the slot is still theirs.
 */
static void mrn_ucx_drained(void *arg, uint64_t cookie, void *addr, size_t len)
{
	(void)arg;
	if (cookie == MRN_UCX_SELFTEST_COOKIE) {
		/* Counted rather than returned: any thread's drain may see it. */
		mrn_ucx.selftest_seen++;
		return;
	}
	if (cookie < mrn_ucx.nslots && mrn_ucx.slots[cookie].refs != 0 &&
	    mrn_ucx.slots[cookie].id != 0) {
		/* The kernel dropped it: no new region may share it. */
		mrn_ucx_slot_unhash((uint32_t)cookie);
		mrn_ucx.slots[cookie].id = 0;
	}
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

/*
 * The generation moved: apply what the kernel reports. Threads that saw the
 * same move queue on the lock; the first drains, and the others find the
 * generation caught up and go on, so that a move costs one ioctl, not one
 * per thread.
 */
static void __attribute__((noinline)) mrn_ucx_drain(void)
{
	uint64_t gen;
	long n;

	pthread_mutex_lock(&mrn_ucx.lock);
	if (mrn_ucx.child_reopen)
		mrn_ucx_child_reopen();
	if (mrn_ucx.watch != NULL && __atomic_load_n(mrn_ucx_hot.generation, __ATOMIC_ACQUIRE) !=
					     __atomic_load_n(&mrn_ucx_hot.seen, __ATOMIC_RELAXED)) {
		n = mrn_watch_drain(mrn_ucx.watch, mrn_ucx_drained, NULL, &gen);
		if (n < 0) {
			/* Nothing was taken: all we can do is forget everything. */
			ucs_error("mrnotify: draining %s failed: %s; invalidating every watched "
				  "registration",
				  MRN_DEVICE_PATH, strerror((int)-n));
			mrn_ucx_forget_all();
			gen = __atomic_load_n(mrn_ucx_hot.generation, __ATOMIC_ACQUIRE);
		}
		mrn_ucx.stats.drains++;
		__atomic_store_n(&mrn_ucx_hot.seen, gen, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mrn_ucx.lock);
}

/*
 * The generation moved: drain, then look up. Out of line, so that the hit
 * path needs no stack frame and ends in a jump to UCX's function. Reached
 * only when the plugin is active, i.e. on UCX 1.13, whose signature this is.
 */
MRN_UCX_ASM_TARGET ucs_status_t mrn_ucx_get_after_drain(MRN_UCX_GET_PARAMS)
{
	mrn_ucx_drain();
	return mrn_ucx_hot.real_get(MRN_UCX_GET_ARGS);
}

/* The hit path with UCX_MRNOTIFY_STATS=y (set only when active, on 1.13). */
MRN_UCX_ASM_TARGET ucs_status_t mrn_ucx_get_counted(MRN_UCX_GET_PARAMS)
{
	mrn_ucx_count(&mrn_ucx.stats.checks, 1);
	if (MRN_UCX_UNLIKELY(__atomic_load_n(mrn_ucx_hot.generation, __ATOMIC_ACQUIRE) !=
			     __atomic_load_n(&mrn_ucx_hot.seen, __ATOMIC_RELAXED)))
		mrn_ucx_drain();
	return mrn_ucx_hot.real_get(MRN_UCX_GET_ARGS);
}

/*
 * Watch a scratch page, unmap it, and expect the generation to move and a
 * drain to name it: the device is not just open but reports unmaps.
 */
static int mrn_ucx_self_test(const char **why)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t id, before, seen_before;
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
	seen_before = mrn_ucx.selftest_seen;
	pthread_mutex_unlock(&mrn_ucx.lock);
	if (rc < 0) {
		munmap(p, page);
		*why = "watching a scratch page failed";
		return rc;
	}
	before = __atomic_load_n(&mrn_ucx_hot.seen, __ATOMIC_RELAXED);
	munmap(p, page);
	if (__atomic_load_n(mrn_ucx_hot.generation, __ATOMIC_ACQUIRE) == before) {
		*why = "munmap of a watched page did not move the generation";
		return -EPROTO;
	}
	mrn_ucx_drain();
	pthread_mutex_lock(&mrn_ucx.lock);
	rc = mrn_ucx.selftest_seen != seen_before;
	pthread_mutex_unlock(&mrn_ucx.lock);
	if (!rc) {
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

/*
 * Keeps a region nobody watches out of its own cache, and only its own:
 * the cache's VM_UNMAPPED handler finds its page-table lock taken (UCX
 * calls mem_reg with it held), queues the range, and the cache's next
 * lookup drops the region. Other caches' regions of the range are watched,
 * and stay.
 */
static void mrn_ucx_drop_unwatched(mrn_ucx_rcache_t *rc, void *start, size_t len)
{
	ucm_event_t event;

	if (rc->unmapped_cb == NULL) {
		/* Not seen (cannot happen with UCX 1.13): every cache then. */
		ucm_vm_munmap(start, len);
		return;
	}
	memset(&event, 0, sizeof(event));
	event.vm_unmapped.address = start;
	event.vm_unmapped.size = len;
	rc->unmapped_cb(UCM_EVENT_VM_UNMAPPED, &event, rc->unmapped_arg);
}

static ucs_status_t mrn_ucx_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
				    ucs_rcache_region_t *region, uint16_t flags)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);
	void *start = (void *)region->super.start;
	size_t len = region->super.end - region->super.start;
	ucs_status_t status;
	int err = -ENODEV;

	/*
	 * Watch before UCX pins: an unmap racing the registration then makes
	 * the (fresh) region look dead, which costs a miss, never a stale hit.
	 * A range another cache's region already watches (UCP's cache
	 * registers each region on the IB domain, whose cache then registers
	 * the same range) shares that watch: the kernel reports the range,
	 * which removes it from every cache.
	 */
	pthread_mutex_lock(&mrn_ucx.lock);
	if (mrn_ucx.watch != NULL) {
		uint32_t slot = mrn_ucx_slot_find((uintptr_t)start, len);

		if (slot != 0) {
			mrn_ucx.slots[slot].refs++;
			mrn_ucx.stats.shared++;
			err = 0;
		} else {
			uint64_t id = 0;

			slot = mrn_ucx_slot_alloc(start, len);
			err = -ENOMEM;
			if (slot != 0)
				err = mrn_watch_add(mrn_ucx.watch, start, len, slot, &id);
			if (err == 0) {
				mrn_ucx.slots[slot].id = id;
				mrn_ucx_slot_hash(slot);
			} else if (slot != 0) {
				mrn_ucx_slot_free(slot);
			}
		}
		if (err == 0) {
			tr->slot = slot;
			tr->epoch = mrn_ucx.epoch;
			mrn_ucx.stats.watched++;
		}
	}
	pthread_mutex_unlock(&mrn_ucx.lock);

	status = rc->ops->mem_reg(rc->context, rcache, arg, region, flags);

	if (status != UCS_OK) {
		/* UCX keeps a failed region without deregistering it. */
		pthread_mutex_lock(&mrn_ucx.lock);
		if (tr->slot != 0 && tr->epoch == mrn_ucx.epoch) {
			mrn_ucx_slot_put(tr->slot);
			mrn_ucx.stats.watched--;
		}
		tr->slot = 0;
		pthread_mutex_unlock(&mrn_ucx.lock);
		return status;
	}

	if (err != 0) {
		/*
		 * Nobody would tell us when this region dies, so it must not
		 * stay cached. The caller still gets it, registered and valid,
		 * for this use.
		 */
		mrn_ucx_count(&mrn_ucx.stats.watch_failures, 1);
		ucs_diag("mrnotify: %s: cannot watch %p..%p (%s); not caching it", rc->name, start,
			 (char *)start + len, strerror(-err));
		mrn_ucx_drop_unwatched(rc, start, len);
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
		if (mrn_ucx_slot_put(tr->slot))
			mrn_ucx.stats.unwatched_dirty++;
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

#if MRN_UCX_OPS_HAVE_MERGE
/* UCX 1.18 calls it, unchecked, for each region a new one absorbs. */
static void mrn_ucx_merge(void *context, ucs_rcache_t *rcache, void *arg,
			  ucs_rcache_region_t *region)
{
	mrn_ucx_rcache_t *rc = context;

	if (rc->ops->merge != NULL)
		rc->ops->merge(rc->context, rcache, arg, region);
}
#endif

static const ucs_rcache_ops_t mrn_ucx_ops = {
	.mem_reg = mrn_ucx_mem_reg,
	.mem_dereg = mrn_ucx_mem_dereg,
#if MRN_UCX_OPS_HAVE_MERGE
	.merge = mrn_ucx_merge,
#endif
	.dump_region = mrn_ucx_dump_region,
};

/* ---- the interposed functions -------------------------------------------- */

/*
 * ucs_rcache_get(): every lookup of every cache in UCX 1.13. The check is
 * one load of the generation and a compare with the value of the last
 * drain, then a jump to UCX's function; a moved generation (only ever when
 * active) or counted lookups leave for the C functions above.
 *
 * On x86-64 it is written in assembly so that the arguments are never
 * touched: only %r11 (scratch in every call) is used, and every way out is
 * a jump. When the plugin is not active the generation never moves, and a
 * call with any signature (7 arguments in UCX 1.17 and later, the seventh
 * on the stack) reaches UCX's function as it was made. In C that would
 * hold only as long as the compiler emitted a tail jump.
 */
#if defined(__x86_64__)
/* An indirect-branch target (it is reached through the PLT) where CET is on. */
#if defined(__CET__) && (__CET__ & 1)
#define MRN_UCX_ENDBR "	endbr64\n"
#else
#define MRN_UCX_ENDBR ""
#endif
__asm__("	.pushsection .text\n"
	"	.globl	ucs_rcache_get\n"
	"	.type	ucs_rcache_get, @function\n"
	"	.p2align 4\n"
	"ucs_rcache_get:\n"
	"	.cfi_startproc\n" MRN_UCX_ENDBR "	cmpl	$0, mrn_ucx_hot+24(%rip)\n"
	"	jne	mrn_ucx_get_counted\n"
	"	movq	mrn_ucx_hot(%rip), %r11\n"
	"	movq	(%r11), %r11\n"
	"	cmpq	mrn_ucx_hot+8(%rip), %r11\n"
	"	jne	mrn_ucx_get_after_drain\n"
	"	jmp	*mrn_ucx_hot+16(%rip)\n"
	"	.cfi_endproc\n"
	"	.size	ucs_rcache_get, .-ucs_rcache_get\n"
	"	.popsection\n");
#else
/* Elsewhere, C: signature-agnostic only as long as this compiles to a tail jump. */
MRN_UCX_EXPORT ucs_status_t ucs_rcache_get(MRN_UCX_GET_PARAMS)
{
	const volatile uint64_t *gen = __atomic_load_n(&mrn_ucx_hot.generation, __ATOMIC_ACQUIRE);

	if (MRN_UCX_UNLIKELY(mrn_ucx_hot.count_checks))
		return mrn_ucx_get_counted(MRN_UCX_GET_ARGS);
	if (MRN_UCX_UNLIKELY(__atomic_load_n(gen, __ATOMIC_ACQUIRE) !=
			     __atomic_load_n(&mrn_ucx_hot.seen, __ATOMIC_RELAXED)))
		return mrn_ucx_get_after_drain(MRN_UCX_GET_ARGS);
	return mrn_ucx_hot.real_get(MRN_UCX_GET_ARGS);
}
#endif

#if MRN_UCX_ENTRY_CHECKS
/*
 * UCX 1.14 and later: the public UCP functions that can look up a
 * registration in UCP's cache, and ucp_worker_progress(), where the
 * requests posted by them register their buffers later (rendezvous). From
 * UCX 1.18's ucp.h and ucp_compat.h (the same names since 1.14). Each gets a
 * trampoline that compares the generation and, when it moved, drains (every
 * dead range becomes ucm_vm_munmap(), which queues it on UCP's cache, whose
 * next lookup then misses and goes through ucs_rcache_get()) before it jumps
 * to UCX's function.
 */
/* clang-format off */
#define MRN_UCX_ENTRIES(X) \
	X(ucp_tag_send_nb) \
	X(ucp_tag_send_nbr) \
	X(ucp_tag_send_sync_nb) \
	X(ucp_tag_send_nbx) \
	X(ucp_tag_send_sync_nbx) \
	X(ucp_tag_recv_nb) \
	X(ucp_tag_recv_nbr) \
	X(ucp_tag_recv_nbx) \
	X(ucp_tag_msg_recv_nb) \
	X(ucp_tag_msg_recv_nbx) \
	X(ucp_stream_send_nb) \
	X(ucp_stream_send_nbx) \
	X(ucp_stream_recv_nb) \
	X(ucp_stream_recv_nbx) \
	X(ucp_am_send_nb) \
	X(ucp_am_send_nbx) \
	X(ucp_am_recv_data_nbx) \
	X(ucp_put) \
	X(ucp_put_nb) \
	X(ucp_put_nbi) \
	X(ucp_put_nbx) \
	X(ucp_get) \
	X(ucp_get_nb) \
	X(ucp_get_nbi) \
	X(ucp_get_nbx) \
	X(ucp_atomic_op_nbx) \
	X(ucp_atomic_post) \
	X(ucp_atomic_fetch_nb) \
	X(ucp_atomic_add32) \
	X(ucp_atomic_add64) \
	X(ucp_atomic_fadd32) \
	X(ucp_atomic_fadd64) \
	X(ucp_atomic_swap32) \
	X(ucp_atomic_swap64) \
	X(ucp_atomic_cswap32) \
	X(ucp_atomic_cswap64) \
	X(ucp_mem_map) \
	X(ucp_memh_pack) \
	X(ucp_rkey_pack) \
	X(ucp_worker_progress)
/* clang-format on */

/* UCX's functions; the trampolines jump through them. */
#define MRN_UCX_ENTRY_REAL(name) __attribute__((visibility("hidden"))) void *mrn_ucx_real_##name;
MRN_UCX_ENTRIES(MRN_UCX_ENTRY_REAL)

static const struct mrn_ucx_entry {
	const char *name;
	void **real;
} mrn_ucx_entries[] = {
#define MRN_UCX_ENTRY_ROW(name) {#name, &mrn_ucx_real_##name},
	MRN_UCX_ENTRIES(MRN_UCX_ENTRY_ROW)};

/*
 * A name this plugin exports that the running UCX lacks: the dynamic linker
 * would have refused the program; say so instead of jumping to nothing.
 */
MRN_UCX_ASM_TARGET void mrn_ucx_entry_missing(void)
{
	fprintf(stderr,
		"libmrnotify-ucx: the program calls a UCP function that this UCX "
		"(%u.%u.%u) does not have\n",
		mrn_ucx.version[0], mrn_ucx.version[1], mrn_ucx.version[2]);
	abort();
}

/*
 * Reached from a trampoline with the caller's arguments saved: the
 * generation moved (or checks are counted). Drains, then the trampoline
 * restores the arguments and jumps to UCX.
 */
MRN_UCX_ASM_TARGET void mrn_ucx_entry_slow(void)
{
	if (MRN_UCX_UNLIKELY(mrn_ucx_hot.count_checks))
		mrn_ucx_count(&mrn_ucx.stats.entry_checks, 1);
	if (__atomic_load_n(mrn_ucx_hot.generation, __ATOMIC_ACQUIRE) !=
	    __atomic_load_n(&mrn_ucx_hot.seen, __ATOMIC_RELAXED))
		mrn_ucx_drain();
}

/*
 * The trampoline: the compare of ucs_rcache_get()'s hit path, then a jump.
 * It never needs the signature: the slow path saves the six argument
 * registers (and %rax, which keeps the stack 16-byte aligned at the call;
 * none of these functions takes floating-point or variadic arguments), and
 * every way out is a jump with the caller's stack as it was.
 */
#define MRN_UCX_ENTRY_ASM(name)                                                                    \
	"	.globl	" #name "\n"                                                               \
	"	.type	" #name ", @function\n"                                                    \
	"	.p2align 4\n" #name ":\n"                                                          \
	"	.cfi_startproc\n" MRN_UCX_ENDBR "	movq	mrn_ucx_hot(%rip), %r11\n"                  \
	"	movq	(%r11), %r11\n"                                                                     \
	"	cmpq	mrn_ucx_hot+8(%rip), %r11\n"                                                        \
	"	jne	1f\n"                                                                                \
	"	cmpl	$0, mrn_ucx_hot+24(%rip)\n"                                                         \
	"	jne	1f\n"                                                                                \
	"	jmp	*mrn_ucx_real_" #name "(%rip)\n"                                           \
	"1:	pushq	%rdi\n	.cfi_adjust_cfa_offset 8\n"                                               \
	"	pushq	%rsi\n	.cfi_adjust_cfa_offset 8\n"                                                 \
	"	pushq	%rdx\n	.cfi_adjust_cfa_offset 8\n"                                                 \
	"	pushq	%rcx\n	.cfi_adjust_cfa_offset 8\n"                                                 \
	"	pushq	%r8\n	.cfi_adjust_cfa_offset 8\n"                                                  \
	"	pushq	%r9\n	.cfi_adjust_cfa_offset 8\n"                                                  \
	"	pushq	%rax\n	.cfi_adjust_cfa_offset 8\n"                                                 \
	"	call	mrn_ucx_entry_slow\n"                                                               \
	"	popq	%rax\n	.cfi_adjust_cfa_offset -8\n"                                                 \
	"	popq	%r9\n	.cfi_adjust_cfa_offset -8\n"                                                  \
	"	popq	%r8\n	.cfi_adjust_cfa_offset -8\n"                                                  \
	"	popq	%rcx\n	.cfi_adjust_cfa_offset -8\n"                                                 \
	"	popq	%rdx\n	.cfi_adjust_cfa_offset -8\n"                                                 \
	"	popq	%rsi\n	.cfi_adjust_cfa_offset -8\n"                                                 \
	"	popq	%rdi\n	.cfi_adjust_cfa_offset -8\n"                                                 \
	"	jmp	*mrn_ucx_real_" #name "(%rip)\n"                                           \
	"	.cfi_endproc\n"                                                                          \
	"	.size	" #name ", .-" #name "\n"

__asm__("	.pushsection .text\n" MRN_UCX_ENTRIES(MRN_UCX_ENTRY_ASM) "	.popsection\n");

static void mrn_ucx_entries_resolve(void)
{
	for (size_t i = 0; i < sizeof(mrn_ucx_entries) / sizeof(mrn_ucx_entries[0]); i++) {
		void *p = dlsym(RTLD_NEXT, mrn_ucx_entries[i].name);

		*mrn_ucx_entries[i].real = p != NULL ? p : (void *)mrn_ucx_entry_missing;
	}
}
#else
static void mrn_ucx_entries_resolve(void) {}
#endif

MRN_UCX_EXPORT ucs_status_t ucs_rcache_create(const ucs_rcache_params_t *params, const char *name,
					      ucs_stats_node_t *stats_parent,
					      ucs_rcache_t **rcache_p)
{
	ucs_rcache_params_t ours;
	mrn_ucx_rcache_t *rc;
	ucs_status_t status;

	mrn_ucx_activate();
	/* The params are read only when active: their layout is 1.13's. */
	if (mrn_ucx_state() != MRN_UCX_STATE_ACTIVE ||
	    !(params->ucm_events & UCM_EVENT_VM_UNMAPPED))
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
	mrn_ucx_creating = rc;
	status = mrn_ucx.real_create(&ours, name, stats_parent, rcache_p);
	mrn_ucx_creating = NULL;
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

/*
 * The rcache registers its VM_UNMAPPED handler while UCX creates it: note
 * the handler, which invalidates a range in that cache alone.
 */
MRN_UCX_EXPORT ucs_status_t ucm_set_event_handler(int events, int priority, ucm_event_callback_t cb,
						  void *arg)
{
	mrn_ucx_rcache_t *rc = mrn_ucx_creating;

	if (rc != NULL && (events & UCM_EVENT_VM_UNMAPPED)) {
		rc->unmapped_cb = cb;
		rc->unmapped_arg = arg;
	}
	return mrn_ucx.real_set_handler(events, priority, cb, arg);
}

MRN_UCX_EXPORT ucs_status_t ucm_test_external_events(int events)
{
	const char *why = NULL;
	int rc;

	mrn_ucx_activate();
	if (mrn_ucx_state() == MRN_UCX_STATE_ACTIVE && (events & UCM_EVENT_VM_UNMAPPED)) {
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

/*
 * Creating a UCP context is where the plugin activates, and where
 * UCX_MRNOTIFY_ENABLE=yes (or a bad setting) makes the program fail when
 * the kernel cannot be UCX's source of unmap events.
 */
MRN_UCX_EXPORT ucs_status_t ucp_init_version(unsigned api_major_version, unsigned api_minor_version,
					     const ucp_params_t *params, const ucp_config_t *config,
					     ucp_context_h *context_p)
{
	mrn_ucx_activate();
	if (mrn_ucx_state() == MRN_UCX_STATE_REFUSED) {
		if (mrn_ucx.config_filled)
			ucs_error("mrnotify: UCX_MRNOTIFY_ENABLE=yes, but %s; no UCP context is "
				  "created "
				  "(UCX_MRNOTIFY_ENABLE=try runs UCX as configured instead)",
				  mrn_ucx.why);
		else
			ucs_error("mrnotify: %s", mrn_ucx.why);
		return mrn_ucx.refusal;
	}
	return mrn_ucx.real_init(api_major_version, api_minor_version, params, config, context_p);
}

/*
 * UCX's IB memory domain calls ibv_fork_init() when it opens (by default,
 * UCX_IB_FORK_INIT=try), and with rdma-core < 52 that makes every
 * ibv_reg_mr() madvise(MADV_DONTFORK) its range (and ibv_dereg_mr()
 * MADV_DOFORK). Changing a mapping's flags splits the mapping, and splitting
 * it inside a transparent huge page splits the page's PMD, which kernel 6.1
 * reports to MMU notifiers as a change (MMU_NOTIFY_CLEAR) of the whole
 * 2 MiB: the watch just made, and its neighbours', would be invalidated
 * with every registration. Kernels >= 5.13 keep pinned pages with the parent
 * on fork(), where rdma-core says IBV_FORK_UNNEEDED; there the call is
 * answered with success and rdma-core's madvise stays off, which is what
 * rdma-core >= 52 does itself. Only when the plugin is active: otherwise
 * (and when rdma-core cannot tell) the call goes to rdma-core unchanged.
 */
static int mrn_ucx_real_fork_init(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	mrn_ucx_fork_init_fn fn;

	/* A handle, not RTLD_NEXT: UCX's IB module loads libibverbs privately. */
	if (h == NULL)
		h = dlopen("libibverbs.so.1", RTLD_LAZY);
	if (h == NULL)
		return ENOSYS;
	fn = (mrn_ucx_fork_init_fn)dlsym(h, "ibv_fork_init");
	return fn != NULL ? fn() : ENOSYS;
}

static int mrn_ucx_fork_unneeded(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	mrn_ucx_fork_status_fn fn;

	if (h == NULL)
		return 0;
	fn = (mrn_ucx_fork_status_fn)dlsym(h, "ibv_is_fork_initialized");
	return fn != NULL && fn() == MRN_UCX_IBV_FORK_UNNEEDED;
}

MRN_UCX_EXPORT int ibv_fork_init(void)
{
	mrn_ucx_activate();
	if (mrn_ucx_state() == MRN_UCX_STATE_ACTIVE && mrn_ucx_fork_unneeded()) {
		ucs_debug("mrnotify: ibv_fork_init(): not needed (the kernel copies pinned pages "
			  "on fork), "
			  "skipped so that registrations do not split huge pages");
		return 0;
	}
	return mrn_ucx_real_fork_init();
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
	__atomic_store_n(&mrn_ucx_hot.seen, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mrn_ucx_hot.generation, &mrn_ucx_forked, __ATOMIC_RELEASE);
}

/* Lock held. */
static void mrn_ucx_child_reopen(void)
{
	int rc;

	mrn_ucx.child_reopen = 0;
	rc = mrn_watch_open(MRN_MONITOR_KERNEL, &mrn_ucx.watch);
	if (rc == 0) {
		const volatile uint64_t *gen = mrn_watch_generation(mrn_ucx.watch);

		__atomic_store_n(&mrn_ucx_hot.seen, __atomic_load_n(gen, __ATOMIC_ACQUIRE),
				 __ATOMIC_RELAXED);
		__atomic_store_n(&mrn_ucx_hot.generation, gen, __ATOMIC_RELEASE);
	} else {
		/* New regions then stay out of the caches (see mem_reg). */
		mrn_ucx.watch = NULL;
		__atomic_store_n(&mrn_ucx_hot.seen, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&mrn_ucx_hot.generation, &mrn_ucx_still, __ATOMIC_RELEASE);
		ucs_warn("mrnotify: forked child cannot open %s (%s); registrations will not be "
			 "cached",
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
	if (mrn_ucx.hash != NULL)
		memset(mrn_ucx.hash, 0, mrn_ucx.slot_cap * sizeof(*mrn_ucx.hash));
}

static const char *mrn_ucx_enable_name(int v)
{
	return v == UCS_YES ? "yes" : v == UCS_NO ? "no" : "try";
}

/*
 * Cannot be used, for the reason in mrn_ucx.why. With ENABLE=yes UCP
 * contexts fail from now on (ucp_init_version says why, each time); with
 * try, UCX runs as configured and a message says why once, at the given
 * level (diag for a node without the device, which is what try is for).
 */
static mrn_ucx_state_t mrn_ucx_unusable(ucs_log_level_t level)
{
	if (mrn_ucx.config.enable == UCS_YES) {
		mrn_ucx.refusal = UCS_ERR_NO_DEVICE;
		return MRN_UCX_STATE_REFUSED;
	}
	ucs_log(level, "mrnotify: not used (UCX_MRNOTIFY_ENABLE=try): %s; UCX runs as configured",
		mrn_ucx.why);
	return MRN_UCX_STATE_INACTIVE;
}

static int mrn_ucx_version_ok(void)
{
	return mrn_ucx.version[0] == UCP_API_MAJOR && mrn_ucx.version[1] == UCP_API_MINOR;
}

/* Decides, once: from here on UCX relies on us for every unmap, or not. */
static mrn_ucx_state_t mrn_ucx_decide(void)
{
	const char *why = NULL, *enable;
	ucs_status_t status;
	int rc;

	if (!mrn_ucx_version_ok()) {
		/*
		 * Another UCX: its structures are not the ones this was built
		 * for (even the configuration parser's arguments and table
		 * entries changed in 1.15), so nothing of it is touched: the
		 * wrappers only jump on, and UCX runs as configured. Said once,
		 * as a warning, unless ENABLE (read raw, not parsed) says no:
		 * this is an installation error, not a node without the module.
		 */
		enable = getenv("UCX_MRNOTIFY_ENABLE");
		if (enable != NULL && (enable[0] == 'n' || enable[0] == 'N' ||
				       !strcmp(enable, "0") || !strcasecmp(enable, "off")))
			return MRN_UCX_STATE_OFF;
		snprintf(mrn_ucx.why, sizeof(mrn_ucx.why),
			 "this plugin was built for UCX %d.%d.x and the process runs UCX %u.%u.%u",
			 UCP_API_MAJOR, UCP_API_MINOR, mrn_ucx.version[0], mrn_ucx.version[1],
			 mrn_ucx.version[2]);
		ucs_warn("mrnotify: not used: %s; passing everything through to UCX unchanged",
			 mrn_ucx.why);
		return MRN_UCX_STATE_PASSTHROUGH;
	}

	/* Parsing also marks our variables used (UCX warns at ucp_init). */
#if UCP_API_MINOR >= 15
	status = ucs_config_parser_fill_opts(&mrn_ucx.config,
					     UCS_CONFIG_GET_TABLE(mrn_ucx_config_table), "UCX_", 0);
#else
	status = ucs_config_parser_fill_opts(&mrn_ucx.config, mrn_ucx_config_table, "UCX_",
					     "MRNOTIFY_", 0);
#endif
	if (status != UCS_OK) {
		/* Nothing to go by: fail UCP contexts, as yes would. */
		snprintf(mrn_ucx.why, sizeof(mrn_ucx.why),
			 "a UCX_MRNOTIFY_* setting is not valid (%s); see ucx_info -c -f",
			 ucs_status_string(status));
		mrn_ucx.refusal = UCS_ERR_INVALID_PARAM;
		return MRN_UCX_STATE_REFUSED;
	}
	mrn_ucx.config_filled = 1;
	if (mrn_ucx.config.enable == UCS_NO)
		return MRN_UCX_STATE_OFF;
	if (!ucm_global_opts.enable_events) {
		/*
		 * UCX_MEM_EVENTS=n makes UCM refuse every event handler, ours
		 * to deliver or not, so UCX creates no registration cache at
		 * all: there would be nothing to feed.
		 */
		snprintf(
			mrn_ucx.why, sizeof(mrn_ucx.why),
			"UCX_MEM_EVENTS=n, with which UCX creates no registration caches (leave it "
			"at y and turn the hooks off with UCX_MEM_MMAP_HOOK_MODE=none instead)");
		return mrn_ucx_unusable(UCS_LOG_LEVEL_WARN);
	}
	rc = mrn_watch_open(MRN_MONITOR_KERNEL, &mrn_ucx.watch);
	if (rc < 0) {
		const int err = access(MRN_DEVICE_PATH, F_OK) == 0 ? -rc : ENOENT;

		if (err == ENOENT)
			snprintf(mrn_ucx.why, sizeof(mrn_ucx.why),
				 "%s is missing (mrnotify.ko not loaded?)", MRN_DEVICE_PATH);
		else
			snprintf(mrn_ucx.why, sizeof(mrn_ucx.why), "%s cannot be opened: %s",
				 MRN_DEVICE_PATH, strerror(err));
		mrn_ucx.watch = NULL;
		return mrn_ucx_unusable(UCS_LOG_LEVEL_DIAG);
	}
	__atomic_store_n(&mrn_ucx_hot.seen,
			 __atomic_load_n(mrn_watch_generation(mrn_ucx.watch), __ATOMIC_ACQUIRE),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&mrn_ucx_hot.generation, mrn_watch_generation(mrn_ucx.watch),
			 __ATOMIC_RELEASE);
	rc = mrn_ucx_self_test(&why);
	if (rc < 0) {
		__atomic_store_n(&mrn_ucx_hot.generation, &mrn_ucx_still, __ATOMIC_RELEASE);
		__atomic_store_n(&mrn_ucx_hot.seen, 0, __ATOMIC_RELAXED);
		mrn_watch_close(mrn_ucx.watch);
		mrn_ucx.watch = NULL;
		snprintf(mrn_ucx.why, sizeof(mrn_ucx.why), "%s failed its self-test: %s (%s)",
			 MRN_DEVICE_PATH, why, strerror(-rc));
		return mrn_ucx_unusable(UCS_LOG_LEVEL_WARN);
	}
	/* Only now: from here on UCX relies on us for every unmap. */
	ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
	pthread_atfork(NULL, NULL, mrn_ucx_atfork_child);
	__atomic_store_n(&mrn_ucx_hot.count_checks, mrn_ucx.config.stats, __ATOMIC_RELAXED);
	ucs_debug("mrnotify: %s is UCX's source of VM_UNMAPPED events", MRN_DEVICE_PATH);
	return MRN_UCX_STATE_ACTIVE;
}

static void mrn_ucx_decide_once(void)
{
	const mrn_ucx_state_t state = mrn_ucx_decide();

	__atomic_store_n(&mrn_ucx.state, state, __ATOMIC_RELEASE);
	ucs_debug("mrnotify: UCX_MRNOTIFY_ENABLE=%s: %s",
		  mrn_ucx.config_filled ? mrn_ucx_enable_name(mrn_ucx.config.enable) : "(invalid)",
		  state == MRN_UCX_STATE_ACTIVE ? "active" : "inactive");
}

/*
 * Called where UCX is about to need us (a UCP context, a cache, an IB
 * device). Threads that get here first wait for the decision.
 */
static void mrn_ucx_activate(void)
{
	if (MRN_UCX_LIKELY(mrn_ucx_state() != MRN_UCX_STATE_NEW))
		return;
	pthread_once(&mrn_ucx.once, mrn_ucx_decide_once);
}

__attribute__((constructor)) static void mrn_ucx_init(void)
{
	const char *probe = getenv("MRNOTIFY_UCX_PROBE");

	mrn_ucx_hot.real_get = (mrn_ucx_get_fn)mrn_ucx_resolve("ucs_rcache_get");
	mrn_ucx.real_create = (mrn_ucx_create_fn)mrn_ucx_resolve("ucs_rcache_create");
	mrn_ucx.real_destroy = (mrn_ucx_destroy_fn)mrn_ucx_resolve("ucs_rcache_destroy");
	mrn_ucx.real_test_external = (mrn_ucx_test_fn)mrn_ucx_resolve("ucm_test_external_events");
	mrn_ucx.real_init = (mrn_ucx_init_fn)mrn_ucx_resolve("ucp_init_version");
	mrn_ucx.real_set_handler = (mrn_ucx_set_handler_fn)mrn_ucx_resolve("ucm_set_event_handler");
	mrn_ucx_entries_resolve();

	/* A stable entry point in every UCX; nothing else is touched before. */
	ucp_get_version(&mrn_ucx.version[0], &mrn_ucx.version[1], &mrn_ucx.version[2]);

	/*
	 * Listed by ucx_info -c; read when the plugin activates, not here. The
	 * table entry's layout and the parser are 1.13's: not under another
	 * UCX.
	 */
	if (mrn_ucx_version_ok()) {
		UCS_CONFIG_ADD_TABLE(mrn_ucx_config_table, &ucs_config_global_list);
		mrn_ucx.table_added = 1;
	}

	/*
	 * mrnotify-ucx-run asks which UCX a program would run with this
	 * library preloaded (the library's own libucp wins over the program's),
	 * before it preloads it.
	 */
	if (probe != NULL && strcmp(probe, "version") == 0)
		fprintf(stderr, "libmrnotify-ucx: built for UCX %d.%d, runs UCX %u.%u.%u: %s\n",
			UCP_API_MAJOR, UCP_API_MINOR, mrn_ucx.version[0], mrn_ucx.version[1],
			mrn_ucx.version[2], mrn_ucx_version_ok() ? "supported" : "unsupported");
}

__attribute__((destructor)) static void mrn_ucx_fini(void)
{
	const mrn_ucx_stats_t *s = &mrn_ucx.stats;
	const mrn_ucx_state_t state = mrn_ucx_state();

	/* Only processes that used UCX: a preloaded `ls` says nothing. */
	if (state != MRN_UCX_STATE_NEW && mrn_ucx.config_filled && mrn_ucx.config.stats) {
		/*
		 * One write(2): the ranks of a job share one stderr, and an
		 * unbuffered fprintf writes in pieces that interleave.
		 */
		char line[1024];
		int n = snprintf(
			line, sizeof(line),
			"libmrnotify-ucx: pid %d: %s, checks %" PRIu64 ", entry checks %" PRIu64
			", drains %" PRIu64 ", ranges invalidated %" PRIu64
			", regions watched %" PRIu64 " (of them sharing a watch %" PRIu64
			"; unwatched %" PRIu64 ", watches dirty at removal %" PRIu64
			"), watch failures %" PRIu64 ", rcaches %" PRIu64 "%s%s\n",
			(int)getpid(), state == MRN_UCX_STATE_ACTIVE ? "active" : "inactive",
			s->checks, s->entry_checks, s->drains, s->ranges, s->watched, s->shared,
			s->unwatched, s->unwatched_dirty, s->watch_failures, s->rcaches,
			state == MRN_UCX_STATE_ACTIVE ? "" : "; ",
			state == MRN_UCX_STATE_ACTIVE ? ""
			: state == MRN_UCX_STATE_OFF  ? "UCX_MRNOTIFY_ENABLE=no"
						      : mrn_ucx.why);

		if (n > 0) {
			if ((size_t)n >= sizeof(line)) {
				n = sizeof(line) - 1;
				line[n - 1] = '\n';
			}
			if (write(STDERR_FILENO, line, (size_t)n) < 0) {
				/* Nothing to do about it at exit. */
			}
		}
	}
	if (mrn_ucx.table_added)
		UCS_CONFIG_REMOVE_TABLE(mrn_ucx_config_table);
	/* The watch stays open: UCX may still deregister through us at exit. */
}

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mrnotify: invalidation counter and dirty list for user-space RDMA
 * registration caches. What the parts of the module share:
 *  - mrn_dev.c: the device, its contexts and their ioctls;
 *  - mrn_notifier.c: the notifier of each address space and its tree;
 *  - mrn_user.c: what each user holds, per user namespace;
 *  - mrn_stats.c: the module's counters and gauges, in debugfs and sysfs.
 *
 * Each open file of /dev/mrnotify is a context bound to the opener's mm.
 * User space registers byte ranges. When the core mm announces a change
 * that can replace the pages under a range, the module marks the
 * registration dirty and bumps a 64-bit generation in a page mapped
 * read-only into the process. A cache checks that word on every hit and,
 * when it moved, drains the dirty registrations with one ioctl.
 *
 * Bounded work per invalidation: an address space has one mmu_notifier,
 * shared by all its contexts (mmu_notifier_get), and one interval tree of
 * its clean registrations. A change finds the registrations it overlaps in
 * that tree, marks them and takes them out of it, so each registration is
 * marked at most once and a second change of the same range finds nothing.
 * One callback marks at most MRN_MARK_BUDGET registrations: whatever is
 * left in its range is deferred, in O(1), to a short log of pending ranges,
 * and every context of the mm sees its generation move. The owner resolves
 * the log at its next REGISTER, DRAIN or QUERY, in its own context, with
 * the lock given up every MRN_MARK_BUDGET marks. So a change costs whoever
 * makes it (another user's truncate, reclaim, the OOM reaper) O(log n) plus
 * at most MRN_MARK_BUDGET marks and one store per context of the mm
 * (MRN_MM_MAX_CONTEXTS), however many registrations the owner made.
 *
 * A change marks twice: at its start, the registrations that predate it;
 * at its end, the ones registered while it ran (they may pin pages the
 * change replaces). Nothing pairs a start with its end, so nothing is lost
 * when the core mm starts a range twice or never ends it (5.10's
 * change_pmd_range() at address 0), and a REGISTER never waits for, or is
 * made dirty by, a change of an unrelated range.
 *
 * The mm's notifier stays until the mm exits (its release drops the mm's
 * own reference; unloading the module drops the ones left): the
 * mm_take_all_locks() of mmu_notifier_get() runs once per address space,
 * not once per open after a close.
 *
 * Locking, outermost first:
 *  - ctx->drain_mutex serialises DRAINs across their copy to user space,
 *    so that a batch in flight has one owner. UNREGISTER of a registration
 *    in that batch waits for it, outside ctx->mutex.
 *  - ctx->mutex serialises the index changes of REGISTER, UNREGISTER and
 *    DRAIN: it keeps a registration alive while an ioctl works on it
 *    outside the spinlocks. No ioctl waits for invalidations under it, and
 *    no user memory is touched under it: a fault on a
 *    userfaultfd-registered buffer must not stall the context.
 *  - mrn_mm->settle_mutex: one resolver of the pending log at a time, so
 *    that whoever finds the log empty knows every deferred mark was made.
 *  - mrn_mm->lock (a spinlock) protects the tree, the pending log, the list
 *    of contexts and reg->dirty. The notifier takes it and, nested inside,
 *    the context's xa_lock; it never sleeps holding them, never allocates,
 *    never defers work to a thread, so the generation has moved before
 *    munmap() and friends return.
 *  - ctx->regs.xa_lock protects the dirty marks, the generation and
 *    nr_dirty (reg->dirty is written under both spinlocks).
 */

#ifndef MRN_INTERNAL_H
#define MRN_INTERNAL_H

#include <linux/interval_tree.h>
#include <linux/list.h>
#include <linux/mm_types.h>
#include <linux/mmu_notifier.h>
#include <linux/mutex.h>
#include <linux/percpu.h>
#include <linux/refcount.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/uidgid.h>
#include <linux/wait.h>
#include <linux/xarray.h>

#ifndef CONFIG_64BIT
/* User space reads the generation with one 64-bit load; it must not tear. */
#error "mrnotify needs a 64-bit kernel"
#endif

/*
 * Memory a process asks for through the device stays charged to its memory
 * cgroup, and at the cgroup's limit the request fails with ENOMEM rather
 * than waking the OOM killer: a registration cache can fall back to an
 * uncached registration, a killed rank takes the whole job down.
 */
#define MRN_GFP_USER	(GFP_KERNEL_ACCOUNT | __GFP_RETRY_MAYFAIL)

/* xarray marks (the index allocates no ids, so all three are free). */
#define MRN_MARK_DIRTY	XA_MARK_1	/* invalidated, not yet drained */
#define MRN_MARK_BATCH	XA_MARK_2	/* copied out by the DRAIN in progress */

/* The most registrations one notifier callback marks (see the top). */
#define MRN_MARK_BUDGET		16
/* Deferred ranges kept apart; more are merged into the last one. */
#define MRN_PENDING_RANGES	16
/*
 * Contexts of one address space: a deferral stores to each, so their
 * number bounds its cost. A process has one per cache (UCX, Open MPI,
 * libfabric, an audit).
 */
#define MRN_MM_MAX_CONTEXTS	64

/* Byte range [start, last], inclusive as in the interval tree. */
struct mrn_range {
	unsigned long start, last;
	u8 reason;		/* MRN_REASON_*, for a deferred range */
};

/*
 * One per address space that has had a context: the mmu_notifier every
 * context of that mm shares, and the registrations it watches.
 */
struct mrn_mm {
	struct mmu_notifier mn;
	spinlock_t lock;		/* what follows, up to settle_mutex */
	/* Every context's clean registrations; a mark takes one out. */
	struct rb_root_cached clean;
	/* Ranges changed beyond a callback's budget, not yet resolved. */
	struct mrn_range pending[MRN_PENDING_RANGES];
	unsigned int nr_pending;
	struct list_head ctxs;		/* mrn_ctx.mm_link */
	unsigned int nr_ctxs;
	struct mutex settle_mutex;	/* see the comment at the top */
	/* The mm's own reference, until its release or the module's unload. */
	struct list_head kept_link;	/* under mrn_kept_lock */
	bool kept;			/* ditto */
};

/*
 * One registration, 80 bytes: its range as a node of the mm's tree, its
 * context, the cookie, the id, the dirty bit and why it became dirty. The dirty list is a mark
 * in the context's index, so no list pointers are needed; with the index
 * slot and memcg accounting the kernel spends about 96 bytes per
 * registration.
 */
struct mrn_reg {
	struct interval_tree_node node;	/* [start, last], in mrn_mm.clean while clean */
	struct mrn_ctx *ctx;
	u64 cookie;
	u64 id;		/* constant once the registration is in the index */
	/* Written under mrn_mm->lock and the xa_lock, read under either. */
	bool dirty;
	u8 reason;	/* MRN_REASON_* once dirty */
	u8 mark_flags;	/* MRN_ENTRY_* once dirty */
};

/*
 * What one user holds across all contexts, like inotify's per-user watches
 * (a per-context cap alone is multiplied by RLIMIT_NOFILE and by the number
 * of processes), counted per user namespace as the kernel's ucounts are: a
 * user is charged in its namespace and, as that namespace's owner, in the
 * namespace above, up to the initial one, each level against the same
 * caps. A container's users have counts of their own, and nobody holds more
 * by creating namespaces.
 */
enum mrn_user_count {
	MRN_UC_CONTEXTS,
	MRN_UC_REGS,
	MRN_UC_NR
};

struct mrn_user {
	struct hlist_node node;		/* mrn_users, under mrn_users_lock */
	struct user_namespace *ns;	/* referenced */
	kuid_t uid;
	refcount_t ref;			/* contexts, and the levels below */
	/* The owner of ns, in ns->parent; NULL in the initial namespace. */
	struct mrn_user *parent;
	atomic_long_t count[MRN_UC_NR];
};

struct mrn_ctx {
	struct mm_struct *mm;		/* mmgrab()ed: mm_count, not mm_users */
	struct mrn_mm *mn;		/* mm's shared notifier, one reference */
	struct list_head mm_link;	/* mn->ctxs, under mn->lock */
	struct page *status_page;
	struct mrn_status *status;	/* page_address(status_page) */
	struct mrn_user *user;		/* charged for every registration */
	struct mutex mutex;		/* see the comment at the top */
	struct mutex drain_mutex;	/* ditto */
	/*
	 * slot -> registration, or, for a free slot, a value entry holding
	 * the generation of its last registration and the next free slot.
	 * Its xa_lock also guards the marks, generation and nr_dirty.
	 */
	struct xarray regs;
	/*
	 * Page number -> page of validity words (MRN_VALIDITY_SLOTS words),
	 * allocated when a slot or a fault first needs it. A word is written
	 * under mrn_mm->lock (mrn_watch) or the regs xa_lock (marks, unlink).
	 */
	struct xarray valid_pages;
	u32 free_slot;			/* mutex and xa_lock: 0 for none */
	u32 top_slot;			/* mutex: the highest slot in use yet */
	u32 max_regs;			/* max_registrations at open time */
	u64 nr_regs;			/* xa_lock and mutex */
	u64 nr_dirty;
	u64 generation;
	/* poll() waiters: woken when a registration becomes dirty. */
	wait_queue_head_t waiters;
};

/*
 * Module-wide counters, per CPU, shown one value per file in debugfs
 * (/sys/kernel/debug/mrnotify/): kernel internals, not ABI. The first ones
 * count, by the kernel's reason, the registrations an invalidating change
 * marked, and the ignored changes that met at least one registration.
 */
enum mrn_counter {
	MRN_CNT_UNMAP,			/* munmap, mremap, exit's unmap */
	MRN_CNT_CLEAR,			/* zap: madvise, truncate, COW, reclaim */
	MRN_CNT_PROTECTION_VMA,		/* mprotect, NUMA hinting: ignored */
	MRN_CNT_PROTECTION_PAGE,	/* fork write-protect, mkclean: ignored */
	MRN_CNT_SOFT_DIRTY,		/* clear_refs: ignored */
	MRN_CNT_RELEASE,		/* the address space is torn down */
	MRN_CNT_MIGRATE,		/* device migration */
	MRN_CNT_EXCLUSIVE,		/* device exclusive access */
	MRN_CNT_OTHER,			/* reasons this module does not know */
	MRN_CNT_INVALIDATED,		/* registrations that became dirty */
	MRN_CNT_MARKED_AT_END,		/* registered while a change ran, marked at its end */
	MRN_CNT_DEFERRED,		/* callbacks that left marks to the owner */
	MRN_CNT_DEFERRED_MERGED,	/* deferred ranges merged into another */
	MRN_CNT_IGNORED,		/* protection changes (as above) */
	MRN_CNT_DRAINED,		/* entries reported by DRAIN */
	MRN_CNT_UNREGISTERED_DIRTY,	/* UNREGISTERs that returned WAS_DIRTY */
	MRN_CNT_USER_LIMIT,		/* REGISTER or open refused by a user cap */
	MRN_CNT_NOTIFIERS,		/* mm notifiers registered (mm_take_all_locks) */
	MRN_NR_COUNTERS
};

struct mrn_pcpu_stats {
	u64 count[MRN_NR_COUNTERS];
};

DECLARE_PER_CPU(struct mrn_pcpu_stats, mrn_pcpu_stats);

static inline void mrn_count(enum mrn_counter c)
{
	this_cpu_inc(mrn_pcpu_stats.count[c]);
}

static inline void mrn_count_add(enum mrn_counter c, u64 n)
{
	this_cpu_add(mrn_pcpu_stats.count[c], n);
}

/*
 * The longest any notifier callback held mrn_mm->lock since the module was
 * loaded (or the debugfs file was reset), and the most it marked in one
 * call: the per-event bound, observable.
 */
void mrn_note_callback(u64 hold_ns, unsigned int marks);

/* mrn_dev.c: the validity word of @slot, see MRN_VALIDITY_SLOTS. */
void mrn_valid_set(struct mrn_ctx *ctx, u32 slot, u32 word);

/* mrn_dev.c: module parameters and test knobs the other parts read. */
extern bool mrn_trust_newer_kernel;
extern u32 mrn_debug_generation_step;

/* mrn_stats.c */
struct attribute_group;
extern atomic_long_t mrn_nr_contexts;	/* open contexts */
extern atomic_long_t mrn_nr_regs;	/* registrations in every context */
extern const struct attribute_group *mrn_groups[];
void mrn_stats_init(void);
void mrn_stats_exit(void);

/* mrn_user.c */
struct mrn_user *mrn_user_get(struct user_namespace *ns, kuid_t uid);
void mrn_user_put(struct mrn_user *user);
bool mrn_charge(struct mrn_user *user, enum mrn_user_count c,
		unsigned int limit);
void mrn_uncharge(struct mrn_user *user, enum mrn_user_count c);

/* mrn_notifier.c */
struct mrn_mm *mrn_mm_get(struct mm_struct *mm);
int mrn_mm_attach(struct mrn_mm *m, struct mrn_ctx *ctx);
void mrn_mm_detach(struct mrn_mm *m, struct mrn_ctx *ctx);
void mrn_mm_put(struct mrn_mm *m);
void mrn_mm_unkeep_all(void);
void mrn_mm_settle(struct mrn_mm *m);
bool mrn_mm_settled_generation(struct mrn_ctx *ctx, u64 *generation);
bool mrn_mm_pending(struct mrn_mm *m);
void mrn_watch(struct mrn_ctx *ctx, struct mrn_reg *reg);
void mrn_unwatch(struct mrn_ctx *ctx, struct mrn_reg *reg);

#endif /* MRN_INTERNAL_H */

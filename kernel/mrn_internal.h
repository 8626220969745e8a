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
 * marked at most once and a second change of the same range finds nothing:
 * whoever registers what, a change costs O(log n) plus one mark per
 * registration that was clean, and every mark was paid for by a REGISTER.
 * (With one interval notifier per registration, a change walked every
 * registration over its range each time, dirty or not, in the context of
 * whoever made it: another user's truncate, reclaim, the flusher.)
 *
 * Locking:
 *  - mrn_mm->lock (a spinlock) protects the tree, the in-flight table and
 *    reg->dirty. The notifier takes it and, nested inside, the context's
 *    xa_lock; it never sleeps holding them, never allocates, never defers
 *    work, so the mark is complete before munmap() and friends return.
 *  - ctx->regs.xa_lock protects the dirty marks, the generation and
 *    nr_dirty (reg->dirty is written under both locks).
 *  - ctx->mutex serialises the index changes of REGISTER, UNREGISTER and
 *    DRAIN: it keeps a registration alive while an ioctl works on it
 *    outside the spinlocks. No ioctl waits for invalidations under it, and
 *    no user memory is touched under it: a fault on a
 *    userfaultfd-registered buffer must not stall the context.
 *  - ctx->drain_mutex (taken before ctx->mutex) serialises DRAINs across
 *    their copy to user space, so that a batch in flight has one owner.
 *    UNREGISTER of a registration in that batch waits for it, outside
 *    ctx->mutex.
 */

#ifndef MRN_INTERNAL_H
#define MRN_INTERNAL_H

#include <linux/interval_tree.h>
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

/*
 * Invalidations of one address space that REGISTER can tell apart while
 * they run; more at once are counted, and then REGISTER treats every range
 * as overlapped (see mrn_inflight_overlaps()).
 */
#define MRN_INFLIGHT_SLOTS	8

/*
 * One per address space with an open context: the mmu_notifier every
 * context of that mm shares, and the registrations it watches.
 */
struct mrn_mm {
	struct mmu_notifier mn;
	spinlock_t lock;		/* everything below, and reg->dirty */
	/* Every context's clean registrations; a mark takes one out. */
	struct rb_root_cached clean;
	/*
	 * The invalidating changes between their start and their end: their
	 * addresses, and the range the core mm passes to both as the key
	 * (never dereferenced: should an end be lost, nothing dangles). The
	 * ones beyond the table are only counted.
	 */
	struct mrn_inflight {
		const struct mmu_notifier_range *key;	/* NULL: free */
		unsigned long start, end;
	} inflight[MRN_INFLIGHT_SLOTS];
	unsigned int inflight_untracked;
};

/*
 * One registration, 80 bytes: its range as a node of the mm's tree, its
 * context, the cookie, the id and the dirty bit. The dirty list is a mark
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
	MRN_CNT_REGISTERED_DIRTY,	/* dirty at REGISTER: a change was running */
	MRN_CNT_IGNORED,		/* protection changes (as above) */
	MRN_CNT_DRAINED,		/* entries reported by DRAIN */
	MRN_CNT_UNREGISTERED_DIRTY,	/* UNREGISTERs that returned WAS_DIRTY */
	MRN_CNT_USER_LIMIT,		/* REGISTER or open refused by a user cap */
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
void mrn_mm_quiesce(struct mrn_mm *m);
void mrn_mm_put(struct mrn_mm *m);
void mrn_watch(struct mrn_ctx *ctx, struct mrn_reg *reg);
void mrn_unwatch(struct mrn_ctx *ctx, struct mrn_reg *reg);

#endif /* MRN_INTERNAL_H */

// SPDX-License-Identifier: GPL-2.0
/*
 * mrnotify: invalidation counter and dirty list for user-space RDMA
 * registration caches.
 *
 * Each open file of /dev/mrnotify is a context bound to the opener's mm.
 * User space registers byte ranges; each becomes an mmu_interval_notifier.
 * When the core mm announces a change that can replace the pages under a
 * range, the notifier callback marks the registration dirty and bumps a
 * 64-bit generation in a page mapped read-only into the process. A cache
 * checks that word on every hit and, when it moved, drains the dirty
 * registrations with one ioctl.
 *
 * Locking:
 *  - ctx->regs.xa_lock (a spinlock) protects the dirty marks, reg->state,
 *    the generation and the counters. It is the only lock the notifier
 *    callback takes, so the mark is complete before munmap() and friends
 *    return, and the callback never sleeps, allocates or defers work.
 *  - ctx->mutex serialises REGISTER, UNREGISTER and DRAIN: it keeps a
 *    registration alive while an ioctl works on it outside the spinlock.
 *    The notifier never takes it, so waiting for callbacks under it
 *    (mmu_interval_notifier_remove, mmu_interval_read_begin) is safe.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/build_bug.h>
#include <linux/device.h>
#include <linux/fs.h>
#include <linux/lockdep.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/percpu.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/xarray.h>

#include <linux/mrnotify.h>

#include "mrnotify_compat.h"

#ifndef CONFIG_64BIT
/* User space reads the generation with one 64-bit load; it must not tear. */
#error "mrnotify needs a 64-bit kernel"
#endif

/* Registrations a context may hold unless the administrator says otherwise. */
#define MRN_DEFAULT_MAX_REGISTRATIONS	(1U << 20)
/* Ids are u32 and never 0; keep the cap well below the id space. */
#define MRN_MAX_REGISTRATIONS_LIMIT	(1U << 31)

/* xarray marks: XA_MARK_0 is the allocator's free mark. */
#define MRN_MARK_DIRTY	XA_MARK_1	/* invalidated, not yet drained */
#define MRN_MARK_BATCH	XA_MARK_2	/* copied out by the DRAIN in progress */

/* reg->state bits, under xa_lock */
#define MRN_REG_DIRTY	BIT(0)

/*
 * One registration, 112 bytes: the 88-byte interval notifier, its context,
 * the cookie and the id. The address range lives in the notifier's interval
 * tree node, and the dirty list is a mark in the id index, so no list
 * pointers are needed; with the index slot and memcg accounting the kernel
 * spends about 128 bytes per registration.
 */
struct mrn_reg {
	struct mmu_interval_notifier notifier;
	struct mrn_ctx *ctx;
	u64 cookie;
	u32 id;
	u32 state;
};

struct mrn_ctx {
	struct mm_struct *mm;		/* mmgrab()ed: mm_count, not mm_users */
	struct page *status_page;
	struct mrn_status *status;	/* page_address(status_page) */
	struct mutex mutex;		/* see the comment at the top */
	/*
	 * id -> registration. Its xa_lock also guards what the notifier
	 * touches: marks, reg->state, generation and the counters below.
	 */
	struct xarray regs;
	u32 next_id;			/* cyclic id allocation */
	u32 max_regs;			/* max_registrations at open time */
	u64 nr_regs;			/* xa_lock and mutex */
	u64 nr_dirty;
	u64 generation;
	u64 invalidated;
	u64 already_dirty;
	u64 ignored;
	u64 drained;
	u64 unregistered_dirty;
	u64 callbacks[MRN_EV_SLOTS];
	/* poll() waiters: woken when a registration becomes dirty. */
	wait_queue_head_t waiters;
};

/* Module-wide counters for the root-only stats file. */
struct mrn_pcpu_stats {
	u64 callbacks[MRN_EV_SLOTS];
	u64 invalidated;
};

static DEFINE_PER_CPU(struct mrn_pcpu_stats, mrn_pcpu_stats);
static atomic_long_t mrn_nr_contexts = ATOMIC_LONG_INIT(0);
static atomic_long_t mrn_nr_regs = ATOMIC_LONG_INIT(0);
static struct kmem_cache *mrn_reg_cache;

static unsigned int mrn_max_registrations = MRN_DEFAULT_MAX_REGISTRATIONS;

static int mrn_param_set_max(const char *val, const struct kernel_param *kp)
{
	unsigned int n;
	int ret;

	ret = kstrtouint(val, 0, &n);
	if (ret)
		return ret;
	if (n < 1 || n > MRN_MAX_REGISTRATIONS_LIMIT)
		return -EINVAL;
	return param_set_uint(val, kp);
}

static const struct kernel_param_ops mrn_param_max_ops = {
	.set = mrn_param_set_max,
	.get = param_get_uint,
};

module_param_cb(max_registrations, &mrn_param_max_ops,
		&mrn_max_registrations, 0644);
MODULE_PARM_DESC(max_registrations,
		 "Registrations per context, read when the context is opened (default 1048576)");

/**
 * mrn_event_slot - classify a notifier event
 * @event: the kernel's reason for the invalidation
 * @invalidates: set to whether the event can replace pages
 *
 * The mapping is explicit so that the ABI does not depend on the order of
 * enum mmu_notifier_event.
 *
 * Return: the event's slot in the statistics (enum mrn_event).
 */
static unsigned int mrn_event_slot(enum mmu_notifier_event event,
				   bool *invalidates)
{
	*invalidates = true;
	switch (event) {
	case MMU_NOTIFY_UNMAP:
		return MRN_EV_UNMAP;
	case MMU_NOTIFY_CLEAR:
		return MRN_EV_CLEAR;
	case MMU_NOTIFY_RELEASE:
		return MRN_EV_RELEASE;
	case MMU_NOTIFY_MIGRATE:
		return MRN_EV_MIGRATE;
#if MRN_HAVE_NOTIFY_EXCLUSIVE
	case MMU_NOTIFY_EXCLUSIVE:
		return MRN_EV_EXCLUSIVE;
#endif
	/*
	 * Protection changes keep the same pages mapped: mprotect and NUMA
	 * hinting (PROTECTION_VMA), fork's write-protect of the parent and
	 * page cleaning (PROTECTION_PAGE), clear_refs (SOFT_DIRTY). A page
	 * replacement that follows them (a COW break, a NUMA migration) is
	 * announced as its own CLEAR event.
	 */
	case MMU_NOTIFY_PROTECTION_VMA:
		*invalidates = false;
		return MRN_EV_PROTECTION_VMA;
	case MMU_NOTIFY_PROTECTION_PAGE:
		*invalidates = false;
		return MRN_EV_PROTECTION_PAGE;
	case MMU_NOTIFY_SOFT_DIRTY:
		*invalidates = false;
		return MRN_EV_SOFT_DIRTY;
	}
	/* A reason this module does not know: be safe, invalidate. */
	return MRN_EV_OTHER;
}

/**
 * mrn_invalidate - the notifier callback
 * @mni: the registration's interval notifier
 * @range: what changes, and why
 * @cur_seq: the sequence number to publish for mmu_interval_read_retry()
 *
 * It runs in the context of whoever changes the mapping (the process
 * itself, reclaim, the OOM reaper in non-blocking mode), so it only takes
 * the xarray spinlock, never sleeps and never fails. An event that can
 * replace pages marks the registration dirty (once) and bumps the
 * generation, which is published after the mark.
 *
 * Return: always true (the invalidation is never refused).
 */
static bool mrn_invalidate(struct mmu_interval_notifier *mni,
			   const struct mmu_notifier_range *range,
			   unsigned long cur_seq)
{
	struct mrn_reg *reg = container_of(mni, struct mrn_reg, notifier);
	struct mrn_ctx *ctx = reg->ctx;
	bool invalidates, became_dirty = false;
	unsigned int slot;

	slot = mrn_event_slot(range->event, &invalidates);

	xa_lock(&ctx->regs);
	/* Keeps mmu_interval_read_begin() on this notifier well defined. */
	mmu_interval_set_seq(mni, cur_seq);
	ctx->callbacks[slot]++;
	if (!invalidates) {
		ctx->ignored++;
	} else if (reg->state & MRN_REG_DIRTY) {
		ctx->already_dirty++;
	} else {
		/* Setting a mark never allocates: the entry exists. */
		reg->state |= MRN_REG_DIRTY;
		__xa_set_mark(&ctx->regs, reg->id, MRN_MARK_DIRTY);
		ctx->nr_dirty++;
		ctx->invalidated++;
		ctx->generation++;
		/* Publish after the mark: whoever sees it and drains finds it. */
		smp_store_release(&ctx->status->generation, ctx->generation);
		became_dirty = true;
	}
	xa_unlock(&ctx->regs);

	this_cpu_inc(mrn_pcpu_stats.callbacks[slot]);
	if (became_dirty) {
		this_cpu_inc(mrn_pcpu_stats.invalidated);
		/* Takes only the wait queue's spinlock: fine here. */
		wake_up_interruptible_poll(&ctx->waiters, EPOLLIN | EPOLLRDNORM);
	}
	return true;
}

static const struct mmu_interval_notifier_ops mrn_notifier_ops = {
	.invalidate = mrn_invalidate,
};

static void mrn_free_reg(struct mrn_reg *reg)
{
	kmem_cache_free(mrn_reg_cache, reg);
	atomic_long_dec(&mrn_nr_regs);
}

/**
 * mrn_unlink - drop a registration from its context's id index
 * @ctx: the context; its mutex must be held
 * @reg: the registration, whose notifier is already removed (so no
 *       callback can mark it again)
 *
 * Erasing it from the xarray also clears its dirty mark.
 *
 * Return: whether it was dirty (reported, or to be reported, by DRAIN).
 */
static bool mrn_unlink(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	bool dirty;

	lockdep_assert_held(&ctx->mutex);
	xa_lock(&ctx->regs);
	__xa_erase(&ctx->regs, reg->id);
	dirty = reg->state & MRN_REG_DIRTY;
	if (dirty)
		ctx->nr_dirty--;
	ctx->nr_regs--;
	xa_unlock(&ctx->regs);
	return dirty;
}

/**
 * mrn_open - make a context bound to the opener's address space
 * @inode: the misc device's inode
 * @file: the new file; it gets the context as its private data
 *
 * The context holds mm_count (not mm_users), so it never keeps the address
 * space alive, and its status page is allocated here and mapped by mmap.
 *
 * Return: 0, -EINVAL for a caller without an mm (a kernel thread), -ENOMEM.
 */
static int mrn_open(struct inode *inode, struct file *file)
{
	struct mrn_ctx *ctx;

	/* A context watches the opener's own address space, nothing else. */
	if (!current->mm)
		return -EINVAL;

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL_ACCOUNT);
	if (!ctx)
		return -ENOMEM;
	ctx->status_page = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!ctx->status_page) {
		kfree(ctx);
		return -ENOMEM;
	}
	ctx->status = page_address(ctx->status_page);
	ctx->status->abi_version = MRN_ABI_VERSION;

	mutex_init(&ctx->mutex);
	init_waitqueue_head(&ctx->waiters);
	xa_init_flags(&ctx->regs, XA_FLAGS_ALLOC1 | XA_FLAGS_ACCOUNT);
	ctx->next_id = 1;
	ctx->max_regs = READ_ONCE(mrn_max_registrations);

	/*
	 * mm_count only: the context must not keep the address space alive
	 * after the process exits (the fd may outlive it in another process).
	 */
	mmgrab(current->mm);
	ctx->mm = current->mm;

	file->private_data = ctx;
	atomic_long_inc(&mrn_nr_contexts);
	return stream_open(inode, file);
}

/**
 * mrn_release - free a context when its file's last reference goes
 * @inode: the misc device's inode
 * @file: the file being released
 *
 * This may run in any process (a child that inherited the fd, a receiver
 * of SCM_RIGHTS, or the owner during exit), so it works on ctx->mm only and
 * never on current->mm. Every notifier is removed before anything is freed.
 *
 * Return: 0.
 */
static int mrn_release(struct inode *inode, struct file *file)
{
	struct mrn_ctx *ctx = file->private_data;
	struct mrn_reg *reg;
	unsigned long id;

	/*
	 * Removing a notifier waits for its running callbacks; afterwards
	 * nothing refers to the registration. The interval tree stays valid
	 * while we hold mm_count, even after the mm's exit_mmap().
	 */
	xa_for_each(&ctx->regs, id, reg) {
		mmu_interval_notifier_remove(&reg->notifier);
		mrn_free_reg(reg);
		cond_resched();
	}
	xa_destroy(&ctx->regs);

	mmdrop(ctx->mm);
	__free_page(ctx->status_page);
	mutex_destroy(&ctx->mutex);
	kfree(ctx);
	atomic_long_dec(&mrn_nr_contexts);
	return 0;
}

/**
 * mrn_mmap - map the status page read-only into its owner
 * @file: a context's file
 * @vma: one page at offset 0, shared, neither writable nor executable
 *
 * The mapping can never be made writable (VM_MAYWRITE is cleared) and is
 * not inherited by fork (VM_DONTCOPY).
 *
 * Return: 0; -EIO from another process than the owner; -EINVAL for another
 * size, offset or sharing; -EPERM for a writable or executable mapping.
 */
static int mrn_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct mrn_ctx *ctx = file->private_data;

	if (current->mm != ctx->mm)
		return -EIO;
	if (vma->vm_pgoff != 0 || vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	/* MAP_SHARED only: a private copy of a counter is meaningless. */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;

	/*
	 * Clearing VM_MAYWRITE makes mprotect(PROT_WRITE) fail with EACCES,
	 * and FOLL_FORCE writes fail too. VM_DONTCOPY: a child has its own mm
	 * and no business with this counter. remap_pfn_range() adds VM_IO and
	 * VM_PFNMAP, so get_user_pages() and madvise(MADV_DOFORK) refuse it.
	 */
	mrn_vm_flags_mod(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP,
			 VM_MAYWRITE | VM_MAYEXEC);
	return remap_pfn_range(vma, vma->vm_start,
			       page_to_pfn(ctx->status_page), PAGE_SIZE,
			       vma->vm_page_prot);
}

/* The first two fields of every ioctl argument (see the uapi header). */
struct mrn_arg_header {
	__u32 size;
	__u32 flags;
};

/**
 * mrn_get_arg - copy in an extensible ioctl argument and check its header
 * @karg: the kernel's copy, @ksize bytes, beginning with struct
 *        mrn_arg_header
 * @ksize: sizeof the argument as this module knows it
 * @min_size: the size of its first version
 * @uarg: the user's copy
 * @usize: the size the user passed
 *
 * Return: 0; -EINVAL for a size below the first version or a flag (none
 * is defined); -E2BIG when a larger argument has a non-zero tail; -EFAULT.
 */
static int mrn_get_arg(void *karg, size_t ksize, size_t min_size,
		       const void __user *uarg, u32 usize)
{
	const struct mrn_arg_header *hdr = karg;
	int ret;

	if (usize < min_size)
		return -EINVAL;
	ret = copy_struct_from_user(karg, ksize, uarg, usize);
	if (ret)
		return ret;
	return hdr->flags ? -EINVAL : 0;
}

/**
 * mrn_ioctl_register - watch a range of the owner's address space
 * @ctx: the context (its owner is current)
 * @uarg: struct mrn_register; id is written back
 * @usize: the size user space passed
 *
 * Waits for invalidations already running over the range before it
 * returns, so that pages pinned afterwards are the ones mapped from then on.
 *
 * Return: 0; -EINVAL (bad size, flags or a zero length); -EOVERFLOW;
 * -EFAULT (a range beyond the user address space, or @uarg); -ENOSPC (the
 * cap is reached); -ENOMEM; -EINTR (killed while waiting for the mutex).
 */
static long mrn_ioctl_register(struct mrn_ctx *ctx,
			       struct mrn_register __user *uarg, u32 usize)
{
	struct mrn_register arg;
	struct mrn_reg *reg;
	u64 end;
	u32 id;
	int ret;

	ret = mrn_get_arg(&arg, sizeof(arg), MRN_REGISTER_SIZE_VER1, uarg,
			  usize);
	if (ret)
		return ret;
	if (!arg.length)
		return -EINVAL;
	if (check_add_overflow(arg.addr, arg.length, &end))
		return -EOVERFLOW;
	/* current->mm == ctx->mm here, so TASK_SIZE is the owner's limit. */
	if (end > TASK_SIZE)
		return -EFAULT;

	reg = kmem_cache_alloc(mrn_reg_cache, GFP_KERNEL);
	if (!reg)
		return -ENOMEM;
	reg->ctx = ctx;
	reg->cookie = arg.cookie;
	reg->state = 0;
	atomic_long_inc(&mrn_nr_regs);

	ret = mutex_lock_killable(&ctx->mutex);
	if (ret)
		goto out_free;
	if (ctx->nr_regs >= ctx->max_regs) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	/* Cyclic: an id is not handed out again until the u32 space wraps. */
	ret = xa_alloc_cyclic(&ctx->regs, &id, reg, XA_LIMIT(1, U32_MAX),
			      &ctx->next_id, GFP_KERNEL_ACCOUNT);
	if (ret < 0)
		goto out_unlock;
	reg->id = id;
	/*
	 * Hand out the id before the notifier exists: afterwards the only
	 * possible failure would be EFAULT after the registration took
	 * effect.
	 */
	if (put_user((u64)id, &uarg->id)) {
		ret = -EFAULT;
		goto out_erase;
	}
	ret = mmu_interval_notifier_insert(&reg->notifier, ctx->mm, arg.addr,
					   arg.length, &mrn_notifier_ops);
	if (ret)
		goto out_erase;
	xa_lock(&ctx->regs);
	ctx->nr_regs++;
	xa_unlock(&ctx->regs);

	/*
	 * An invalidation already running when the notifier went in did not
	 * call us, and its pages may not be gone yet. Wait for it to finish:
	 * a page user space pins after REGISTER returns is then the page that
	 * is mapped from now on, and any later change calls mrn_invalidate().
	 * This closes the register/unmap/pin race. Under the mutex so that a
	 * guessed id cannot free the registration meanwhile.
	 */
	mmu_interval_read_begin(&reg->notifier);
	mutex_unlock(&ctx->mutex);
	return 0;

out_erase:
	xa_erase(&ctx->regs, id);
out_unlock:
	mutex_unlock(&ctx->mutex);
out_free:
	mrn_free_reg(reg);
	return ret;
}

/**
 * mrn_ioctl_unregister - stop watching a registration
 * @ctx: the context
 * @uarg: struct mrn_unregister
 * @usize: the size user space passed
 *
 * Return: 0; MRN_UNREGISTER_WAS_DIRTY when it had been invalidated and not
 * yet drained (it will not be reported by DRAIN); -ENOENT for an unknown
 * id; -EINVAL for a bad size or flags; -EINTR.
 */
static long mrn_ioctl_unregister(struct mrn_ctx *ctx,
				 struct mrn_unregister __user *uarg, u32 usize)
{
	struct mrn_unregister arg;
	struct mrn_reg *reg;
	bool dirty;
	int ret;

	ret = mrn_get_arg(&arg, sizeof(arg), MRN_UNREGISTER_SIZE_VER1, uarg,
			  usize);
	if (ret)
		return ret;
	if (!arg.id || arg.id > U32_MAX)
		return -ENOENT;

	ret = mutex_lock_killable(&ctx->mutex);
	if (ret)
		return ret;
	reg = xa_load(&ctx->regs, arg.id);
	if (!reg) {
		mutex_unlock(&ctx->mutex);
		return -ENOENT;
	}
	/* Notifier first: it waits for callbacks that are still running. */
	mmu_interval_notifier_remove(&reg->notifier);
	dirty = mrn_unlink(ctx, reg);
	if (dirty) {
		xa_lock(&ctx->regs);
		ctx->unregistered_dirty++;
		xa_unlock(&ctx->regs);
	}
	mutex_unlock(&ctx->mutex);
	mrn_free_reg(reg);
	/*
	 * A dirty registration leaves through here, not through DRAIN; the
	 * positive return tells user space it had been invalidated.
	 */
	return dirty ? MRN_UNREGISTER_WAS_DIRTY : 0;
}

/* Forget a DRAIN batch that could not be reported. */
static void mrn_clear_batch(struct mrn_ctx *ctx)
{
	struct mrn_reg *reg;
	unsigned long index;

	lockdep_assert_held(&ctx->mutex);
	xa_for_each_marked(&ctx->regs, index, reg, MRN_MARK_BATCH)
		xa_clear_mark(&ctx->regs, index, MRN_MARK_BATCH);
}

/**
 * mrn_ioctl_drain - report and release invalidated registrations
 * @ctx: the context
 * @uarg: struct mrn_drain; count, out_flags and generation are written back
 * @usize: the size user space passed
 *
 * Copies out up to capacity entries in id order, then releases them; an
 * EFAULT on the way releases nothing. MRN_DRAIN_MORE says more are left.
 *
 * Return: 0; -EINVAL for a bad size, flags or entry size; -EFAULT; -EINTR.
 */
static long mrn_ioctl_drain(struct mrn_ctx *ctx, struct mrn_drain __user *uarg,
			    u32 usize)
{
	struct mrn_dirty_entry ent;
	struct mrn_drain arg;
	struct mrn_reg *reg;
	unsigned long index;
	char __user *dst;
	u32 count = 0, out_flags = 0;
	u64 generation;
	int ret;

	BUILD_BUG_ON(sizeof(ent) != MRN_DIRTY_ENTRY_SIZE_VER1);
	ret = mrn_get_arg(&arg, sizeof(arg), MRN_DRAIN_SIZE_VER1, uarg, usize);
	if (ret)
		return ret;
	if (arg.entry_size < MRN_DIRTY_ENTRY_SIZE_VER1 ||
	    arg.entry_size > PAGE_SIZE || arg.entry_size % sizeof(u64))
		return -EINVAL;
	dst = u64_to_user_ptr(arg.entries);

	ret = mutex_lock_killable(&ctx->mutex);
	if (ret)
		return ret;

	/*
	 * The generation is read before the walk. A registration marked
	 * before this point is found below (or reported by MORE); one marked
	 * later moves the generation past the value returned, so user space
	 * drains again. Marks only appear while we hold the mutex.
	 */
	xa_lock(&ctx->regs);
	generation = ctx->generation;
	xa_unlock(&ctx->regs);

	/*
	 * Copy out first, commit afterwards: until every byte has reached
	 * user space nothing is released, so EFAULT loses nothing.
	 */
	xa_for_each_marked(&ctx->regs, index, reg, MRN_MARK_DIRTY) {
		if (count == arg.capacity) {
			out_flags |= MRN_DRAIN_MORE;
			break;
		}
		ent.cookie = reg->cookie;
		ent.id = reg->id;
		ent.addr = reg->notifier.interval_tree.start;
		ent.length = reg->notifier.interval_tree.last -
			     reg->notifier.interval_tree.start + 1;
		if (copy_to_user(dst, &ent, sizeof(ent)) ||
		    (arg.entry_size > sizeof(ent) &&
		     clear_user(dst + sizeof(ent),
				arg.entry_size - sizeof(ent)))) {
			ret = -EFAULT;
			goto out_fault;
		}
		xa_set_mark(&ctx->regs, index, MRN_MARK_BATCH);
		dst += arg.entry_size;
		count++;
		cond_resched();
	}
	if (put_user(count, &uarg->count) ||
	    put_user(out_flags, &uarg->out_flags) ||
	    put_user(generation, &uarg->generation)) {
		ret = -EFAULT;
		goto out_fault;
	}

	/* Commit: the batch is reported, release it (may sleep). */
	xa_for_each_marked(&ctx->regs, index, reg, MRN_MARK_BATCH) {
		mmu_interval_notifier_remove(&reg->notifier);
		mrn_unlink(ctx, reg);
		mrn_free_reg(reg);
	}
	xa_lock(&ctx->regs);
	ctx->drained += count;
	xa_unlock(&ctx->regs);
	mutex_unlock(&ctx->mutex);
	return 0;

out_fault:
	/* The dirty marks are untouched: the next DRAIN sees everything. */
	mrn_clear_batch(ctx);
	mutex_unlock(&ctx->mutex);
	return ret;
}

/**
 * mrn_ioctl_query - the context's limits and counters
 * @ctx: the context
 * @uarg: struct mrn_query, filled in up to the size user space passed
 * @usize: the size user space passed
 *
 * Return: 0; -EINVAL for a bad size or flags; -E2BIG; -EFAULT.
 */
static long mrn_ioctl_query(struct mrn_ctx *ctx, struct mrn_query __user *uarg,
			    u32 usize)
{
	struct mrn_query q;
	int ret;

	ret = mrn_get_arg(&q, sizeof(q), MRN_QUERY_SIZE_VER1, uarg, usize);
	if (ret)
		return ret;

	memset(&q, 0, sizeof(q));
	q.size = min_t(u32, usize, sizeof(q));
	q.abi_version = MRN_ABI_VERSION;
	q.reg_bytes = kmem_cache_size(mrn_reg_cache);
	q.max_registrations = ctx->max_regs;
	xa_lock(&ctx->regs);
	q.registrations = ctx->nr_regs;
	q.dirty = ctx->nr_dirty;
	q.generation = ctx->generation;
	q.invalidated = ctx->invalidated;
	q.already_dirty = ctx->already_dirty;
	q.ignored = ctx->ignored;
	q.drained = ctx->drained;
	q.unregistered_dirty = ctx->unregistered_dirty;
	memcpy(q.callbacks, ctx->callbacks, sizeof(q.callbacks));
	xa_unlock(&ctx->regs);

	if (copy_to_user(uarg, &q, q.size))
		return -EFAULT;
	return 0;
}

static long mrn_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct mrn_ctx *ctx = file->private_data;
	void __user *uarg = (void __user *)arg;
	u32 usize;

	/*
	 * Only the address space that opened the context may use it: a forked
	 * child or a process that received the fd gets EIO and changes
	 * nothing (the same rule as KVM's).
	 */
	if (current->mm != ctx->mm)
		return -EIO;
	/* The size bits of cmd are ignored: the struct's size field rules. */
	if (_IOC_TYPE(cmd) != MRN_IOC_MAGIC ||
	    _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE))
		return -ENOTTY;
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(MRN_IOC_REGISTER):
	case _IOC_NR(MRN_IOC_UNREGISTER):
	case _IOC_NR(MRN_IOC_DRAIN):
	case _IOC_NR(MRN_IOC_QUERY):
		break;
	default:
		return -ENOTTY;
	}
	if (get_user(usize, (u32 __user *)uarg))
		return -EFAULT;
	if (usize > PAGE_SIZE)
		return -E2BIG;

	switch (_IOC_NR(cmd)) {
	case _IOC_NR(MRN_IOC_REGISTER):
		return mrn_ioctl_register(ctx, uarg, usize);
	case _IOC_NR(MRN_IOC_UNREGISTER):
		return mrn_ioctl_unregister(ctx, uarg, usize);
	case _IOC_NR(MRN_IOC_DRAIN):
		return mrn_ioctl_drain(ctx, uarg, usize);
	default:
		return mrn_ioctl_query(ctx, uarg, usize);
	}
}

static const char * const mrn_event_names[MRN_EV_OTHER + 1] = {
	[MRN_EV_UNMAP] = "unmap",
	[MRN_EV_CLEAR] = "clear",
	[MRN_EV_PROTECTION_VMA] = "protection_vma",
	[MRN_EV_PROTECTION_PAGE] = "protection_page",
	[MRN_EV_SOFT_DIRTY] = "soft_dirty",
	[MRN_EV_RELEASE] = "release",
	[MRN_EV_MIGRATE] = "migrate",
	[MRN_EV_EXCLUSIVE] = "exclusive",
	[MRN_EV_OTHER] = "other",
};

/*
 * /sys/class/misc/mrnotify/stats (root only: it sums over all processes).
 * Lets a test see what happened to a context whose owner has exited.
 */
static ssize_t stats_show(struct device *dev, struct device_attribute *attr,
			  char *buf)
{
	u64 callbacks[MRN_EV_OTHER + 1] = {};
	u64 invalidated = 0;
	int cpu, i, len;

	for_each_possible_cpu(cpu) {
		const struct mrn_pcpu_stats *s =
			per_cpu_ptr(&mrn_pcpu_stats, cpu);

		for (i = 0; i <= MRN_EV_OTHER; i++)
			callbacks[i] += READ_ONCE(s->callbacks[i]);
		invalidated += READ_ONCE(s->invalidated);
	}
	len = sysfs_emit(buf, "contexts %ld\n",
			 atomic_long_read(&mrn_nr_contexts));
	len += sysfs_emit_at(buf, len, "registrations %ld\n",
			     atomic_long_read(&mrn_nr_regs));
	len += sysfs_emit_at(buf, len, "invalidated %llu\n", invalidated);
	for (i = 0; i <= MRN_EV_OTHER; i++)
		len += sysfs_emit_at(buf, len, "callbacks_%s %llu\n",
				     mrn_event_names[i], callbacks[i]);
	return len;
}
static DEVICE_ATTR_ADMIN_RO(stats);

static struct attribute *mrn_attrs[] = {
	&dev_attr_stats.attr,
	NULL,
};
ATTRIBUTE_GROUPS(mrn);

/**
 * mrn_poll - readable while a registration is dirty and not yet drained
 * @file: a context's file
 * @wait: the poll table
 *
 * For event loops (a progress thread) that want to drain when something
 * changed instead of checking the generation; works from any process that
 * holds the file, like QUERY.
 *
 * Return: EPOLLIN | EPOLLRDNORM while the dirty list is not empty, else 0.
 */
static __poll_t mrn_poll(struct file *file, poll_table *wait)
{
	struct mrn_ctx *ctx = file->private_data;
	bool dirty;

	poll_wait(file, &ctx->waiters, wait);
	xa_lock(&ctx->regs);
	dirty = ctx->nr_dirty != 0;
	xa_unlock(&ctx->regs);
	return dirty ? EPOLLIN | EPOLLRDNORM : 0;
}

static const struct file_operations mrn_fops = {
	.owner = THIS_MODULE,
	.open = mrn_open,
	.release = mrn_release,
	.mmap = mrn_mmap,
	.poll = mrn_poll,
	.unlocked_ioctl = mrn_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	/*
	 * No .llseek: stream_open() clears FMODE_LSEEK, so lseek() fails with
	 * ESPIPE on every kernel. (no_llseek said the same until 6.12
	 * removed it.)
	 */
};

static struct miscdevice mrn_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "mrnotify",
	.fops = &mrn_fops,
	.groups = mrn_groups,
	/* Safe for everyone: a context can only watch its opener. */
	.mode = 0666,
};

static int __init mrn_init(void)
{
	int ret;

	BUILD_BUG_ON(sizeof(struct mrn_register) != MRN_REGISTER_SIZE_VER1);
	BUILD_BUG_ON(sizeof(struct mrn_unregister) != MRN_UNREGISTER_SIZE_VER1);
	BUILD_BUG_ON(sizeof(struct mrn_drain) != MRN_DRAIN_SIZE_VER1);
	BUILD_BUG_ON(sizeof(struct mrn_query) != MRN_QUERY_SIZE_VER1);
	/* mrn_get_arg() reads every argument's header the same way. */
#define MRN_CHECK_HEADER(type)							\
	BUILD_BUG_ON(offsetof(type, size) != offsetof(struct mrn_arg_header, size) || \
		     offsetof(type, flags) != offsetof(struct mrn_arg_header, flags))
	MRN_CHECK_HEADER(struct mrn_register);
	MRN_CHECK_HEADER(struct mrn_unregister);
	MRN_CHECK_HEADER(struct mrn_drain);
	MRN_CHECK_HEADER(struct mrn_query);
#undef MRN_CHECK_HEADER
	BUILD_BUG_ON(sizeof(struct mrn_reg) > 112);

	mrn_reg_cache = KMEM_CACHE(mrn_reg, SLAB_ACCOUNT);
	if (!mrn_reg_cache)
		return -ENOMEM;
	ret = misc_register(&mrn_misc);
	if (ret) {
		kmem_cache_destroy(mrn_reg_cache);
		return ret;
	}
	return 0;
}

static void __exit mrn_exit(void)
{
	/* fops.owner pins the module while any context exists. */
	misc_deregister(&mrn_misc);
	kmem_cache_destroy(mrn_reg_cache);
}

module_init(mrn_init);
module_exit(mrn_exit);

MODULE_DESCRIPTION("Invalidation counter and dirty list for RDMA registration caches");
MODULE_LICENSE("GPL");

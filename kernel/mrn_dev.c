// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/mrnotify: its contexts (one per open file), their status page, ids
 * and ioctls, and the module's parameters. The design and the
 * locking are described in mrn_internal.h.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/build_bug.h>
#include <linux/compat.h>
#include <linux/cred.h>
#include <linux/device.h>
#include <linux/errno.h>
#include <linux/fs.h>
#include <linux/lockdep.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/overflow.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/utsname.h>

#include <linux/mrnotify.h>

#include "mrn_internal.h"
#include "mrn_trace.h"
#include "mrnotify_compat.h"

/* Registrations a context may hold unless the administrator says otherwise. */
#define MRN_DEFAULT_MAX_REGISTRATIONS	(1U << 20)
/* The largest value the caps accept. */
#define MRN_MAX_REGISTRATIONS_LIMIT	(1U << 31)
/* The least max_user_registrations defaults to, whatever the memory. */
#define MRN_MIN_USER_REGISTRATIONS	(1U << 16)
/* Contexts a user may hold open unless the administrator says otherwise. */
#define MRN_DEFAULT_MAX_USER_CONTEXTS	4096
/*
 * An id is a slot of the context's index in the low 32 bits and the slot's
 * generation above it. A freed slot is reused before a new one is taken
 * (the most recently freed first), so the index stays as dense as the live
 * registrations however sparse their ids are; the generation, one more at
 * each reuse, keeps an id from naming a later registration in its slot.
 * A slot whose generation would pass MRN_GEN_MAX is retired instead of
 * reused (it stays in the index as a free entry on no list, 8 bytes), so
 * no id ever names two registrations. A fresh context hands out 1, 2, 3...
 */
#define MRN_SLOT_MAX	U32_MAX
#define MRN_GEN_MAX	(BIT(31) - 1)
/*
 * Test only (debugfs): how far a slot's generation moves at each reuse, so
 * that a test reaches MRN_GEN_MAX in a few reuses instead of 2^31.
 */
u32 mrn_debug_generation_step = 1;
/* Entries one DRAIN takes when its buffer cannot be allocated. */
#define MRN_DRAIN_STACK_BATCH	8
/* Kernel memory of one registration, for the default per-user cap. */
#define MRN_REG_COST	128

static struct kmem_cache *mrn_reg_cache;

static unsigned int mrn_max_registrations = MRN_DEFAULT_MAX_REGISTRATIONS;
/* Set at load time from the memory size when not given (see mrn_init). */
static unsigned int mrn_max_user_registrations;
static unsigned int mrn_max_user_contexts = MRN_DEFAULT_MAX_USER_CONTEXTS;

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
module_param_cb(max_user_registrations, &mrn_param_max_ops,
		&mrn_max_user_registrations, 0644);
MODULE_PARM_DESC(max_user_registrations,
		 "Registrations per user and user namespace across all contexts and processes (default: 1% of RAM at 128 bytes each, at least 65536)");
/*
 * The module ignores changes whose reason says the pages stay (protection
 * changes). That rests on the core mm keeping its word, which 5.10-5.13
 * broke once (mrn_protection_may_migrate()): on a kernel newer than the
 * tested ones, every change invalidates unless the administrator says so.
 */
bool mrn_trust_newer_kernel;
module_param_named(trust_newer_kernel, mrn_trust_newer_kernel, bool, 0444);
MODULE_PARM_DESC(trust_newer_kernel,
		 "On a kernel newer than the newest tested one, trust the kernel's reason for a change and ignore protection changes (default: no, every change invalidates)");
module_param_cb(max_user_contexts, &mrn_param_max_ops,
		&mrn_max_user_contexts, 0644);
MODULE_PARM_DESC(max_user_contexts,
		 "Open contexts per user and user namespace across all processes (default 4096)");

/* Validity words a page holds, and the pages that hold them all. */
#define MRN_VALID_PER_PAGE	(PAGE_SIZE / sizeof(u32))
#define MRN_VALID_PAGES		DIV_ROUND_UP(MRN_VALIDITY_SLOTS, MRN_VALID_PER_PAGE)

/*
 * The page of validity words with number @index, allocated (zeroed:
 * every word invalid, charged) if @alloc and absent. NULL when absent and
 * not allocated.
 */
static struct page *mrn_valid_page(struct mrn_ctx *ctx, unsigned long index,
				   bool alloc)
{
	struct page *page = xa_load(&ctx->valid_pages, index), *old;

	if (page || !alloc)
		return page;
	page = alloc_page(MRN_GFP_USER | __GFP_ZERO);
	if (!page)
		return NULL;
	old = xa_cmpxchg(&ctx->valid_pages, index, NULL, page, MRN_GFP_USER);
	if (!old)
		return page;
	__free_page(page);
	/* Another fault or REGISTER put it there first, or no memory. */
	return xa_is_err(old) ? NULL : old;
}

void mrn_valid_set(struct mrn_ctx *ctx, u32 slot, u32 word)
{
	struct page *page;
	u32 *words;

	if (slot >= MRN_VALIDITY_SLOTS)
		return;
	/* Absent: no word was ever valid there, and a fault maps zeros. */
	page = mrn_valid_page(ctx, slot / MRN_VALID_PER_PAGE, false);
	if (!page)
		return;
	words = page_address(page);
	WRITE_ONCE(words[slot % MRN_VALID_PER_PAGE], word);
}

/* Free a registration that is in no index, and uncharge its user. */
static void mrn_free_reg(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	kmem_cache_free(mrn_reg_cache, reg);
	mrn_uncharge(ctx->user, MRN_UC_REGS);
	atomic_long_dec(&mrn_nr_regs);
}

static u32 mrn_generation_step(void)
{
	return max_t(u32, READ_ONCE(mrn_debug_generation_step), 1);
}

static u64 mrn_make_id(u32 gen, u32 slot)
{
	return (u64)gen << 32 | slot;
}

/* A free slot's entry: its last generation and the next free slot. */
static void *mrn_free_entry(u32 gen, u32 next)
{
	return xa_mk_value((unsigned long)gen << 32 | next);
}

/**
 * mrn_slot_take - put a registration in the index under a fresh id
 * @ctx: the context; its mutex must be held
 * @reg: the registration; reg->id is set
 *
 * Return: 0, -ENOSPC when no slot is left, -ENOMEM.
 */
static int mrn_slot_take(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	unsigned long free;
	u32 slot = ctx->free_slot;
	int ret;

	lockdep_assert_held(&ctx->mutex);
	if (slot) {
		/* A reused slot exists: storing into it never allocates. */
		xa_lock(&ctx->regs);
		free = xa_to_value(xa_load(&ctx->regs, slot));
		ctx->free_slot = (u32)free;
		reg->id = mrn_make_id(min_t(u64, (free >> 32) + mrn_generation_step(),
					    MRN_GEN_MAX), slot);
		__xa_store(&ctx->regs, slot, reg, 0);
		xa_unlock(&ctx->regs);
		return 0;
	}
	if (ctx->top_slot == MRN_SLOT_MAX)
		return -ENOSPC;
	slot = ctx->top_slot + 1;
	reg->id = mrn_make_id(0, slot);
	ret = xa_insert(&ctx->regs, slot, reg, MRN_GFP_USER);
	if (ret)
		return ret == -EBUSY ? -EIO : ret;
	ctx->top_slot = slot;
	return 0;
}

/**
 * mrn_lookup - the live registration an id names
 * @ctx: the context; its mutex must be held
 * @id: from user space
 *
 * Return: the registration; ERR_PTR(-ESTALE) for an id this context handed
 * out that is gone; ERR_PTR(-EINVAL) for one it never handed out.
 */
static struct mrn_reg *mrn_lookup(struct mrn_ctx *ctx, u64 id)
{
	u32 slot = (u32)id, gen = id >> 32, last;
	struct mrn_reg *reg;
	void *entry;

	lockdep_assert_held(&ctx->mutex);
	if (!slot || slot > ctx->top_slot || gen > MRN_GEN_MAX)
		return ERR_PTR(-EINVAL);
	entry = xa_load(&ctx->regs, slot);
	if (xa_is_value(entry)) {
		last = xa_to_value(entry) >> 32;
		return ERR_PTR(gen <= last ? -ESTALE : -EINVAL);
	}
	reg = entry;
	last = reg->id >> 32;
	if (gen == last)
		return reg;
	return ERR_PTR(gen < last ? -ESTALE : -EINVAL);
}

/**
 * mrn_unlink - drop a registration from its context's index
 * @ctx: the context; its mutex must be held
 * @reg: the registration, already unwatched (no notifier can reach it)
 *
 * Its slot goes to the head of the free slots, with its generation, or is
 * retired when its next generation would pass MRN_GEN_MAX; the slot's
 * marks are cleared.
 *
 * Return: whether it was dirty (reported, or to be reported, by DRAIN).
 */
static bool mrn_unlink(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	u32 slot = (u32)reg->id, gen = reg->id >> 32;
	bool retire = (u64)gen + mrn_generation_step() > MRN_GEN_MAX;
	bool dirty;

	lockdep_assert_held(&ctx->mutex);
	xa_lock(&ctx->regs);
	__xa_clear_mark(&ctx->regs, slot, MRN_MARK_DIRTY);
	__xa_clear_mark(&ctx->regs, slot, MRN_MARK_BATCH);
	/*
	 * Replacing an entry never allocates. A retired slot says its ids
	 * are all stale (MRN_GEN_MAX) and is on no free list.
	 */
	__xa_store(&ctx->regs, slot,
		   retire ? mrn_free_entry(MRN_GEN_MAX, 0) :
			    mrn_free_entry(gen, ctx->free_slot), 0);
	if (!retire)
		ctx->free_slot = slot;
	mrn_valid_set(ctx, slot, 0);
	dirty = reg->dirty;
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
 * The opener's user (effective uid, in its user namespace and, as owners,
 * in the ones above) is charged for the context and, later, for every
 * registration, whoever holds the file afterwards.
 *
 * Return: 0, -EINVAL for a caller without an mm (a kernel thread),
 * -EOPNOTSUPP for a 32-bit caller, -EMFILE when the user holds
 * max_user_contexts contexts or the process MRN_MM_MAX_CONTEXTS, -ENOMEM.
 * A signal while the mm's notifier is registered restarts the call.
 */
static int mrn_open(struct inode *inode, struct file *file)
{
	struct mrn_ctx *ctx;
	int ret = -ENOMEM;

	/* A context watches the opener's own address space, nothing else. */
	if (!current->mm)
		return -EINVAL;
	/*
	 * 64-bit callers only: a 32-bit process would read the 64-bit
	 * generation with two loads, which can tear, and no RDMA stack
	 * serves 32-bit processes. (No compat_ioctl either, so a 32-bit
	 * system call on a context opened by a 64-bit one is ENOTTY.)
	 */
	if (in_compat_syscall())
		return -EOPNOTSUPP;

	ctx = kzalloc(sizeof(*ctx), MRN_GFP_USER);
	if (!ctx)
		return -ENOMEM;
	ctx->user = mrn_user_get(current_user_ns(), current_euid());
	if (!ctx->user)
		goto out_free;
	if (!mrn_charge(ctx->user, MRN_UC_CONTEXTS,
			READ_ONCE(mrn_max_user_contexts))) {
		ret = -EMFILE;
		goto out_put;
	}
	ctx->status_page = alloc_page(MRN_GFP_USER | __GFP_ZERO);
	if (!ctx->status_page)
		goto out_uncharge;
	ctx->status = page_address(ctx->status_page);
	ctx->status->abi_version = MRN_ABI_VERSION;
	ctx->status->features = MRN_FEATURE_VALIDITY;
	mutex_init(&ctx->mutex);
	mutex_init(&ctx->drain_mutex);
	init_waitqueue_head(&ctx->waiters);
	xa_init_flags(&ctx->regs, XA_FLAGS_ACCOUNT);
	xa_init_flags(&ctx->valid_pages, XA_FLAGS_ACCOUNT);
	ctx->max_regs = READ_ONCE(mrn_max_registrations);
	/*
	 * The mm's notifier, shared with its other contexts; once attached,
	 * a deferral publishes to this context (so it is set up first).
	 */
	ctx->mn = mrn_mm_get(current->mm);
	if (IS_ERR(ctx->mn)) {
		ret = PTR_ERR(ctx->mn);
		goto out_free_page;
	}
	ret = mrn_mm_attach(ctx->mn, ctx);
	if (ret) {
		mrn_mm_put(ctx->mn);
		goto out_free_page;
	}

	/*
	 * mm_count only: the context must not keep the address space alive
	 * after the process exits (the fd may outlive it in another process).
	 */
	mmgrab(current->mm);
	ctx->mm = current->mm;

	file->private_data = ctx;
	atomic_long_inc(&mrn_nr_contexts);
	return stream_open(inode, file);

out_free_page:
	__free_page(ctx->status_page);
out_uncharge:
	mrn_uncharge(ctx->user, MRN_UC_CONTEXTS);
out_put:
	mrn_user_put(ctx->user);
out_free:
	kfree(ctx);
	return ret;
}

/**
 * mrn_release - free a context when its file's last reference goes
 * @inode: the misc device's inode
 * @file: the file being released
 *
 * This may run in any process (a child that inherited the fd, a receiver
 * of SCM_RIGHTS, or the owner during exit), so it works on ctx->mm only and
 * never on current->mm. Every registration leaves the mm's tree before
 * anything is freed.
 *
 * Return: 0.
 */
static int mrn_release(struct inode *inode, struct file *file)
{
	struct mrn_ctx *ctx = file->private_data;
	unsigned long slot;
	void *entry;

	/*
	 * Out of the tree, a registration is out of every notifier's reach;
	 * the mm's notifier outlives its last context by an SRCU grace
	 * period (mmu_notifier_put), so a change that starts later finds
	 * none of ours. Both stay valid while we hold mm_count, even after
	 * the mm's exit_mmap(). The mutex is uncontended (this is the last
	 * reference): it is taken because mrn_unwatch() asks for it.
	 */
	mutex_lock(&ctx->mutex);
	xa_for_each(&ctx->regs, slot, entry) {
		if (xa_is_value(entry))
			continue;
		mrn_unwatch(ctx, entry);
		mrn_free_reg(ctx, entry);
		cond_resched();
	}
	mutex_unlock(&ctx->mutex);
	/*
	 * A change may still be finishing a mark of one of ours (drained
	 * meanwhile, so not in the index any more), or a deferral: both read
	 * the context under the tree's lock, which detaching takes.
	 */
	mrn_mm_detach(ctx->mn, ctx);
	xa_destroy(&ctx->regs);
	xa_for_each(&ctx->valid_pages, slot, entry)
		__free_page(entry);
	xa_destroy(&ctx->valid_pages);
	mrn_mm_put(ctx->mn);

	mmdrop(ctx->mm);
	__free_page(ctx->status_page);
	mrn_uncharge(ctx->user, MRN_UC_CONTEXTS);
	mrn_user_put(ctx->user);
	mutex_destroy(&ctx->drain_mutex);
	mutex_destroy(&ctx->mutex);
	kfree(ctx);
	atomic_long_dec(&mrn_nr_contexts);
	return 0;
}

/* A page of validity words, on first touch (see mrn_mmap()). */
static vm_fault_t mrn_valid_fault(struct vm_fault *vmf)
{
	struct mrn_ctx *ctx = vmf->vma->vm_file->private_data;
	struct page *page;

	page = mrn_valid_page(ctx, vmf->pgoff - 1, true);
	if (!page)
		return VM_FAULT_OOM;
	return vmf_insert_pfn(vmf->vma, vmf->address, page_to_pfn(page));
}

static const struct vm_operations_struct mrn_valid_vm_ops = {
	.fault = mrn_valid_fault,
};

/**
 * mrn_mmap - map the status page or the validity words read-only into
 * their owner
 * @file: a context's file
 * @vma: shared, neither writable nor executable; at offset 0, the status
 *	page (one page); from offset 1, pages of validity words (up to
 *	MRN_VALIDITY_SLOTS of them), each allocated when first touched
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
	unsigned long pages = vma_pages(vma);

	if (current->mm != ctx->mm)
		return -EIO;
	if (vma->vm_pgoff == 0 ? pages != 1 :
	    vma->vm_pgoff > MRN_VALID_PAGES ||
	    pages > MRN_VALID_PAGES + 1 - vma->vm_pgoff)
		return -EINVAL;
	/* MAP_SHARED only: a private copy of a counter is meaningless. */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;

	/*
	 * Clearing VM_MAYWRITE makes mprotect(PROT_WRITE) fail with EACCES,
	 * and FOLL_FORCE writes fail too. VM_DONTCOPY: a child has its own mm
	 * and no business with this counter. remap_pfn_range() and the fault
	 * below map by pfn (VM_IO and VM_PFNMAP), so get_user_pages() and
	 * madvise(MADV_DOFORK) refuse it. Not vm_insert_page(): with it, a
	 * context opened inside a memory cgroup could not be set up on 5.10
	 * (the memcg stress test), most likely because 5.10 marks a charged
	 * page with a page type (PageKmemcg), which vm_insert_page() refuses.
	 */
	mrn_vm_flags_mod(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP |
			 VM_IO | VM_PFNMAP, VM_MAYWRITE | VM_MAYEXEC);
	if (vma->vm_pgoff) {
		vma->vm_ops = &mrn_valid_vm_ops;
		return 0;
	}
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
 * @uarg: the user's copy
 * @usize: the size encoded in the command (already checked by mrn_ioctl)
 *
 * Return: 0; -EINVAL when the size field is not the command's size or a
 * flag is set (none is defined); -E2BIG when a larger argument has a
 * non-zero tail; -EFAULT.
 */
static int mrn_get_arg(void *karg, size_t ksize, const void __user *uarg,
		       u32 usize)
{
	const struct mrn_arg_header *hdr = karg;
	int ret;

	ret = copy_struct_from_user(karg, ksize, uarg, usize);
	if (ret)
		return ret;
	if (hdr->size != usize || hdr->flags)
		return -EINVAL;
	return 0;
}

static int mrn_unregister_id(struct mrn_ctx *ctx, u64 id);

/**
 * mrn_ioctl_register - watch a range of the owner's address space
 * @ctx: the context (its owner is current)
 * @uarg: struct mrn_register; id is written back
 * @usize: the size of the argument
 *
 * Never waits for the address space: a change in flight over the range
 * makes the registration dirty at once (see mrn_watch()), so that pages
 * pinned after REGISTER returns are either the ones mapped from then on or
 * reported by DRAIN. The id is written back after the context's mutex is
 * dropped (no user access under it); if that faults, the registration is
 * undone like an UNREGISTER (which, for a registration a DRAIN is copying
 * out meanwhile, waits for that DRAIN).
 *
 * Return: 0; -EINVAL (bad size, flags or a zero length); -EOVERFLOW;
 * -EFAULT (a range beyond the user address space, or @uarg); -ENOSPC (the
 * context's or the user's cap is reached); -ENOMEM; -EINTR (killed while
 * waiting for the mutex).
 */
static long mrn_ioctl_register(struct mrn_ctx *ctx,
			       struct mrn_register __user *uarg, u32 usize)
{
	struct mrn_register arg;
	struct mrn_reg *reg;
	u64 end, id;
	int ret;

	ret = mrn_get_arg(&arg, sizeof(arg), uarg, usize);
	if (ret)
		return ret;
	if (!arg.length)
		return -EINVAL;
	if (check_add_overflow(arg.addr, arg.length, &end))
		return -EOVERFLOW;
	/* current->mm == ctx->mm here, so TASK_SIZE is the owner's limit. */
	if (end > TASK_SIZE)
		return -EFAULT;

	if (!mrn_charge(ctx->user, MRN_UC_REGS,
			READ_ONCE(mrn_max_user_registrations)))
		return -ENOSPC;
	reg = kmem_cache_alloc(mrn_reg_cache, MRN_GFP_USER);
	if (!reg) {
		mrn_uncharge(ctx->user, MRN_UC_REGS);
		return -ENOMEM;
	}
	atomic_long_inc(&mrn_nr_regs);
	RB_CLEAR_NODE(&reg->node.rb);
	reg->node.start = arg.addr;
	reg->node.last = end - 1;
	reg->ctx = ctx;
	reg->cookie = arg.cookie;
	reg->dirty = false;

	ret = mutex_lock_killable(&ctx->mutex);
	if (ret)
		goto out_free;
	if (ctx->nr_regs >= ctx->max_regs) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	ret = mrn_slot_take(ctx, reg);
	if (ret)
		goto out_unlock;
	/*
	 * Without its page the slot's word stays invalid (zero), which costs
	 * a hit only a DRAIN, never a stale use: not worth failing for.
	 */
	if ((u32)reg->id < MRN_VALIDITY_SLOTS)
		mrn_valid_page(ctx, (u32)reg->id / MRN_VALID_PER_PAGE, true);
	xa_lock(&ctx->regs);
	ctx->nr_regs++;
	xa_unlock(&ctx->regs);
	mrn_watch(ctx, reg);
	id = reg->id;
	mutex_unlock(&ctx->mutex);
	trace_mrn_register(ctx, id, arg.addr, end - 1, arg.cookie);

	if (put_user(id, &uarg->id)) {
		/* Nobody learnt the id; unless a guess freed it, undo. */
		mrn_unregister_id(ctx, id);
		return -EFAULT;
	}
	return 0;

out_unlock:
	mutex_unlock(&ctx->mutex);
out_free:
	mrn_free_reg(ctx, reg);
	return ret;
}

/* Wait until the DRAIN that owns an in-flight batch has committed it. */
static int mrn_wait_for_drain(struct mrn_ctx *ctx)
{
	int ret;

	ret = mutex_lock_killable(&ctx->drain_mutex);
	if (ret)
		return ret;
	mutex_unlock(&ctx->drain_mutex);
	return 0;
}

/*
 * UNREGISTER's work: 0, MRN_UNREGISTER_WAS_DIRTY, -ESTALE, -EINVAL or
 * -EINTR (see mrn_ioctl_unregister()).
 */
static int mrn_unregister_id(struct mrn_ctx *ctx, u64 id)
{
	struct mrn_reg *reg;
	bool dirty;
	int ret;

	for (;;) {
		ret = mutex_lock_killable(&ctx->mutex);
		if (ret)
			return ret;
		reg = mrn_lookup(ctx, id);
		if (IS_ERR(reg)) {
			mutex_unlock(&ctx->mutex);
			return PTR_ERR(reg);
		}
		if (!xa_get_mark(&ctx->regs, (u32)id, MRN_MARK_BATCH))
			break;
		mutex_unlock(&ctx->mutex);
		ret = mrn_wait_for_drain(ctx);
		if (ret)
			return ret;
	}
	mrn_unwatch(ctx, reg);
	dirty = mrn_unlink(ctx, reg);
	mutex_unlock(&ctx->mutex);
	mrn_free_reg(ctx, reg);
	trace_mrn_unregister(ctx, id, dirty);
	if (dirty)
		mrn_count(MRN_CNT_UNREGISTERED_DIRTY);
	/*
	 * A dirty registration leaves through here, not through DRAIN; the
	 * positive return tells user space it had been invalidated.
	 */
	return dirty ? MRN_UNREGISTER_WAS_DIRTY : 0;
}

/**
 * mrn_ioctl_unregister - stop watching a registration
 * @ctx: the context
 * @uarg: struct mrn_unregister
 * @usize: the size of the argument
 *
 * A registration that a concurrent DRAIN is copying out is that DRAIN's:
 * wait until it has been reported (then it is stale) or given back (then
 * it is dirty here). Nothing here waits for the address space.
 *
 * Return: 0; MRN_UNREGISTER_WAS_DIRTY when it had been invalidated and not
 * yet drained (it will not be reported by DRAIN); -ESTALE for an id this
 * context handed out that is gone (unregistered or drained); -EINVAL for
 * id 0, an id never handed out, a bad size or flags; -EINTR.
 */
static long mrn_ioctl_unregister(struct mrn_ctx *ctx,
				 struct mrn_unregister __user *uarg, u32 usize)
{
	struct mrn_unregister arg;
	int ret;

	ret = mrn_get_arg(&arg, sizeof(arg), uarg, usize);
	if (ret)
		return ret;
	return mrn_unregister_id(ctx, arg.id);
}

/**
 * mrn_drain_take - choose a DRAIN batch
 * @ctx: the context; its drain_mutex is held
 * @ents: room for @max entries
 * @max: the batch size
 * @count: set to the number of entries written to @ents
 * @generation: set to the generation before the batch was taken
 *
 * The batch's registrations get the BATCH mark: they stay dirty and in the
 * index until mrn_drain_finish() commits or forgets them.
 *
 * Return: MRN_DRAIN_MORE when more registrations were dirty, 0, or -EINTR.
 */
static int mrn_drain_take(struct mrn_ctx *ctx, struct mrn_dirty_entry *ents,
			  u32 max, u32 *count, u64 *generation)
{
	struct mrn_reg *reg;
	unsigned long index;
	u32 n = 0;
	int ret;

	lockdep_assert_held(&ctx->drain_mutex);
	ret = mutex_lock_killable(&ctx->mutex);
	if (ret)
		return ret;
	/*
	 * The generation is read before the walk, with no deferred range
	 * pending. A registration marked before this point is found below
	 * (or reported by MORE); one marked or deferred later moves the
	 * generation past the value returned, so user space drains again.
	 */
	do {
		mrn_mm_settle(ctx->mn);
	} while (!mrn_mm_settled_generation(ctx, generation));

	ret = 0;
	xa_for_each_marked(&ctx->regs, index, reg, MRN_MARK_DIRTY) {
		if (n == max) {
			ret = MRN_DRAIN_MORE;
			break;
		}
		ents[n].cookie = reg->cookie;
		ents[n].id = reg->id;
		ents[n].addr = reg->node.start;
		ents[n].length = reg->node.last - reg->node.start + 1;
		ents[n].reason = reg->reason;
		ents[n].flags = reg->mark_flags;
		xa_set_mark(&ctx->regs, index, MRN_MARK_BATCH);
		n++;
	}
	mutex_unlock(&ctx->mutex);
	*count = n;
	return ret;
}

/*
 * Release a reported batch, or forget it when it could not be reported;
 * ctx->drain_mutex held (the batch's owner).
 */
static void mrn_drain_finish(struct mrn_ctx *ctx, bool commit)
{
	struct mrn_reg *reg;
	unsigned long index;
	u64 n = 0;

	lockdep_assert_held(&ctx->drain_mutex);
	/*
	 * Not killable: the batch must not stay marked. Nothing here waits
	 * for user space.
	 */
	mutex_lock(&ctx->mutex);
	xa_for_each_marked(&ctx->regs, index, reg, MRN_MARK_BATCH) {
		if (!commit) {
			/* The dirty marks are untouched: nothing is lost. */
			xa_clear_mark(&ctx->regs, index, MRN_MARK_BATCH);
			continue;
		}
		/* Dirty, so out of the tree already; the slot loses its marks. */
		mrn_unlink(ctx, reg);
		mrn_free_reg(ctx, reg);
		n++;
		cond_resched();
	}
	mutex_unlock(&ctx->mutex);
	mrn_count_add(MRN_CNT_DRAINED, n);
}

/*
 * Copy a batch to user space, each entry in a slot of @entry_size bytes:
 * as much of the entry as fits (a slot of 32 bytes, the first layout, has
 * no reason), the rest of a larger slot zeroed.
 */
static int mrn_drain_copy_out(char __user *dst, u32 entry_size,
			      const struct mrn_dirty_entry *ents, u32 count)
{
	const size_t head = min_t(size_t, entry_size, sizeof(*ents));
	u32 i;

	if (entry_size == sizeof(*ents))
		return copy_to_user(dst, ents, count * sizeof(*ents)) ?
			-EFAULT : 0;
	for (i = 0; i < count; i++, dst += entry_size) {
		if (copy_to_user(dst, &ents[i], head) ||
		    (entry_size > head && clear_user(dst + head, entry_size - head)))
			return -EFAULT;
	}
	return 0;
}

/**
 * mrn_ioctl_drain - report and release invalidated registrations
 * @ctx: the context
 * @uarg: struct mrn_drain; count, out_flags and generation are written back
 * @usize: the size of the argument
 *
 * Takes up to min(capacity, MRN_DRAIN_MAX_BATCH) entries in slot order into a
 * kernel buffer under the mutex, copies them out without it (a fault on a
 * userfaultfd-registered buffer stalls only the context's DRAINs and the
 * UNREGISTERs of the same registrations), then releases them; an EFAULT on the way
 * releases nothing. MRN_DRAIN_MORE says more are left.
 *
 * Return: 0; -EINVAL for a bad size, flags or entry size; -EFAULT; -ENOMEM;
 * -EINTR.
 */
static long mrn_ioctl_drain(struct mrn_ctx *ctx, struct mrn_drain __user *uarg,
			    u32 usize)
{
	struct mrn_dirty_entry stack_ents[MRN_DRAIN_STACK_BATCH];
	struct mrn_dirty_entry *ents;
	struct mrn_drain arg;
	u32 max, count;
	u64 generation;
	int ret, more;

	BUILD_BUG_ON(sizeof(*ents) != MRN_DIRTY_ENTRY_SIZE_VER2);
	ret = mrn_get_arg(&arg, sizeof(arg), uarg, usize);
	if (ret)
		return ret;
	if (arg.entry_size < MRN_DIRTY_ENTRY_SIZE_VER1 ||
	    arg.entry_size > PAGE_SIZE || arg.entry_size % sizeof(u64))
		return -EINVAL;

	ret = mutex_lock_killable(&ctx->drain_mutex);
	if (ret)
		return ret;
	/*
	 * After the wait, so that DRAINs queued on the mutex hold no memory,
	 * and charged, as the caller's. A cgroup at its limit must still be
	 * able to drain (that is how it gets memory back): without the
	 * buffer, a batch of MRN_DRAIN_STACK_BATCH on the stack, with MORE.
	 */
	max = min_t(u32, arg.capacity, MRN_DRAIN_MAX_BATCH);
	ents = NULL;
	if (max > MRN_DRAIN_STACK_BATCH)
		ents = kvmalloc_array(max, sizeof(*ents), MRN_GFP_USER);
	if (!ents) {
		ents = stack_ents;
		max = min_t(u32, max, MRN_DRAIN_STACK_BATCH);
	}
	more = mrn_drain_take(ctx, ents, max, &count, &generation);
	if (more < 0) {
		ret = more;
		goto out_unlock;
	}

	/* Copy out first, commit afterwards: EFAULT loses nothing. */
	ret = mrn_drain_copy_out(u64_to_user_ptr(arg.entries), arg.entry_size,
				 ents, count);
	if (!ret && (put_user(count, &uarg->count) ||
		     put_user((u32)more, &uarg->out_flags) ||
		     put_user(generation, &uarg->generation)))
		ret = -EFAULT;
	mrn_drain_finish(ctx, !ret);
	if (!ret)
		trace_mrn_drain(ctx, count, more, generation);

out_unlock:
	mutex_unlock(&ctx->drain_mutex);
	if (ents != stack_ents)
		kvfree(ents);
	return ret;
}

/**
 * mrn_ioctl_query - the context's limits and state
 * @ctx: the context
 * @uarg: struct mrn_query, filled in up to the size user space passed
 * @usize: the size of the argument
 *
 * Return: 0; -EINVAL for a bad size or flags; -E2BIG; -EFAULT.
 */
static long mrn_ioctl_query(struct mrn_ctx *ctx, struct mrn_query __user *uarg,
			    u32 usize)
{
	struct mrn_query q;
	int ret;

	ret = mrn_get_arg(&q, sizeof(q), uarg, usize);
	if (ret)
		return ret;
	/* So that the dirty count includes what callbacks deferred. */
	mrn_mm_settle(ctx->mn);

	memset(&q, 0, sizeof(q));
	q.size = min_t(u32, usize, sizeof(q));
	q.abi_version = MRN_ABI_VERSION;
	q.reg_bytes = kmem_cache_size(mrn_reg_cache);
	q.max_registrations = ctx->max_regs;
	q.max_user_registrations = READ_ONCE(mrn_max_user_registrations);
	q.user_registrations = atomic_long_read(&ctx->user->count[MRN_UC_REGS]);
	xa_lock(&ctx->regs);
	q.registrations = ctx->nr_regs;
	q.dirty = ctx->nr_dirty;
	q.generation = ctx->generation;
	xa_unlock(&ctx->regs);

	if (copy_to_user(uarg, &q, q.size))
		return -EFAULT;
	return 0;
}

/* The first size of each command's argument, by command number. */
static const u32 mrn_min_size[] = {
	[_IOC_NR(MRN_IOC_REGISTER)] = MRN_REGISTER_SIZE_VER1,
	[_IOC_NR(MRN_IOC_UNREGISTER)] = MRN_UNREGISTER_SIZE_VER1,
	[_IOC_NR(MRN_IOC_DRAIN)] = MRN_DRAIN_SIZE_VER1,
	[_IOC_NR(MRN_IOC_QUERY)] = MRN_QUERY_SIZE_VER1,
};

static long mrn_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct mrn_ctx *ctx = file->private_data;
	void __user *uarg = (void __user *)arg;
	u32 nr = _IOC_NR(cmd), usize = _IOC_SIZE(cmd);

	/*
	 * Only the address space that opened the context may use it: a forked
	 * child or a process that received the fd gets EIO and changes
	 * nothing (the same rule as KVM's).
	 */
	if (current->mm != ctx->mm)
		return -EIO;
	/*
	 * Strict decoding: our type, read-write, a known number and a size
	 * from the command's first version up to a page, in 8-byte steps
	 * (every argument is a multiple of 8). A later header's larger
	 * struct is a larger size here, checked by copy_struct_from_user().
	 */
	if (_IOC_TYPE(cmd) != MRN_IOC_MAGIC ||
	    _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE) ||
	    nr >= ARRAY_SIZE(mrn_min_size) || !mrn_min_size[nr] ||
	    usize < mrn_min_size[nr] || usize > PAGE_SIZE || usize % 8)
		return -ENOTTY;

	switch (nr) {
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

/**
 * mrn_poll - readable while a registration is dirty and not yet drained,
 * or may be (a range deferred by a notifier callback is pending)
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
	/* A deferred range may hold dirty registrations of this context. */
	if (!dirty)
		dirty = mrn_mm_pending(ctx->mn);
	return dirty ? EPOLLIN | EPOLLRDNORM : 0;
}

static const struct file_operations mrn_fops = {
	.owner = THIS_MODULE,
	.open = mrn_open,
	.release = mrn_release,
	.mmap = mrn_mmap,
	.poll = mrn_poll,
	.unlocked_ioctl = mrn_ioctl,
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
	u64 ram_share;
	int ret;

	BUILD_BUG_ON(sizeof(struct mrn_register) != MRN_REGISTER_SIZE_VER1);
	BUILD_BUG_ON(sizeof(struct mrn_unregister) != MRN_UNREGISTER_SIZE_VER1);
	BUILD_BUG_ON(sizeof(struct mrn_drain) != MRN_DRAIN_SIZE_VER1);
	BUILD_BUG_ON(sizeof(struct mrn_query) != MRN_QUERY_SIZE_VER1);
	/* mrn_get_arg() reads every argument's header the same way. */
#define MRN_CHECK_HEADER(type)							\
	BUILD_BUG_ON(offsetof(type, size) != offsetof(struct mrn_arg_header, size) || \
		     offsetof(type, flags) != offsetof(struct mrn_arg_header, flags) || \
		     sizeof(type) % 8)
	MRN_CHECK_HEADER(struct mrn_register);
	MRN_CHECK_HEADER(struct mrn_unregister);
	MRN_CHECK_HEADER(struct mrn_drain);
	MRN_CHECK_HEADER(struct mrn_query);
#undef MRN_CHECK_HEADER
	BUILD_BUG_ON(sizeof(struct mrn_reg) > 80);

	/*
	 * Like inotify's max_user_watches: 1% of RAM per user and namespace
	 * level, at least 2^16 (8 MiB) on the smallest machines.
	 */
	if (!mrn_max_user_registrations) {
		ram_share = div_u64((u64)totalram_pages() * PAGE_SIZE,
				    100 * MRN_REG_COST);
		mrn_max_user_registrations =
			clamp_t(u64, ram_share, MRN_MIN_USER_REGISTRATIONS,
				MRN_MAX_REGISTRATIONS_LIMIT);
	}

	if (MRN_BEYOND_TESTED && !mrn_trust_newer_kernel)
		pr_notice("Linux %s is newer than %s, the newest release mrnotify was tested on: every change of a mapping counts as invalidating (trust_newer_kernel=1 trusts its reasons)\n",
			  init_utsname()->release, MRN_NEWEST_TESTED);

	mrn_reg_cache = KMEM_CACHE(mrn_reg, SLAB_ACCOUNT);
	if (!mrn_reg_cache)
		return -ENOMEM;
	mrn_stats_init();
	ret = misc_register(&mrn_misc);
	if (ret) {
		mrn_stats_exit();
		kmem_cache_destroy(mrn_reg_cache);
		return ret;
	}
	return 0;
}

static void __exit mrn_exit(void)
{
	/* fops.owner pins the module while any context exists. */
	misc_deregister(&mrn_misc);
	mrn_mm_unkeep_all();
	/* The notifiers may still wait for mrn_mm_free(). */
	mmu_notifier_synchronize();
	mrn_stats_exit();
	kmem_cache_destroy(mrn_reg_cache);
}

module_init(mrn_init);
module_exit(mrn_exit);

MODULE_DESCRIPTION("Invalidation counter and dirty list for RDMA registration caches");
MODULE_LICENSE("GPL");

// SPDX-License-Identifier: GPL-2.0
/*
 * The notifier of each address space with an open context (struct mrn_mm),
 * and its tree of clean registrations: what a change of the address space
 * marks, what REGISTER must know of the changes in flight.
 */

#include <linux/err.h>
#include <linux/errno.h>
#include <linux/lockdep.h>
#include <linux/mm.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/clock.h>
#include <linux/slab.h>

#include <linux/mrnotify.h>

#include "mrn_internal.h"
#include "mrn_trace.h"
#include "mrnotify_compat.h"

/**
 * mrn_event_slot - classify a change
 * @range: the change; its event is the kernel's reason
 * @invalidates: set to whether the change can replace pages
 *
 * The mapping is explicit so that the ABI does not depend on the order of
 * enum mmu_notifier_event.
 *
 * Return: the event's counter (enum mrn_counter).
 */
static enum mrn_counter mrn_event_slot(const struct mmu_notifier_range *range,
				       bool *invalidates)
{
	*invalidates = true;
	switch (range->event) {
	case MMU_NOTIFY_UNMAP:
		return MRN_CNT_UNMAP;
	case MMU_NOTIFY_CLEAR:
		return MRN_CNT_CLEAR;
	case MMU_NOTIFY_RELEASE:
		return MRN_CNT_RELEASE;
	case MMU_NOTIFY_MIGRATE:
		return MRN_CNT_MIGRATE;
#if MRN_HAVE_NOTIFY_EXCLUSIVE
	case MMU_NOTIFY_EXCLUSIVE:
		return MRN_CNT_EXCLUSIVE;
#endif
	/*
	 * Protection changes keep the same pages mapped: mprotect and NUMA
	 * hinting (PROTECTION_VMA), fork's write-protect of the parent and
	 * page cleaning (PROTECTION_PAGE), clear_refs (SOFT_DIRTY). A page
	 * replacement that follows them (a COW break, a NUMA migration) is
	 * announced as its own CLEAR event, except a THP's NUMA migration
	 * before 5.14 (see mrn_protection_may_migrate()).
	 */
	case MMU_NOTIFY_PROTECTION_VMA:
		*invalidates = mrn_protection_may_migrate(range);
		return MRN_CNT_PROTECTION_VMA;
	case MMU_NOTIFY_PROTECTION_PAGE:
		*invalidates = false;
		return MRN_CNT_PROTECTION_PAGE;
	case MMU_NOTIFY_SOFT_DIRTY:
		*invalidates = false;
		return MRN_CNT_SOFT_DIRTY;
	}
	/* A reason this module does not know: be safe, invalidate. */
	return MRN_CNT_OTHER;
}

/*
 * The reason's slot, and whether the change can replace pages: on a kernel
 * newer than the tested ones, every change can, unless trusted.
 */
static enum mrn_counter mrn_classify(const struct mmu_notifier_range *range,
				     bool *invalidates)
{
	enum mrn_counter slot = mrn_event_slot(range, invalidates);

	if (MRN_BEYOND_TESTED && !mrn_trust_newer_kernel)
		*invalidates = true;
	return slot;
}

/* What DRAIN reports of a mark: why, and how it was found. */
struct mrn_cause {
	u8 reason;	/* MRN_REASON_* */
	u8 flags;	/* MRN_ENTRY_* */
};

/* The reason user space is told for a change counted in @slot. */
static u8 mrn_slot_reason(enum mrn_counter slot)
{
	switch (slot) {
	case MRN_CNT_UNMAP:
		return MRN_REASON_UNMAP;
	case MRN_CNT_CLEAR:
		return MRN_REASON_CLEAR;
	case MRN_CNT_RELEASE:
		return MRN_REASON_RELEASE;
	case MRN_CNT_MIGRATE:
		return MRN_REASON_MIGRATE;
	case MRN_CNT_EXCLUSIVE:
		return MRN_REASON_EXCLUSIVE;
	case MRN_CNT_PROTECTION_VMA:
	case MRN_CNT_PROTECTION_PAGE:
	case MRN_CNT_SOFT_DIRTY:
		return MRN_REASON_PROTECTION;
	default:
		return MRN_REASON_OTHER;
	}
}

/* Publish a new generation of @ctx and wake its pollers; xa_lock held. */
static void mrn_publish_locked(struct mrn_ctx *ctx)
{
	lockdep_assert_held(&ctx->regs.xa_lock);
	ctx->generation++;
	/* Publish after the mark: whoever sees it and drains finds it. */
	smp_store_release(&ctx->status->generation, ctx->generation);
}

static void mrn_wake(struct mrn_ctx *ctx)
{
	/* Takes only the wait queue's spinlock, and only with a waiter. */
	if (wq_has_sleeper(&ctx->waiters))
		wake_up_interruptible_poll(&ctx->waiters, EPOLLIN | EPOLLRDNORM);
}

/* Mark @reg dirty and publish it; mrn_mm->lock held, @reg in no tree. */
static void mrn_mark_dirty(struct mrn_reg *reg, struct mrn_cause cause)
{
	struct mrn_ctx *ctx = reg->ctx;

	lockdep_assert_held(&ctx->mn->lock);
	xa_lock(&ctx->regs);
	reg->dirty = true;
	reg->reason = cause.reason;
	reg->mark_flags = cause.flags;
	trace_mrn_mark(ctx, reg->id, reg->node.start, reg->node.last,
		       cause.reason, cause.flags);
	/* Setting a mark never allocates: the entry exists. */
	__xa_set_mark(&ctx->regs, (u32)reg->id, MRN_MARK_DIRTY);
	mrn_valid_set(ctx, (u32)reg->id, 0);
	ctx->nr_dirty++;
	mrn_publish_locked(ctx);
	xa_unlock(&ctx->regs);
	mrn_wake(ctx);
}

/*
 * Mark at most @budget clean registrations over [start, last], taking each
 * out of the tree; mrn_mm->lock held. *@more says whether any is left.
 */
static unsigned int mrn_mark_some(struct mrn_mm *m, unsigned long start,
				  unsigned long last, struct mrn_cause cause,
				  unsigned int budget, bool *more)
{
	struct interval_tree_node *node;
	unsigned int n = 0;

	lockdep_assert_held(&m->lock);
	while ((node = interval_tree_iter_first(&m->clean, start, last))) {
		if (n == budget) {
			*more = true;
			return n;
		}
		interval_tree_remove(node, &m->clean);
		mrn_mark_dirty(container_of(node, struct mrn_reg, node), cause);
		n++;
	}
	*more = false;
	return n;
}

/* A deferred range that meets [start, last], or NULL; lock held. */
static const struct mrn_range *mrn_pending_overlaps(struct mrn_mm *m,
						    unsigned long start,
						    unsigned long last)
{
	unsigned int i;

	lockdep_assert_held(&m->lock);
	for (i = 0; i < m->nr_pending; i++)
		if (m->pending[i].start <= last && start <= m->pending[i].last)
			return &m->pending[i];
	return NULL;
}

/* Whether a deferred range holds all of [start, last]; lock held. */
static bool mrn_pending_covers(struct mrn_mm *m, unsigned long start,
			       unsigned long last)
{
	unsigned int i;

	lockdep_assert_held(&m->lock);
	for (i = 0; i < m->nr_pending; i++)
		if (m->pending[i].start <= start && last <= m->pending[i].last)
			return true;
	return false;
}

/*
 * Leave the clean registrations over [start, last] to the owner: note the
 * range and move every context's generation, so that each drains, and
 * DRAIN resolves the range first. O(1) plus one store per context; lock
 * held. A full log merges the range into its last entry: the hull costs
 * precision (more registrations reported dirty), never a lost mark.
 */
static void mrn_defer(struct mrn_mm *m, unsigned long start,
		      unsigned long last, u8 reason)
{
	bool merged = m->nr_pending == MRN_PENDING_RANGES;
	struct mrn_range *r;
	struct mrn_ctx *ctx;

	lockdep_assert_held(&m->lock);
	if (!merged) {
		r = &m->pending[m->nr_pending++];
		r->start = start;
		r->last = last;
		r->reason = reason;
	} else {
		r = &m->pending[MRN_PENDING_RANGES - 1];
		r->start = min(r->start, start);
		r->last = max(r->last, last);
		if (r->reason != reason)
			r->reason = MRN_REASON_UNKNOWN;
		mrn_count(MRN_CNT_DEFERRED_MERGED);
	}
	trace_mrn_defer(m, start, last, reason, merged);
	list_for_each_entry(ctx, &m->ctxs, mm_link) {
		xa_lock(&ctx->regs);
		/* Before the generation: its words are not exact any more. */
		WRITE_ONCE(ctx->status->deferred, ctx->status->deferred + 1);
		mrn_publish_locked(ctx);
		xa_unlock(&ctx->regs);
		mrn_wake(ctx);
	}
	mrn_count(MRN_CNT_DEFERRED);
}

/*
 * A notifier callback's share of a change: mark within the budget, defer
 * the rest. It runs in the context of whoever changes the mapping (the
 * process itself, another process truncating a shared file, reclaim, the
 * OOM reaper in non-blocking mode): it takes only spinlocks, never sleeps,
 * never allocates and never fails.
 */
static unsigned int mrn_mark_change(struct mrn_mm *m,
				    const struct mmu_notifier_range *range,
				    struct mrn_cause cause)
{
	unsigned long last = range->end - 1;
	unsigned int n;
	bool more;
	u64 t0;

	spin_lock(&m->lock);
	t0 = local_clock();
	/*
	 * Inside a deferred range, every clean registration is owed a mark
	 * already, and every context has seen its generation move since (see
	 * mrn_watch()): nothing to do. So an owner that never drains does not
	 * make each later change of the range pay the budget again.
	 */
	if (mrn_pending_covers(m, range->start, last)) {
		spin_unlock(&m->lock);
		return 0;
	}
	n = mrn_mark_some(m, range->start, last, cause, MRN_MARK_BUDGET, &more);
	if (more)
		mrn_defer(m, range->start, last, cause.reason);
	mrn_note_callback(local_clock() - t0, n);
	spin_unlock(&m->lock);
	return n;
}

/**
 * mrn_invalidate_range_start - a change of the address space begins
 * @mn: the mm's shared notifier
 * @range: what changes, and why
 *
 * An event that can replace pages marks the registrations that predate
 * it; one that cannot takes no lock.
 *
 * Return: 0 (the change is never refused).
 */
static int mrn_invalidate_range_start(struct mmu_notifier *mn,
				      const struct mmu_notifier_range *range)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);
	struct mrn_cause cause = { 0 };
	enum mrn_counter slot;
	bool invalidates;
	unsigned int n;

	slot = mrn_classify(range, &invalidates);
	if (!invalidates) {
		mrn_count(slot);
		mrn_count(MRN_CNT_IGNORED);
		return 0;
	}
	cause.reason = mrn_slot_reason(slot);
	n = mrn_mark_change(m, range, cause);
	mrn_count_add(slot, n);
	mrn_count_add(MRN_CNT_INVALIDATED, n);
	return 0;
}

/*
 * The change has ended: mark what was registered while it ran (its start
 * took every older registration out of the tree). Such a registration may
 * have pinned a page the change then replaced.
 */
static void mrn_invalidate_range_end(struct mmu_notifier *mn,
				     const struct mmu_notifier_range *range)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);
	struct mrn_cause cause = { .flags = MRN_ENTRY_AT_END };
	enum mrn_counter slot;
	bool invalidates;
	unsigned int n;

	slot = mrn_classify(range, &invalidates);
	if (!invalidates)
		return;
	cause.reason = mrn_slot_reason(slot);
	n = mrn_mark_change(m, range, cause);
	mrn_count_add(slot, n);
	mrn_count_add(MRN_CNT_INVALIDATED, n);
	mrn_count_add(MRN_CNT_MARKED_AT_END, n);
}

/*
 * Mark every clean registration, the address space being torn down, in
 * its own context: the lock is given up every MRN_MARK_BUDGET marks,
 * whether or not anyone waits for it (on a kernel without preemption,
 * cond_resched_lock() would not give it up to another CPU spinning on it).
 */
static u64 mrn_mark_all(struct mrn_mm *m)
{
	const struct mrn_cause cause = { .reason = MRN_REASON_RELEASE };
	unsigned int batch;
	bool more;
	u64 n = 0;
	u64 t0;

	do {
		spin_lock(&m->lock);
		t0 = local_clock();
		batch = mrn_mark_some(m, 0, ULONG_MAX, cause, MRN_MARK_BUDGET,
				      &more);
		mrn_note_callback(local_clock() - t0, batch);
		spin_unlock(&m->lock);
		n += batch;
		cond_resched();
	} while (more);
	return n;
}

/*
 * The notifiers kept for their mm after its last context closed (see
 * mrn_mm_get()), so that unloading the module can drop them; the lock also
 * guards mrn_mm.kept and kept_link.
 */
static LIST_HEAD(mrn_kept);
static DEFINE_SPINLOCK(mrn_kept_lock);

/*
 * The address space is torn down (exit, exec): every registration is
 * stale. Nothing can register afterwards, as no task uses this mm any more.
 * The mm's own reference goes (the kernel-doc of mmu_notifier_put() allows
 * it here); the contexts still hold theirs.
 */
static void mrn_mm_release(struct mmu_notifier *mn, struct mm_struct *mm)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);
	bool kept;
	u64 n;

	n = mrn_mark_all(m);
	spin_lock(&m->lock);
	m->nr_pending = 0;
	spin_unlock(&m->lock);
	mrn_count_add(MRN_CNT_RELEASE, n);
	mrn_count_add(MRN_CNT_INVALIDATED, n);
	spin_lock(&mrn_kept_lock);
	kept = m->kept;
	m->kept = false;
	list_del_init(&m->kept_link);
	spin_unlock(&mrn_kept_lock);
	if (kept)
		mmu_notifier_put(&m->mn);
}

/* Called by mmu_notifier_get() for the mm's first context. */
static struct mmu_notifier *mrn_mm_alloc(struct mm_struct *mm)
{
	struct mrn_mm *m = kzalloc(sizeof(*m), MRN_GFP_USER);

	if (!m)
		return ERR_PTR(-ENOMEM);
	spin_lock_init(&m->lock);
	m->clean = RB_ROOT_CACHED;
	INIT_LIST_HEAD(&m->ctxs);
	INIT_LIST_HEAD(&m->kept_link);
	mutex_init(&m->settle_mutex);
	mrn_count(MRN_CNT_NOTIFIERS);
	return &m->mn;
}

/* After the last mmu_notifier_put() and an SRCU grace period. */
static void mrn_mm_free(struct mmu_notifier *mn)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);

	mutex_destroy(&m->settle_mutex);
	kfree(m);
}

static const struct mmu_notifier_ops mrn_mm_ops = {
	.release = mrn_mm_release,
	.invalidate_range_start = mrn_invalidate_range_start,
	.invalidate_range_end = mrn_invalidate_range_end,
	.alloc_notifier = mrn_mm_alloc,
	.free_notifier = mrn_mm_free,
};

/*
 * Start watching @reg; ctx->mutex held, @reg in the index. REGISTER never
 * waits for the mm: a change running now over the range marks @reg at its
 * end. It is never inserted over a deferred range (that range is resolved
 * first), so every clean registration in a deferred range predates the
 * deferral, whose generation its context has seen: mrn_mark_change() may
 * skip a change inside such a range.
 */
void mrn_watch(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	struct mrn_mm *m = ctx->mn;

	lockdep_assert_held(&ctx->mutex);
	spin_lock(&m->lock);
	while (mrn_pending_overlaps(m, reg->node.start, reg->node.last)) {
		spin_unlock(&m->lock);
		mrn_mm_settle(m);
		spin_lock(&m->lock);
	}
	/* Valid before a change can find it: its mark clears the word. */
	mrn_valid_set(ctx, (u32)reg->id, MRN_VALID_WORD(reg->id));
	interval_tree_insert(&reg->node, &m->clean);
	spin_unlock(&m->lock);
}

/*
 * Stop watching @reg: once out of the tree, no notifier can reach it (they
 * find registrations only there, under the lock). A range deferred over it
 * and not yet resolved is a mark it is owed: it leaves dirty. ctx->mutex
 * held.
 */
void mrn_unwatch(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	struct mrn_cause cause = { .flags = MRN_ENTRY_DEFERRED };
	struct mrn_mm *m = ctx->mn;
	const struct mrn_range *owed;

	lockdep_assert_held(&ctx->mutex);
	spin_lock(&m->lock);
	if (!reg->dirty) {
		interval_tree_remove(&reg->node, &m->clean);
		owed = mrn_pending_overlaps(m, reg->node.start, reg->node.last);
		if (owed) {
			cause.reason = owed->reason;
			mrn_mark_dirty(reg, cause);
		}
	}
	spin_unlock(&m->lock);
}

/**
 * mrn_mm_settle - make the marks that callbacks deferred
 * @m: the owner's notifier (the caller is a context of its mm)
 *
 * In the owner's context, charged to it, the lock given up every
 * MRN_MARK_BUDGET marks. When it returns, every range deferred before the
 * call has been resolved. Lock order: ctx->mutex, then settle_mutex.
 */
void mrn_mm_settle(struct mrn_mm *m)
{
	struct mrn_cause cause = { .flags = MRN_ENTRY_DEFERRED };
	struct mrn_range r;
	unsigned int n;
	bool more;

	if (!READ_ONCE(m->nr_pending))
		return;
	mutex_lock(&m->settle_mutex);
	spin_lock(&m->lock);
	while (m->nr_pending) {
		r = m->pending[m->nr_pending - 1];
		cause.reason = r.reason;
		n = mrn_mark_some(m, r.start, r.last, cause, MRN_MARK_BUDGET,
				  &more);
		/*
		 * Resolved unless a callback appended a range or widened this
		 * one while the lock was given up: then go on with the last.
		 */
		if (!more && m->pending[m->nr_pending - 1].start == r.start &&
		    m->pending[m->nr_pending - 1].last == r.last)
			m->nr_pending--;
		spin_unlock(&m->lock);
		mrn_count_add(MRN_CNT_INVALIDATED, n);
		cond_resched();
		spin_lock(&m->lock);
	}
	spin_unlock(&m->lock);
	mutex_unlock(&m->settle_mutex);
}

/**
 * mrn_mm_settled_generation - a generation DRAIN may report
 * @ctx: the context (the caller is its owner)
 * @generation: set to ctx's generation when nothing was pending
 *
 * A deferral notes its range and then moves the generation, both under the
 * lock: a generation read while the log is empty covers no unresolved
 * deferral.
 *
 * Return: true with @generation set; false when a range is pending (settle
 * and call again).
 */
bool mrn_mm_settled_generation(struct mrn_ctx *ctx, u64 *generation)
{
	struct mrn_mm *m = ctx->mn;
	bool settled;

	spin_lock(&m->lock);
	settled = !m->nr_pending;
	if (settled) {
		xa_lock(&ctx->regs);
		*generation = ctx->generation;
		xa_unlock(&ctx->regs);
	}
	spin_unlock(&m->lock);
	return settled;
}

/* Whether a deferred range waits to be resolved (for poll()). */
bool mrn_mm_pending(struct mrn_mm *m)
{
	return READ_ONCE(m->nr_pending) != 0;
}

/**
 * mrn_mm_get - the notifier of an address space, shared by its contexts
 * @mm: current->mm
 *
 * The first one is registered under mm_take_all_locks(), so no change is
 * in flight then. It is kept until the mm exits: the first caller takes a
 * second reference for the mm, which mrn_mm_release() drops (or
 * mrn_mm_unkeep_all(), at unload). Later opens, after any number of
 * closes, find it without mm_take_all_locks().
 *
 * Return: a reference, or an ERR_PTR: -ENOMEM, or -ERESTARTNOINTR when a
 * signal interrupted the registration (the open is then restarted).
 */
struct mrn_mm *mrn_mm_get(struct mm_struct *mm)
{
	struct mmu_notifier *mn = mmu_notifier_get(&mrn_mm_ops, mm);
	struct mrn_mm *m;
	bool keep;

	/*
	 * mm_take_all_locks() gives up on any pending signal, also io_uring's
	 * task work (TIF_NOTIFY_SIGNAL): once that is handled, open again,
	 * unseen by the caller.
	 */
	if (IS_ERR(mn))
		return ERR_PTR(PTR_ERR(mn) == -EINTR ? -ERESTARTNOINTR : PTR_ERR(mn));
	m = container_of(mn, struct mrn_mm, mn);
	spin_lock(&mrn_kept_lock);
	keep = !m->kept;
	if (keep) {
		m->kept = true;
		list_add(&m->kept_link, &mrn_kept);
	}
	spin_unlock(&mrn_kept_lock);
	/*
	 * Found, not registered, as the caller holds a reference: no
	 * mm_take_all_locks(), and no failure.
	 */
	if (keep && WARN_ON_ONCE(mmu_notifier_get(&mrn_mm_ops, mm) != mn)) {
		mmu_notifier_put(mn);
		return ERR_PTR(-EIO);
	}
	return m;
}

/*
 * Bind @ctx to its mm's notifier. Return: 0, or -EMFILE when the mm has
 * MRN_MM_MAX_CONTEXTS contexts.
 */
int mrn_mm_attach(struct mrn_mm *m, struct mrn_ctx *ctx)
{
	int ret = -EMFILE;

	spin_lock(&m->lock);
	if (m->nr_ctxs < MRN_MM_MAX_CONTEXTS) {
		list_add(&ctx->mm_link, &m->ctxs);
		m->nr_ctxs++;
		ret = 0;
	}
	spin_unlock(&m->lock);
	return ret;
}

/*
 * Unbind @ctx once its registrations are all out of the tree. Under the
 * lock, so a change still finishing a mark or a deferral of one of ours
 * (its wakeup reads the context) is done when this returns.
 */
void mrn_mm_detach(struct mrn_mm *m, struct mrn_ctx *ctx)
{
	spin_lock(&m->lock);
	list_del(&ctx->mm_link);
	m->nr_ctxs--;
	spin_unlock(&m->lock);
}

/* Drop a context's reference; the mm's own is dropped by its release. */
void mrn_mm_put(struct mrn_mm *m)
{
	mmu_notifier_put(&m->mn);
}

/*
 * At unload, with no context left (each file pins the module): drop the
 * references kept for address spaces that are still alive. A change that
 * is running in one of them stays within its SRCU read section, which
 * mrn_exit() waits for with mmu_notifier_synchronize().
 */
void mrn_mm_unkeep_all(void)
{
	struct mrn_mm *m;

	for (;;) {
		spin_lock(&mrn_kept_lock);
		m = list_first_entry_or_null(&mrn_kept, struct mrn_mm, kept_link);
		if (m) {
			list_del_init(&m->kept_link);
			m->kept = false;
		}
		spin_unlock(&mrn_kept_lock);
		if (!m)
			return;
		mmu_notifier_put(&m->mn);
	}
}

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
#include <linux/slab.h>

#include <linux/mrnotify.h>

#include "mrn_internal.h"
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

/* Mark @reg dirty and publish it; mrn_mm->lock held, @reg in no tree. */
static void mrn_mark_dirty(struct mrn_reg *reg)
{
	struct mrn_ctx *ctx = reg->ctx;

	lockdep_assert_held(&ctx->mn->lock);
	xa_lock(&ctx->regs);
	reg->dirty = true;
	/* Setting a mark never allocates: the entry exists. */
	__xa_set_mark(&ctx->regs, (u32)reg->id, MRN_MARK_DIRTY);
	ctx->nr_dirty++;
	ctx->generation++;
	/* Publish after the mark: whoever sees it and drains finds it. */
	smp_store_release(&ctx->status->generation, ctx->generation);
	xa_unlock(&ctx->regs);
	/* Takes only the wait queue's spinlock, and only with a waiter. */
	if (wq_has_sleeper(&ctx->waiters))
		wake_up_interruptible_poll(&ctx->waiters, EPOLLIN | EPOLLRDNORM);
}

/*
 * Mark every clean registration over [start, last] and take it out of the
 * tree; mrn_mm->lock held. When @may_sleep, the lock is given up now and
 * then: a registration inserted meanwhile sees the change in flight (or
 * the caller is the mm's release, after which nothing registers).
 */
static u64 mrn_mark_range(struct mrn_mm *m, unsigned long start,
			  unsigned long last, bool may_sleep)
{
	struct interval_tree_node *node;
	u64 n = 0;

	lockdep_assert_held(&m->lock);
	while ((node = interval_tree_iter_first(&m->clean, start, last))) {
		interval_tree_remove(node, &m->clean);
		mrn_mark_dirty(container_of(node, struct mrn_reg, node));
		n++;
		if (may_sleep)
			cond_resched_lock(&m->lock);
	}
	return n;
}

/* Note an invalidating change from its start to its end; lock held. */
static void mrn_inflight_begin(struct mrn_mm *m,
			       const struct mmu_notifier_range *range)
{
	struct mrn_inflight *free = NULL;
	unsigned int i;

	lockdep_assert_held(&m->lock);
	for (i = 0; i < MRN_INFLIGHT_SLOTS; i++) {
		/*
		 * Noted once however often it starts: 5.10's change_pmd_range()
		 * starts a range at address 0 once per populated PMD, and ends
		 * it once.
		 */
		if (m->inflight[i].key == range)
			return;
		if (!m->inflight[i].key && !free)
			free = &m->inflight[i];
	}
	if (!free) {
		m->inflight_untracked++;
		return;
	}
	free->key = range;
	free->start = range->start;
	free->end = range->end;
}

/* The change noted by mrn_inflight_begin() has ended; lock held. */
static void mrn_inflight_end(struct mrn_mm *m,
			     const struct mmu_notifier_range *range)
{
	unsigned int i;

	lockdep_assert_held(&m->lock);
	for (i = 0; i < MRN_INFLIGHT_SLOTS; i++) {
		if (m->inflight[i].key == range) {
			m->inflight[i].key = NULL;
			return;
		}
	}
	/*
	 * Counted at its start. (An end without a start cannot happen: the
	 * notifier was registered under mm_take_all_locks(), with no change
	 * in flight.)
	 */
	if (!WARN_ON_ONCE(!m->inflight_untracked))
		m->inflight_untracked--;
}

/*
 * Whether a change in flight may still replace pages in [start, last]:
 * its start has passed, so it marked only the registrations in the tree
 * then, and its pages may not have changed yet. Lock held.
 */
static bool mrn_inflight_overlaps(struct mrn_mm *m, unsigned long start,
				  unsigned long last)
{
	const struct mrn_inflight *r;
	unsigned int i;

	lockdep_assert_held(&m->lock);
	if (m->inflight_untracked)
		return true;
	for (i = 0; i < MRN_INFLIGHT_SLOTS; i++) {
		r = &m->inflight[i];
		if (r->key && r->start <= last && start < r->end)
			return true;
	}
	return false;
}

/**
 * mrn_invalidate_range_start - a change of the address space begins
 * @mn: the mm's shared notifier
 * @range: what changes, and why
 *
 * It runs in the context of whoever changes the mapping (the process
 * itself, another process truncating a shared file, reclaim, the OOM
 * reaper in non-blocking mode): it takes only spinlocks, sleeps only where
 * the range allows it, never allocates and never fails. An event that can
 * replace pages marks the clean registrations it overlaps, and is noted as
 * in flight until its end.
 *
 * Return: 0 (the change is never refused).
 */
static int mrn_invalidate_range_start(struct mmu_notifier *mn,
				      const struct mmu_notifier_range *range)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);
	enum mrn_counter slot;
	bool invalidates, met;
	u64 n;

	slot = mrn_event_slot(range, &invalidates);
	spin_lock(&m->lock);
	if (!invalidates) {
		/* O(log n), for the counters only: nothing is marked. */
		met = interval_tree_iter_first(&m->clean, range->start,
					       range->end - 1);
		spin_unlock(&m->lock);
		if (met) {
			mrn_count(slot);
			mrn_count(MRN_CNT_IGNORED);
		}
		return 0;
	}
	mrn_inflight_begin(m, range);
	n = mrn_mark_range(m, range->start, range->end - 1,
			   mmu_notifier_range_blockable(range));
	spin_unlock(&m->lock);
	mrn_count_add(slot, n);
	mrn_count_add(MRN_CNT_INVALIDATED, n);
	return 0;
}

static void mrn_invalidate_range_end(struct mmu_notifier *mn,
				     const struct mmu_notifier_range *range)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);
	bool invalidates;

	mrn_event_slot(range, &invalidates);
	if (!invalidates)
		return;
	spin_lock(&m->lock);
	mrn_inflight_end(m, range);
	spin_unlock(&m->lock);
}

/*
 * The address space is torn down (exit, exec): every registration is
 * stale. Nothing can register afterwards, as no task uses this mm any more.
 */
static void mrn_mm_release(struct mmu_notifier *mn, struct mm_struct *mm)
{
	struct mrn_mm *m = container_of(mn, struct mrn_mm, mn);
	u64 n;

	spin_lock(&m->lock);
	n = mrn_mark_range(m, 0, ULONG_MAX, true);
	spin_unlock(&m->lock);
	mrn_count_add(MRN_CNT_RELEASE, n);
	mrn_count_add(MRN_CNT_INVALIDATED, n);
}

/* Called by mmu_notifier_get() for the mm's first context. */
static struct mmu_notifier *mrn_mm_alloc(struct mm_struct *mm)
{
	struct mrn_mm *m = kzalloc(sizeof(*m), MRN_GFP_USER);

	if (!m)
		return ERR_PTR(-ENOMEM);
	spin_lock_init(&m->lock);
	m->clean = RB_ROOT_CACHED;
	return &m->mn;
}

/* After the last mmu_notifier_put() and an SRCU grace period. */
static void mrn_mm_free(struct mmu_notifier *mn)
{
	kfree(container_of(mn, struct mrn_mm, mn));
}

static const struct mmu_notifier_ops mrn_mm_ops = {
	.release = mrn_mm_release,
	.invalidate_range_start = mrn_invalidate_range_start,
	.invalidate_range_end = mrn_invalidate_range_end,
	.alloc_notifier = mrn_mm_alloc,
	.free_notifier = mrn_mm_free,
};

/*
 * Start watching @reg; ctx->mutex held, @reg in the index. A change in
 * flight over its range makes it dirty at once instead of waiting for that
 * change to end: REGISTER never waits for the mm, and user space learns
 * that pages it pins now may be replaced.
 */
void mrn_watch(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	struct mrn_mm *m = ctx->mn;
	bool raced;

	lockdep_assert_held(&ctx->mutex);
	spin_lock(&m->lock);
	raced = mrn_inflight_overlaps(m, reg->node.start, reg->node.last);
	if (raced)
		mrn_mark_dirty(reg);
	else
		interval_tree_insert(&reg->node, &m->clean);
	spin_unlock(&m->lock);
	if (raced)
		mrn_count(MRN_CNT_REGISTERED_DIRTY);
}

/*
 * Stop watching @reg: once out of the tree, no notifier can reach it (they
 * find registrations only there, under the lock). ctx->mutex held.
 */
void mrn_unwatch(struct mrn_ctx *ctx, struct mrn_reg *reg)
{
	lockdep_assert_held(&ctx->mutex);
	spin_lock(&ctx->mn->lock);
	if (!reg->dirty)
		interval_tree_remove(&reg->node, &ctx->mn->clean);
	spin_unlock(&ctx->mn->lock);
}

/**
 * mrn_mm_get - the notifier of an address space, shared by its contexts
 * @mm: current->mm
 *
 * The first one is registered under mm_take_all_locks(), so no change is
 * in flight then: every change after it is seen from its start to its end.
 *
 * Return: a reference, or an ERR_PTR: -ENOMEM, or -ERESTARTNOINTR when a
 * signal interrupted the registration (the open is then restarted).
 */
struct mrn_mm *mrn_mm_get(struct mm_struct *mm)
{
	struct mmu_notifier *mn = mmu_notifier_get(&mrn_mm_ops, mm);

	/*
	 * mm_take_all_locks() gives up on any pending signal, also io_uring's
	 * task work (TIF_NOTIFY_SIGNAL): once that is handled, open again,
	 * unseen by the caller.
	 */
	if (IS_ERR(mn))
		return ERR_PTR(PTR_ERR(mn) == -EINTR ? -ERESTARTNOINTR : PTR_ERR(mn));
	return container_of(mn, struct mrn_mm, mn);
}

/*
 * Wait for the marks in progress: a change marks a registration, publishes
 * it and wakes its context's pollers all under the lock, so once none of a
 * context's registrations is in the tree, taking the lock once is enough.
 */
void mrn_mm_quiesce(struct mrn_mm *m)
{
	spin_lock(&m->lock);
	spin_unlock(&m->lock);
}

/* Once the context's registrations are all out of the tree. */
void mrn_mm_put(struct mrn_mm *m)
{
	mmu_notifier_put(&m->mn);
}

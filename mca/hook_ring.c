/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: the memory hooks' queue (hook_ring.h).
 */
#include "hook_ring.h"

void mca_rcache_mrnotify_hook_ring_init(struct mca_rcache_mrnotify_hook_ring *r)
{
	for (uint64_t i = 0; i < MRN_HOOK_RING_SIZE; i++)
		r->slots[i].seq = i;
}

/*
 * The merged span of ranges lost to a full queue, in one word: 2 MiB chunk
 * numbers, the first in the low 28 bits and the end (exclusive) in the
 * next 28, which covers 2^49 bytes of address space; beyond that, the end
 * is "everything above". 0 means nothing was lost.
 */
#define MRN_LOST_SHIFT 21
#define MRN_LOST_BITS  28
#define MRN_LOST_MAX   ((UINT64_C(1) << MRN_LOST_BITS) - 1)

static void lost_merge(struct mca_rcache_mrnotify_hook_ring *r, uintptr_t start, size_t len)
{
	const uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
	uint64_t lo = start >> MRN_LOST_SHIFT;
	uint64_t hi = (end >> MRN_LOST_SHIFT) +
		      ((end & (((uintptr_t)1 << MRN_LOST_SHIFT) - 1)) != 0);
	uint64_t old = __atomic_load_n(&r->lost, __ATOMIC_RELAXED), merged;

	lo = lo > MRN_LOST_MAX ? MRN_LOST_MAX - 1 : lo;
	hi = hi > MRN_LOST_MAX ? MRN_LOST_MAX : hi;
	do {
		uint64_t mlo = lo, mhi = hi;

		if (old) {
			mlo = (old & MRN_LOST_MAX) < mlo ? (old & MRN_LOST_MAX) : mlo;
			mhi = (old >> MRN_LOST_BITS) > mhi ? (old >> MRN_LOST_BITS) : mhi;
		}
		merged = mlo | (mhi << MRN_LOST_BITS);
	} while (!__atomic_compare_exchange_n(&r->lost, &old, merged, true, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
}

/* Takes the lost span, if any: [*start, *start + *len). */
bool mca_rcache_mrnotify_hook_ring_take_lost(struct mca_rcache_mrnotify_hook_ring *r,
					     uintptr_t *start, size_t *len)
{
	const uint64_t w = __atomic_exchange_n(&r->lost, 0, __ATOMIC_ACQ_REL);
	uint64_t lo, hi;

	if (!w)
		return false;
	lo = w & MRN_LOST_MAX;
	hi = w >> MRN_LOST_BITS;
	*start = (uintptr_t)lo << MRN_LOST_SHIFT;
	*len = hi == MRN_LOST_MAX ? (~(size_t)0 >> 1) - *start
				  : ((uintptr_t)(hi - lo) << MRN_LOST_SHIFT);
	return true;
}

/*
 * Bounded multi-producer queue (each slot's sequence says whose turn it
 * is). Runs inside free()/munmap() on any thread: no lock, no allocation.
 */
void mca_rcache_mrnotify_hook_ring_push(struct mca_rcache_mrnotify_hook_ring *r, uintptr_t start,
					size_t len)
{
	uint64_t pos = __atomic_load_n(&r->head, __ATOMIC_RELAXED);

	for (;;) {
		struct mca_rcache_mrnotify_hook_slot *slot = &r->slots[pos % MRN_HOOK_RING_SIZE];
		const uint64_t seq = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);

		if (seq == pos) {
			if (__atomic_compare_exchange_n(&r->head, &pos, pos + 1, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				slot->start = start;
				slot->len = len;
				__atomic_store_n(&slot->seq, pos + 1, __ATOMIC_RELEASE);
				__atomic_fetch_add(&r->queued, 1, __ATOMIC_RELAXED);
				return;
			}
		} else if (seq < pos) {
			/* Full: merged, not lost. */
			lost_merge(r, start, len);
			__atomic_fetch_add(&r->overflows, 1, __ATOMIC_RELAXED);
			return;
		} else {
			pos = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
		}
	}
}

bool mca_rcache_mrnotify_hook_ring_pop(struct mca_rcache_mrnotify_hook_ring *r, uintptr_t *start,
				       size_t *len)
{
	uint64_t pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);

	for (;;) {
		struct mca_rcache_mrnotify_hook_slot *slot = &r->slots[pos % MRN_HOOK_RING_SIZE];
		const uint64_t seq = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);

		if (seq == pos + 1) {
			if (__atomic_compare_exchange_n(&r->tail, &pos, pos + 1, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				*start = slot->start;
				*len = slot->len;
				__atomic_store_n(&slot->seq, pos + MRN_HOOK_RING_SIZE,
						 __ATOMIC_RELEASE);
				return true;
			}
		} else if (seq < pos + 1) {
			return false;
		} else {
			pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
		}
	}
}

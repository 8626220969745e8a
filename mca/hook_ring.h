/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: the queue between Open MPI's memory hooks and the cache
 * (monitor "none"). Plain C with atomics, no Open MPI types: the hooks may
 * run inside free() or munmap() on any thread.
 */
#ifndef MCA_RCACHE_MRNOTIFY_HOOK_RING_H
#define MCA_RCACHE_MRNOTIFY_HOOK_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Ranges reported by Open MPI's memory hooks (monitor "none"), queued
 * without locks or allocation (the hook may run inside free() or munmap()),
 * applied by the next call into the cache. Only ranges that overlap what
 * the cache ever registered are queued. A range that finds the queue full
 * is merged into one span (2 MiB granularity, one word, so that merging
 * stays a single compare-and-swap), invalidated with the queue: an
 * overflow drops the registrations near the lost ranges, not the cache.
 */
#define MRN_HOOK_RING_SIZE 1024

struct mca_rcache_mrnotify_hook_slot {
	uint64_t seq;
	uintptr_t start;
	size_t len;
};

struct mca_rcache_mrnotify_hook_ring {
	uint64_t head; /* next ticket of producers */
	char pad0[56];
	uint64_t tail; /* next ticket of the consumer */
	char pad1[56];
	/* Ranges that found the queue full, merged: see MRN_LOST_*. 0: none. */
	uint64_t lost;
	uint64_t queued; /* statistics */
	uint64_t overflows;
	struct mca_rcache_mrnotify_hook_slot slots[MRN_HOOK_RING_SIZE];
};

void mca_rcache_mrnotify_hook_ring_init(struct mca_rcache_mrnotify_hook_ring *r);
/* Queues [start, start + len); on a full queue merges it into the lost span. */
void mca_rcache_mrnotify_hook_ring_push(struct mca_rcache_mrnotify_hook_ring *r, uintptr_t start,
					size_t len);
/*
 * Nothing queued and nothing lost: the check every call into the cache
 * makes before draining, two loads and no write.
 */
static inline bool mca_rcache_mrnotify_hook_ring_idle(struct mca_rcache_mrnotify_hook_ring *r)
{
	return __atomic_load_n(&r->tail, __ATOMIC_RELAXED) ==
		       __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&r->lost, __ATOMIC_ACQUIRE);
}
/* The oldest queued range, if any (any thread may pop: tail moves by CAS). */
bool mca_rcache_mrnotify_hook_ring_pop(struct mca_rcache_mrnotify_hook_ring *r, uintptr_t *start,
				       size_t *len);
/* Takes the lost span, if any: [*start, *start + *len). */
bool mca_rcache_mrnotify_hook_ring_take_lost(struct mca_rcache_mrnotify_hook_ring *r,
					     uintptr_t *start, size_t *len);

#endif

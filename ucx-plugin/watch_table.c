/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The slot table: one kernel watch per range, shared by the regions of
 * every cache that hold the range (UCP's cache registers each region on the
 * IB domain, whose cache then registers the same range), found by range
 * through a hash. Every function here runs with mrn_ucx.lock held.
 */
#include "plugin.h"

#include <stdlib.h>
#include <string.h>

static size_t mrn_ucx_hash_of(uintptr_t start, size_t len)
{
	uint64_t h = (uint64_t)start * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)len * 0xc2b2ae3d27d4eb4full;

	return (size_t)(h >> 32) & (mrn_ucx.slot_cap - 1);
}

/* The live (watched, not reported dead) slot for this range, or 0. */
uint32_t mrn_ucx_slot_find(uintptr_t start, size_t len)
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

/* Makes slot s findable by its range (it has a kernel watch). */
void mrn_ucx_slot_hash(uint32_t s)
{
	uint32_t *head =
		&mrn_ucx.hash[mrn_ucx_hash_of(mrn_ucx.slots[s].start, mrn_ucx.slots[s].len)];

	mrn_ucx.slots[s].next = *head;
	*head = s;
}

/* No new region may share slot s any more (its watch is gone). */
void mrn_ucx_slot_unhash(uint32_t s)
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

/* Doubles the slot table and rebuilds the hash; 0 on failure. */
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

/* 0 when no slot can be had (the region then stays unwatched). */
uint32_t mrn_ucx_slot_alloc(void *start, size_t len)
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

/* Slot s is unhashed. */
void mrn_ucx_slot_free(uint32_t s)
{
	mrn_ucx.slots[s].refs = 0;
	mrn_ucx.slots[s].id = 0;
	mrn_ucx.slots[s].next = mrn_ucx.free_slot;
	mrn_ucx.free_slot = s;
}

/*
 * A region stops using slot s; the last one removes the kernel's watch
 * (returns 1 when that watch had gone invalid, undrained).
 */
int mrn_ucx_slot_put(uint32_t s)
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
 * Invalidates every range watched through the slot table, in every cache,
 * without asking the kernel: when a drain fails, and in a forked child,
 * whose watches were the parent's. Range by range: in UCX 1.13 one
 * ucm_vm_munmap() of the whole address space makes the page-table search
 * of a cache that spans less of it walk the address space (it stops at the
 * requested end, not at the table's).
 */
void mrn_ucx_forget_all(void)
{
	for (uint32_t s = 1; s < mrn_ucx.nslots; s++) {
		if (mrn_ucx.slots[s].refs == 0)
			continue;
		ucm_vm_munmap((void *)mrn_ucx.slots[s].start, mrn_ucx.slots[s].len);
		mrn_ucx.stats.ranges++;
	}
}

/* Empties the table (a forked child: the slots were the parent's). */
void mrn_ucx_slots_reset(void)
{
	mrn_ucx.nslots = mrn_ucx.slot_cap ? 1 : 0;
	mrn_ucx.free_slot = 0;
	if (mrn_ucx.hash != NULL)
		memset(mrn_ucx.hash, 0, mrn_ucx.slot_cap * sizeof(*mrn_ucx.hash));
}

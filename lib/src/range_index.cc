// SPDX-License-Identifier: BSD-3-Clause
#include "range_index.h"

#include <algorithm>
#include <new>

namespace mrn {

RangeIndex::RangeIndex(unsigned page_shift)
    : page_shift_(page_shift), page_size_(size_t(1) << page_shift)
{
	clear();
}

void RangeIndex::alloc_table(size_t capacity)
{
	use_table(BigArray(capacity * sizeof(Slot)), capacity);
}

void RangeIndex::use_table(BigArray table, size_t capacity)
{
	// mmap'ed memory is zero: every slot starts empty.
	table_ = std::move(table);
	slots_ = static_cast<Slot *>(table_.data());
	capacity_ = capacity;
	mask_ = capacity - 1;
	// The block hash picks the slot pair a block starts at.
	const unsigned bits = unsigned(__builtin_ctzl(capacity));
	hash_shift_ = 64 - (bits - 1);
	used_ = 0;
}

void RangeIndex::clear()
{
	// 8 KiB to start with: a cache of tens of buffers then reads a slot or
	// two a lookup, not five (capi_bench's sizes under cachegrind, 64
	// slots at first: 4.8 slots and 1.1 mispredicted branches a hit).
	alloc_table(kFirstCapacity);
	entries_ = 0;
	for (auto &c : level_count_)
		c = 0;
	level_mask_.store(0, std::memory_order_relaxed);
}

void RangeIndex::insert(Entry *e)
{
	inserts_++;
	const unsigned level = level_of(e->length());
	uint64_t c0, c1;
	chunks_of(e, level, c0, c1);
	put_slot(make_slot(e, false, make_key(level, c0)));
	if (c1 != c0)
		put_slot(make_slot(e, true, make_key(level, c1)));
	entries_++;
	// Writers are serialised, and lookups read the mask: store it only
	// when the level was empty.
	if (level_count_[level]++ == 0)
		level_mask_.store(level_mask_.load(std::memory_order_relaxed) | uint32_t(1) << level,
				  std::memory_order_release);
}

void RangeIndex::erase(Entry *e)
{
	const unsigned level = level_of(e->length());
	uint64_t c0, c1;
	chunks_of(e, level, c0, c1);
	erase_slot(make_slot(e, false, make_key(level, c0)));
	if (c1 != c0)
		erase_slot(make_slot(e, true, make_key(level, c1)));
	entries_--;
	if (--level_count_[level] == 0)
		level_mask_.store(level_mask_.load(std::memory_order_relaxed) & ~(uint32_t(1) << level),
				  std::memory_order_relaxed);
}

void RangeIndex::put_slot(uint64_t slot)
{
	// The cache keeps the load under 3/4 (insert_needs_growth): probing
	// degrades past that, and a full table would never end a probe.
	auto at = [this](size_t i) { return slots_[i].load(std::memory_order_relaxed); };
	const size_t h = home_of_slot(slot);
	// Its place: after every key homed at or before its home, that is at
	// the first slot empty or nearer its own home than this one is to h.
	size_t p = h, dist = 0;
	for (uint64_t w; (w = at(p)) != 0; p = (p + 1) & mask_, dist++) {
		// A distance stored as far is at least as far as this one
		// until this one passes kDistFar: only then look it up.
		const uint64_t d = slot_dist(w);
		if (d < dist && (d != kDistFar || dist_at(p, w) < dist))
			break;
	}
	// Readers may be probing: move the rest of the run one slot on from
	// its far end back, each word copied before its old slot is
	// overwritten, so that a probe going forward meets every key (one of
	// them perhaps twice), the homes in order and no empty slot; the new
	// key last.
	size_t end = p;
	while (at(end) != 0)
		end = (end + 1) & mask_;
	for (size_t i = end; i != p;) {
		const size_t from = (i - 1) & mask_;
		slots_[i].store(one_farther(at(from)), std::memory_order_release);
		i = from;
	}
	slots_[p].store(with_dist(slot, dist), std::memory_order_release);
	used_++;
}

void RangeIndex::erase_slot(uint64_t slot)
{
	auto at = [this](size_t i) { return slots_[i].load(std::memory_order_relaxed); };
	size_t i = home_of_slot(slot);
	while ((at(i) & ~kDistField) != slot) {
		if (at(i) == 0)
			return; // not filed: nothing to do
		i = (i + 1) & mask_;
	}
	// Backward-shift deletion (readers are excluded): pull the rest of the
	// run one slot back, up to an empty slot or a key at its home, so that
	// lookups never need tombstones and the homes stay in order.
	size_t hole = i;
	for (size_t j = (hole + 1) & mask_; at(j) != 0; j = (j + 1) & mask_) {
		const size_t d = dist_at(j, at(j));
		if (d == 0)
			break;
		slots_[hole].store(with_dist(at(j), d - 1), std::memory_order_relaxed);
		hole = j;
	}
	slots_[hole].store(0, std::memory_order_relaxed);
	used_--;
}

void RangeIndex::rehash(size_t capacity)
{
	// The new table first: when it cannot be had (std::bad_alloc), the
	// index is as it was. Taken after the old one was moved out, the old
	// one was unmapped on the way out and the index left pointing at it.
	BigArray fresh(capacity * sizeof(Slot));
	BigArray old_table = std::move(table_);
	const Slot *old = slots_;
	const size_t old_capacity = capacity_;
	use_table(std::move(fresh), capacity);
	for (size_t i = 0; i < old_capacity; i++) {
		const uint64_t w = old[i].load(std::memory_order_relaxed);
		if (w != 0)
			put_slot(w);
	}
}

void RangeIndex::grow()
{
	rehash(capacity_ * 2);
}

// Growth happens at 3/4 full, so a table shrunk at 1/16 to a quarter of its
// size (1/4 full at most) grows again only after its entries triple: no
// back and forth. Each shrink follows the erasure of most of a table, which
// pays for it.
bool RangeIndex::shrink_if_sparse() noexcept
{
	if (capacity_ <= kFirstCapacity || used_ * 16 > capacity_)
		return false;
	try {
		rehash(std::max(capacity_ / 4, kFirstCapacity));
	} catch (const std::bad_alloc &) {
		return false; // the larger table serves as well
	}
	return true;
}

size_t RangeIndex::slots_read(uintptr_t s, uintptr_t e, bool until_covering) const
{
	size_t read = 0;
	uint32_t levels = level_mask_.load(std::memory_order_relaxed) &
			  ~((uint32_t(1) << level_of(e - s)) - 1);
	while (levels) {
		const unsigned level = unsigned(__builtin_ctz(levels));
		levels &= levels - 1;
		const uint64_t key = make_key(level, s >> shift_of(level));
		bool found = false;
		visit(key, [&](uint64_t w) {
			read++;
			found = until_covering && w != 0 && (w & kTagMask) == tag_of(key) &&
				slot_entry(w)->covers(s, e);
			return found;
		});
		if (found)
			return read;
	}
	return read;
}

} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
#include "range_index.h"

#ifndef MRN_INDEX_SMALL_BITS
#define MRN_INDEX_SMALL_BITS 14
#endif
namespace mrn {

RangeIndex::RangeIndex(unsigned page_shift) : page_shift_(page_shift)
{
	clear();
}

void RangeIndex::alloc_table(size_t capacity)
{
	// mmap'ed memory is zero: every slot starts empty.
	table_ = BigArray(capacity * sizeof(Slot));
	slots_ = static_cast<Slot *>(table_.data());
	capacity_ = capacity;
	mask_ = capacity - 1;
	// The block hash supplies the bits above the block.
	const unsigned bits = unsigned(__builtin_ctzl(capacity));
	block_bits_ = bits >= MRN_INDEX_SMALL_BITS ? kBlockBits : 0;
	hash_shift_ = bits > block_bits_ ? 64 - (bits - block_bits_) : 63;
	used_ = 0;
}

void RangeIndex::clear()
{
	alloc_table(64);
	entries_ = 0;
	for (auto &c : level_count_)
		c = 0;
	level_mask_.store(0, std::memory_order_relaxed);
}

void RangeIndex::insert(Entry *e)
{
	const unsigned level = level_of(e->length());
	uint64_t c0, c1;
	chunks_of(e, level, c0, c1);
	put_slot(make_key(level, c0), make_slot(e, false, make_key(level, c0)));
	if (c1 != c0)
		put_slot(make_key(level, c1), make_slot(e, true, make_key(level, c1)));
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

void RangeIndex::put_slot(uint64_t key, uint64_t slot)
{
	// The cache keeps the load under 3/4 (insert_needs_growth): probes
	// lengthen past that, and a full table would never end one.
	auto at = [this](size_t i) { return slots_[i].load(std::memory_order_relaxed); };
	// The key's place: after every slot whose key's home is not after its
	// own (those of the same key included, so equal keys keep their order).
	size_t i = home(key), d = 0;
	for (uint64_t w; (w = at(i)) != 0 && true_dist(i, w) >= d; i = (i + 1) & mask_)
		d++;
	// Make room by moving the rest of the run one slot on, from its far
	// end back: a lookup reads forward, so it meets each moved slot at its
	// old place or its new one (it reads the new one after the old one
	// was overwritten: release stores, acquire loads), and the run stays
	// in Robin Hood order at every step.
	size_t end = i;
	while (at(end) != 0)
		end = (end + 1) & mask_;
	for (size_t j = end; j != i; j = (j - 1) & mask_) {
		const size_t from = (j - 1) & mask_;
		const uint64_t w = at(from);
		slots_[j].store(with_dist(w, true_dist(from, w) + 1), std::memory_order_release);
	}
	slots_[i].store(with_dist(slot, d), std::memory_order_release);
	used_++;
}

void RangeIndex::erase_slot(uint64_t slot)
{
	auto at = [this](size_t i) { return slots_[i].load(std::memory_order_relaxed); };
	const uint64_t key = slot_key(slot);
	size_t i = home(key);
	for (size_t d = 0;; d++, i = (i + 1) & mask_) {
		const uint64_t w = at(i);
		if (ends_probe(w, d))
			return; // not filed: nothing to do
		if ((w & ~(kDistMax << kDistShift)) == slot)
			break;
	}
	// Backward-shift deletion (readers are excluded): pull the rest of the
	// run one slot back, up to a slot at its home or an empty one, so that
	// lookups never need tombstones.
	size_t hole = i;
	for (size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
		const uint64_t w = at(j);
		if (w == 0 || slot_dist(w) == 0)
			break;
		slots_[hole].store(with_dist(w, true_dist(j, w) - 1), std::memory_order_relaxed);
		hole = j;
	}
	slots_[hole].store(0, std::memory_order_relaxed);
	used_--;
}

void RangeIndex::grow()
{
	BigArray old_table = std::move(table_);
	const Slot *old = slots_;
	const size_t old_capacity = capacity_;
	alloc_table(old_capacity * 2);
	for (size_t i = 0; i < old_capacity; i++) {
		const uint64_t w = old[i].load(std::memory_order_relaxed);
		if (w != 0)
			put_slot(slot_key(w), w);
	}
}

size_t RangeIndex::slots_read_by_miss(uintptr_t s, uintptr_t e) const
{
	size_t read = 0;
	uint32_t levels = level_mask_.load(std::memory_order_relaxed) &
			  ~((uint32_t(1) << level_of(e - s)) - 1);
	while (levels) {
		const unsigned level = unsigned(__builtin_ctz(levels));
		levels &= levels - 1;
		size_t i = home(make_key(level, s >> shift_of(level)));
		for (size_t d = 0;; d++, i = (i + 1) & mask_) {
			read++;
			if (ends_probe(slots_[i].load(std::memory_order_relaxed), d))
				break;
		}
	}
	return read;
}

} // namespace mrn

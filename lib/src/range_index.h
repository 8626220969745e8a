// SPDX-License-Identifier: BSD-3-Clause
//
// The cache's index: which entries cover an address range. An entry of
// length L lives at the level whose chunk size C (a page times 4^level) is
// the smallest with C >= L, so it spans one or two chunks there and is
// filed under each in an open-addressing hash table keyed by (level, chunk).
// A lookup probes the chunk of its start address at each populated level
// that can hold an entry long enough: usually one probe and one entry
// touched, whatever the number of entries (a tree or a radix page table
// would walk several levels of cache misses). Overlapping entries are
// allowed. Not thread safe: readers run under the cache's ReaderLock.
#ifndef MRN_RANGE_INDEX_H
#define MRN_RANGE_INDEX_H

#include "big_array.h"
#include "entry.h"

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>

namespace mrn {

class RangeIndex {
public:
	explicit RangeIndex(unsigned page_shift);

	// insert() may run while readers look up (it publishes each slot
	// last), provided the table has room: when insert_needs_growth(), call
	// grow() first with readers excluded. erase(), grow() and clear() need
	// readers excluded.
	void insert(Entry *e);
	bool insert_needs_growth() const { return (used_ + 2) * 4 > capacity_ * 3; }
	void grow();
	void erase(Entry *e);
	size_t size() const { return entries_; }
	size_t bytes() const { return capacity_ * sizeof(Slot); }
	void clear();

	// First entry that covers [s, e) and satisfies ok(entry).
	template <typename Pred> Entry *find_covering(uintptr_t s, uintptr_t e, Pred ok) const;

	// Calls fn(entry) once for each entry that overlaps [s, e).
	template <typename Fn> void for_each_overlapping(uintptr_t s, uintptr_t e, Fn fn) const;

	// Calls fn(entry) once for each entry.
	template <typename Fn> void for_each(Fn fn) const;

	// The level for entries of len bytes: the smallest whose chunk (a page
	// times 4^level) holds len. Public for tests.
	unsigned level_of(size_t len) const
	{
		if (len <= (size_t(1) << page_shift_))
			return 0;
		const unsigned bits = 64 - unsigned(__builtin_clzl(len - 1)); // ceil(log2 len)
		const unsigned level = (bits - page_shift_ + 1) / 2;
		return level < kLevels ? level : kLevels - 1;
	}
	unsigned shift_of(unsigned level) const { return page_shift_ + 2 * level; }

private:
	static constexpr unsigned kLevels = 26;
	struct Slot {
		std::atomic<uint64_t> key; // 0: empty; published last
		std::atomic<Entry *> entry;
	};

	static uint64_t make_key(unsigned level, uint64_t chunk)
	{
		return (uint64_t(level) + 1) << 56 | chunk;
	}
	static unsigned key_level(uint64_t key) { return unsigned(key >> 56) - 1; }
	// Neighbouring chunks stay neighbours in blocks of kBlock slots: a walk
	// through adjacent buffers reads the table as a stream the hardware
	// prefetches (64-slot blocks, 1 KiB, were too short for that: a walk
	// through a million adjacent entries then missed on nearly every line).
	// The blocks themselves are scattered by a multiplicative hash, so
	// regular strides do not pile up.
	static constexpr unsigned kBlockBits = 10;
	size_t home(uint64_t key) const
	{
		const uint64_t block = (key >> kBlockBits) * UINT64_C(0x9E3779B97F4A7C15);
		return size_t(((block >> hash_shift_) << kBlockBits |
			       (key & ((uint64_t(1) << kBlockBits) - 1))) &
			      mask_);
	}
	void put_slot(uint64_t key, Entry *e);
	void erase_slot(uint64_t key, Entry *e);
	void alloc_table(size_t capacity);
	// Chunks of e at its level: first and last (equal for a one-chunk entry).
	void chunks_of(const Entry *e, unsigned level, uint64_t &c0, uint64_t &c1) const
	{
		c0 = e->start >> shift_of(level);
		c1 = (e->end - 1) >> shift_of(level);
	}

	unsigned page_shift_;
	BigArray table_;
	Slot *slots_ = nullptr;
	size_t capacity_ = 0;
	size_t mask_ = 0;
	unsigned hash_shift_ = 64;
	size_t used_ = 0;
	size_t entries_ = 0;
	size_t level_count_[kLevels] = {};
	std::atomic<uint32_t> level_mask_{0}; // bit k: level k has entries
};

template <typename Pred>
Entry *RangeIndex::find_covering(uintptr_t s, uintptr_t e, Pred ok) const
{
	uint32_t levels = level_mask_.load(std::memory_order_acquire) &
			  ~((uint32_t(1) << level_of(e - s)) - 1);
	while (levels) {
		const unsigned level = unsigned(__builtin_ctz(levels));
		levels &= levels - 1;
		const uint64_t key = make_key(level, s >> shift_of(level));
		for (size_t i = home(key);; i = (i + 1) & mask_) {
			const uint64_t k = slots_[i].key.load(std::memory_order_acquire);
			if (k == 0)
				break;
			if (k != key)
				continue;
			Entry *x = slots_[i].entry.load(std::memory_order_relaxed);
			if (x->covers(s, e) && ok(x))
				return x;
		}
	}
	return nullptr;
}

template <typename Fn> void RangeIndex::for_each_overlapping(uintptr_t s, uintptr_t e, Fn fn) const
{
	// Probing every chunk of a large range at a fine level could cost more
	// than looking at every slot once: pick the cheaper.
	const uint32_t mask = level_mask_.load(std::memory_order_acquire);
	size_t probes = 0;
	for (unsigned level = 0; level < kLevels; level++)
		if (mask & (uint32_t(1) << level))
			probes += ((e - 1) >> shift_of(level)) - (s >> shift_of(level)) + 1;
	if (probes > capacity_ / 4) {
		for_each([&](Entry *x) {
			if (x->overlaps(s, e))
				fn(x);
		});
		return;
	}
	for (unsigned level = 0; level < kLevels; level++) {
		if (!(mask & (uint32_t(1) << level)))
			continue;
		const uint64_t first = s >> shift_of(level);
		const uint64_t last = (e - 1) >> shift_of(level);
		for (uint64_t c = first; c <= last; c++) {
			const uint64_t key = make_key(level, c);
			for (size_t i = home(key);; i = (i + 1) & mask_) {
				const uint64_t k = slots_[i].key.load(std::memory_order_acquire);
				if (k == 0)
					break;
				Entry *x = slots_[i].entry.load(std::memory_order_relaxed);
				if (k != key || !x->overlaps(s, e))
					continue;
				// An entry filed under two chunks of the range is
				// reported at the first of them only.
				const uint64_t c_entry = x->start >> shift_of(level);
				if (c == (c_entry > first ? c_entry : first))
					fn(x);
			}
		}
	}
}

template <typename Fn> void RangeIndex::for_each(Fn fn) const
{
	for (size_t i = 0; i < capacity_; i++) {
		const uint64_t k = slots_[i].key.load(std::memory_order_acquire);
		if (k == 0)
			continue;
		Entry *x = slots_[i].entry.load(std::memory_order_relaxed);
		// Once per entry: at the chunk of its start.
		if ((k & ((uint64_t(1) << 56) - 1)) == x->start >> shift_of(key_level(k)))
			fn(x);
	}
}

} // namespace mrn

#endif

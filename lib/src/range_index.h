// SPDX-License-Identifier: BSD-3-Clause
//
// The cache's index: which entries cover an address range. An entry of
// length L lives at the level whose chunk size C (a page times 4^level) is
// the smallest with C >= L, so it spans one or two chunks there and is
// filed under each in an open-addressing hash table keyed by (level, chunk),
// with linear probing in Robin Hood order.
// A lookup probes the chunk of its start address at each populated level
// that can hold an entry long enough: usually one probe and one entry
// touched, whatever the number of entries (a tree or a radix page table
// would walk several levels of cache misses). Overlapping entries are
// allowed. Not thread safe: readers run under the cache's ReaderLock.
#ifndef MRN_RANGE_INDEX_H
#define MRN_RANGE_INDEX_H

#include "big_array.h"
#include "compiler.h"
#include "entry.h"

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>

namespace mrn {

class RangeIndex {
public:
	explicit RangeIndex(unsigned page_shift);

	// insert() may run while readers look up (it moves slots so that a
	// probe still meets every key filed before, and publishes the new one
	// last), provided the table has room: when insert_needs_growth(), call
	// grow() first with readers excluded. erase(), grow() and clear() need
	// readers excluded.
	void insert(Entry *e);
	bool insert_needs_growth() const { return (used_ + 2) * 4 > capacity_ * 3; }
	// std::bad_alloc when the larger table cannot be had; the index is
	// then unchanged.
	void grow();
	// With readers excluded: a table at most 1/16 full (it grew for many
	// more entries than it now holds) moves to a quarter of its size, not
	// below the first table's. True if it did. Never throws: a destructor
	// calls it (Cache::Excluded).
	bool shrink_if_sparse() noexcept;
	void erase(Entry *e);
	size_t size() const { return entries_; }
	// Inserts ever made: a writer that saw no entry in a range, and no
	// insert since, knows there is still none there.
	uint64_t inserts() const { return inserts_; }
	size_t bytes() const { return capacity_ * sizeof(Slot); }
	// Entries must come from memory below this address, 16-byte aligned
	// (EntryPool's blocks are): a slot packs the pointer with a key tag.
	static constexpr uintptr_t kAddressLimit = uintptr_t(1) << 48;
	void clear();

	// First entry that covers [s, e) and satisfies ok(entry).
	template <typename Pred>
	MRN_HOT_INLINE Entry *find_covering(uintptr_t s, uintptr_t e, Pred ok) const;

	// Calls fn(entry) once for each entry that overlaps [s, e).
	template <typename Fn>
	void for_each_overlapping(uintptr_t s, uintptr_t e, Fn fn) const;

	// Calls fn(entry) once for each entry.
	template <typename Fn>
	void for_each(Fn fn) const;

	// A clock hand over the table, for eviction: calls fn(entry) for up to
	// max_entries entries from *hand on (wrapping, once round the table at
	// most), each at the slot of its first chunk, until fn returns true,
	// and leaves *hand after the last slot looked at. Bounded by entries,
	// not slots: a table that grew for many entries and lost most of them
	// keeps its size, and a stretch of slots may hold none. Table growth,
	// inserts and erasure move slots, so an entry may be met twice or
	// skipped in one round.
	template <typename Fn>
	void sweep(size_t *hand, size_t max_entries, Fn fn) const;

	// Slots a lookup of [s, e) reads (find_covering with nothing
	// acceptable): what a miss costs, for tests of the table's clustering.
	size_t slots_read_by_miss(uintptr_t s, uintptr_t e) const { return slots_read(s, e, false); }
	// Slots find_covering(s, e, any entry) reads before it returns.
	size_t slots_read_by_hit(uintptr_t s, uintptr_t e) const { return slots_read(s, e, true); }

	// The level for entries of len bytes: the smallest whose chunk (a page
	// times 4^level) holds len. Public for tests.
	MRN_HOT_INLINE unsigned level_of(size_t len) const
	{
		if (len <= page_size_)
			return 0;
		const unsigned bits = 64 - unsigned(__builtin_clzl(len - 1)); // ceil(log2 len)
		const unsigned level = (bits - page_shift_ + 1) / 2;
		return level < kLevels ? level : kLevels - 1;
	}
	MRN_HOT_INLINE unsigned shift_of(unsigned level) const { return page_shift_ + 2 * level; }

private:
	static constexpr unsigned kLevels = 26;
	// One 8-byte word per slot (0: empty), published with one release
	// store: the entry pointer (16-byte aligned, below 2^48) in the top 44
	// bits, then a bit saying the slot files the entry's second chunk, the
	// slot's distance from its key's home (Robin Hood hashing, below), and
	// a 13-bit tag of the key. A lookup compares tags and touches only
	// entries whose tag matches; an entry reached through a colliding tag
	// is still checked to cover the range, so any entry returned is right.
	// Half the size of a key-and-pointer slot: the table of a million
	// entries fits in the last-level cache.
	using Slot = std::atomic<uint64_t>;
	static constexpr unsigned kTagBits = 13;
	static constexpr uint64_t kTagMask = (uint64_t(1) << kTagBits) - 1;
	static constexpr unsigned kDistBits = 6;
	// A distance this large or larger is stored as this: "far, look it up".
	static constexpr uint64_t kDistFar = (uint64_t(1) << kDistBits) - 1;
	static constexpr uint64_t kDistField = kDistFar << kTagBits;
	static constexpr uint64_t kSecondChunk = uint64_t(1) << (kTagBits + kDistBits);
	static constexpr unsigned kPointerShift = kTagBits + kDistBits + 1 - 4;
	static_assert(kTagBits >= 3 && kPointerShift + 48 <= 64, "pointer, flag, distance and tag fit");

	static MRN_HOT_INLINE uint64_t make_key(unsigned level, uint64_t chunk)
	{
		return (uint64_t(level) + 1) << 56 | chunk;
	}
	// The block's hash, which places the key's block (home()) and, from
	// lower bits, makes its tag: one multiply for both.
	static MRN_HOT_INLINE uint64_t block_hash(uint64_t key)
	{
		return (key >> kBlockChunkBits) * UINT64_C(0x9E3779B97F4A7C15);
	}
	static MRN_HOT_INLINE uint64_t tag_of(uint64_t key)
	{
		return ((block_hash(key) >> 20) ^ key) & kTagMask;
	}
	// With distance 0: put_slot() sets it.
	static uint64_t make_slot(Entry *e, bool second, uint64_t key)
	{
		return uint64_t(reinterpret_cast<uintptr_t>(e)) << kPointerShift |
		       (second ? kSecondChunk : 0) | tag_of(key);
	}
	static MRN_HOT_INLINE Entry *slot_entry(uint64_t w)
	{
		return reinterpret_cast<Entry *>(uintptr_t(w >> kPointerShift) & ~uintptr_t(15));
	}
	static bool slot_second(uint64_t w) { return (w & kSecondChunk) != 0; }
	static MRN_HOT_INLINE uint64_t slot_dist(uint64_t w) { return (w & kDistField) >> kTagBits; }
	static uint64_t with_dist(uint64_t w, size_t d)
	{
		return (w & ~kDistField) | (d < kDistFar ? d : kDistFar) << kTagBits;
	}
	// w one slot farther from its home (a far one stays far).
	static uint64_t one_farther(uint64_t w)
	{
		return slot_dist(w) == kDistFar ? w : w + (uint64_t(1) << kTagBits);
	}
	// The key a slot files its entry under (reads the entry).
	uint64_t slot_key(uint64_t w) const
	{
		const Entry *x = slot_entry(w);
		const unsigned level = level_of(x->length());
		uint64_t c0, c1;
		chunks_of(x, level, c0, c1);
		return make_key(level, slot_second(w) ? c1 : c0);
	}
	// Writers: the distance of slot i's word w from its home, exact even
	// when stored as far.
	size_t dist_at(size_t i, uint64_t w) const
	{
		const uint64_t d = slot_dist(w);
		return d < kDistFar ? size_t(d) : (i - home_of_slot(w)) & mask_;
	}
	// Robin Hood hashing: along a run of full slots, keys sit in the order
	// of their homes, each slot knowing its distance from its own (saved
	// as far from kDistFar on: then a probe does not stop there). So a
	// probe stops at the first slot homed after the key's two homes, where
	// plain linear probing went on to the end of the run: through a
	// stretch of adjacent buffers, all filed at their own homes, a miss
	// reads three slots, not the whole stretch.
	// Calls fn(w) for each slot that key's probe reads (w: its word, 0 for
	// an empty one or one homed after the key's), until fn returns true:
	// the key's first-chunk home whatever it holds, then on from its
	// second-chunk home, which follows it, to an empty slot or one homed
	// after it. An empty first home does not end the probe: no key is
	// homed there, but those homed at the next slot start their own run
	// there.
	template <typename Fn>
	MRN_HOT_INLINE void visit(uint64_t key, Fn fn) const
	{
		// In locals: the acquire loads below would make the compiler
		// load the members again on every step (the table changes only
		// with readers excluded).
		const Slot *const slots = slots_;
		const size_t mask = mask_;
		size_t i = home(key, false);
		if (fn(slots[i].load(std::memory_order_acquire)))
			return;
		// The second home: no key there is homed after it.
		i = (i + 1) & mask;
		uint64_t w = slots[i].load(std::memory_order_acquire);
		if (w == 0) {
			fn(w);
			return;
		}
		if (fn(w))
			return;
		// At the slot `dist` on from the first home, one homed after
		// the second has slot_dist(w) < dist - 1, that is a distance
		// field below `after`; so has an empty slot. Not one stored as
		// far, whose home may be anywhere before.
		constexpr uint64_t kDistOne = uint64_t(1) << kTagBits;
		for (uint64_t after = kDistOne;; after += kDistOne) {
			i = (i + 1) & mask;
			w = slots[i].load(std::memory_order_acquire);
			const uint64_t field = w & kDistField;
			if (__builtin_expect(field < after, 0) && field != kDistField) {
				fn(0);
				return;
			}
			if (fn(w))
				return;
		}
	}
	// Calls fn(w) for each slot of key's probe whose tag matches key's
	// (the entry may still be another's: see Slot), until fn returns true.
	template <typename Fn>
	MRN_HOT_INLINE void probe(uint64_t key, Fn fn) const
	{
		const uint64_t tag = tag_of(key);
		visit(key, [&](uint64_t w) MRN_HOT_LAMBDA {
			return (w & kTagMask) == tag && w != 0 && fn(w);
		});
	}
	// Neighbouring chunks stay neighbours in blocks of 32 chunks (64
	// slots, eight cache lines), in order, so that a walk through adjacent
	// buffers reads the table in streams; each block starts at a slot pair
	// of its own, placed by a multiplicative hash (blocks are not aligned:
	// one-page buffers at a power-of-two stride of a block or more, one a
	// block at the same offset in it, would otherwise share one home of
	// every block they land in, 10 slots read a hit where 1.2 are now,
	// BuffersAtPowerOfTwoStridesSpreadOverTheirBlocks). Each chunk has two
	// homes side by side: one for the entries filed under it as their
	// first chunk, one for those that straddle into it from the chunk
	// before. Buffers as long as their level's chunk (64 KiB, 256 KiB...)
	// straddle unless aligned to it, and adjacent ones then file two keys
	// a chunk: with one home a chunk their blocks held twice as many keys
	// as slots, ran into each other, and a hit read 9 slots
	// (AdjacentChunkSizedBuffersAreFoundAtTheirHomes).
	// The block's size trades the walk against misses: a walk leaves a
	// block for a random place in the table every 32 chunks, so larger
	// blocks make sequential hits over many buffers cheaper, while
	// adjacent buffers fill a block's slots and merge its run with its
	// neighbours', so that inserts move longer runs and keys sit farther
	// from their homes. Large blocks without Robin Hood order made a miss
	// among many small adjacent buffers probe thousands of slots. (The
	// measurements of 16, 32 and 64 chunks: bench/records/HISTORY.md.)
	static constexpr unsigned kBlockChunkBits = 5;
	MRN_HOT_INLINE size_t home(uint64_t key, bool second) const
	{
		return size_t((((block_hash(key) >> hash_shift_) +
				(key & ((uint64_t(1) << kBlockChunkBits) - 1))) << 1 |
			       uint64_t(second)) &
			      mask_);
	}
	size_t home_of_slot(uint64_t w) const { return home(slot_key(w), slot_second(w)); }
	static constexpr size_t kFirstCapacity = 1024;
	void rehash(size_t capacity);
	size_t slots_read(uintptr_t s, uintptr_t e, bool until_covering) const;
	void put_slot(uint64_t slot);
	void erase_slot(uint64_t slot);
	void alloc_table(size_t capacity);
	void use_table(BigArray table, size_t capacity);
	// Chunks of e at its level: first and last (equal for a one-chunk entry).
	void chunks_of(const Entry *e, unsigned level, uint64_t &c0, uint64_t &c1) const
	{
		c0 = e->start >> shift_of(level);
		c1 = (e->end - 1) >> shift_of(level);
	}

	// Read by lookups; written only when a level fills or empties, or
	// (the table) with readers excluded.
	unsigned page_shift_;
	unsigned hash_shift_ = 64;
	size_t page_size_;
	Slot *slots_ = nullptr;
	size_t mask_ = 0;
	std::atomic<uint32_t> level_mask_{0}; // bit k: level k has entries

	// Written on every insert and erase, read by writers only: a line
	// apart, so that misses do not steal the lookups' line.
	alignas(64) size_t used_ = 0;
	size_t entries_ = 0;
	size_t capacity_ = 0;
	uint64_t inserts_ = 0;
	size_t level_count_[kLevels] = {};
	BigArray table_;
};

template <typename Pred>
MRN_HOT_INLINE Entry *RangeIndex::find_covering(uintptr_t s, uintptr_t e, Pred ok) const
{
	uint32_t levels = level_mask_.load(std::memory_order_acquire) &
			  ~((uint32_t(1) << level_of(e - s)) - 1);
	while (levels) {
		const unsigned level = unsigned(__builtin_ctz(levels));
		levels &= levels - 1;
		Entry *found = nullptr;
		probe(make_key(level, s >> shift_of(level)), [&](uint64_t w) {
			Entry *x = slot_entry(w);
			if (!x->covers(s, e) || !ok(x))
				return false;
			found = x;
			return true;
		});
		if (found)
			return found;
	}
	return nullptr;
}

template <typename Fn>
void RangeIndex::for_each_overlapping(uintptr_t s, uintptr_t e, Fn fn) const
{
	// Probing every chunk of a large range at a fine level could cost more
	// than looking at every slot once: pick the cheaper.
	// Populated levels only (a miss among one-page buffers spent 200 of
	// its 360 instructions here stepping through all 26).
	const uint32_t mask = level_mask_.load(std::memory_order_acquire);
	size_t probes = 0;
	for (uint32_t levels = mask; levels; levels &= levels - 1) {
		const unsigned level = unsigned(__builtin_ctz(levels));
		probes += ((e - 1) >> shift_of(level)) - (s >> shift_of(level)) + 1;
	}
	if (probes > capacity_ / 4) {
		for_each([&](Entry *x) {
			if (x->overlaps(s, e))
				fn(x);
		});
		return;
	}
	for (uint32_t levels = mask; levels; levels &= levels - 1) {
		const unsigned level = unsigned(__builtin_ctz(levels));
		const uint64_t first = s >> shift_of(level);
		const uint64_t last = (e - 1) >> shift_of(level);
		for (uint64_t c = first; c <= last; c++) {
			const uint64_t key = make_key(level, c);
			probe(key, [&](uint64_t w) {
				Entry *x = slot_entry(w);
				// The exact key: an entry met through a colliding
				// tag must not be reported twice.
				if (!x->overlaps(s, e) || slot_key(w) != key)
					return false;
				// An entry filed under two chunks of the range is
				// reported at the first of them only.
				const uint64_t c_entry = x->start >> shift_of(level);
				if (c == (c_entry > first ? c_entry : first))
					fn(x);
				return false;
			});
		}
	}
}

template <typename Fn>
void RangeIndex::sweep(size_t *hand, size_t max_entries, Fn fn) const
{
	size_t i = *hand & mask_, met = 0;
	for (size_t k = 0; k < capacity_ && met < max_entries; k++) {
		const uint64_t w = slots_[i].load(std::memory_order_acquire);
		i = (i + 1) & mask_;
		if (w != 0 && !slot_second(w)) {
			met++;
			if (fn(slot_entry(w)))
				break;
		}
	}
	*hand = i;
}

template <typename Fn>
void RangeIndex::for_each(Fn fn) const
{
	for (size_t i = 0; i < capacity_; i++) {
		const uint64_t w = slots_[i].load(std::memory_order_acquire);
		// Once per entry: at the chunk of its start.
		if (w != 0 && !slot_second(w))
			fn(slot_entry(w));
	}
}

} // namespace mrn

#endif

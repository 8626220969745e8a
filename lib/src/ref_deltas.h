// SPDX-License-Identifier: BSD-3-Clause
//
// Per-thread reference deltas (after RadixVM's Refcache), so that a hit and
// its put write only the hitting thread's own memory: two threads hitting
// the same entries then share the entries' cache lines read-only instead of
// passing them back and forth with a locked add and subtract each.
//
// An entry's reference count is its atomic `refs` plus the deltas that the
// threads' slots hold for it. Each thread (reader record) has a small
// direct-mapped table of slots {entry, delta, stamp} per cache; a get adds
// 1 and a put subtracts 1 in the slot the entry hashes to, with plain
// (relaxed) loads and stores. A slot that holds another entry's nonzero
// delta is not taken: that get or put uses `refs`, as does every section
// nested in another on the same thread (a signal handler's: it could
// interrupt the thread's own update of the slot), a thread beyond the
// record table, and every put of an entry out of the index. Which slot, or
// `refs`, a get and its put use need not agree: only the sum means anything,
// and a put from another thread than the get is just a -1 elsewhere.
//
// Exactness. Slots change only inside a read section of the cache, so with
// readers excluded (a writer) they stand still and the sum is exact. An
// entry leaves the index only with readers excluded, and fold() then moves
// its deltas into `refs` and empties its slots: from then on its count is
// `refs` alone, which puts of entries out of the index use, so the last put
// of a detached entry still sees its count reach 0. Outside exclusion the
// sum is a guess, good enough to pick eviction candidates, which are checked
// again with readers out.
//
// LRU stamps. A put through a slot stamps the slot, not the entry; the
// entry's last use is the newest of its own stamp and its slots'. A slot
// taken over by another entry writes its stamp back to the entry it held
// (alive: entries in slots are in the index) only when the LRU tick has moved
// since the entry's own stamp, so that a steady stream of hits writes
// nothing shared; within one tick such an entry may look older than it is.
//
// Threads that exit leave their slots to the next thread given their reader
// record: deltas belong to no thread, only to the sum. A forked child
// clears every slot (the parent's entries are forgotten).
#ifndef MRN_REF_DELTAS_H
#define MRN_REF_DELTAS_H

#include "big_array.h"
#include "compiler.h"
#include "entry.h"
#include "reader_lock.h"

#include <atomic>
#include <cstdint>

namespace mrn {

class RefDeltas {
public:
	// 4 KiB a thread and cache: fewer slots thrashed between the entries
	// of a working set of 64 buffers in random order (capi_bench --only
	// sizes under cachegrind --branch-sim=yes: 64 slots with a multiplied
	// hash mispredicted 67,528 branches in 80,000 get + put, 256 slots
	// indexed by block number 69).
	static constexpr unsigned kSlotBits = 8;
	static constexpr unsigned kSlotsPerThread = 1u << kSlotBits;
	// LRU stamps carry the tick above this many bits (Cache::lru_stamp).
	static constexpr unsigned kSequenceBits = 12;

	struct Slot {
		std::atomic<Entry *> entry;
		std::atomic<int32_t> delta;
		std::atomic<uint32_t> stamp;
	};

	// Address space for every reader record's table (256 x 256 x 16
	// bytes); pages are touched only by the threads that use them.
	// Entries are EntryPool blocks of block_size bytes.
	explicit RefDeltas(size_t block_size)
	    : block_shift_(unsigned(__builtin_ctzl(block_size))),
	      table_(sizeof(Slot) * kSlotsPerThread * kMaxReaderRecords)
	{
	}
	RefDeltas(const RefDeltas &) = delete;
	RefDeltas &operator=(const RefDeltas &) = delete;

	// A reference taken (d = 1) through the slot of record idx, in the
	// thread's outermost read section; false: use refs.
	MRN_HOT_INLINE bool get(unsigned idx, Entry *x)
	{
		Slot *s = claim(idx, x);
		if (!s)
			return false;
		s->delta.store(s->delta.load(std::memory_order_relaxed) + 1,
			       std::memory_order_relaxed);
		return true;
	}
	// A reference dropped, with its LRU stamp; false: use refs.
	MRN_HOT_INLINE bool put(unsigned idx, Entry *x, uint32_t stamp)
	{
		Slot *s = claim(idx, x);
		if (!s)
			return false;
		s->delta.store(s->delta.load(std::memory_order_relaxed) - 1,
			       std::memory_order_relaxed);
		s->stamp.store(stamp, std::memory_order_relaxed);
		return true;
	}

	// Writers. The count the slots hold for x (exact with readers
	// excluded), and its youngest age (now - stamp) among them and `age`.
	int32_t sum(const Entry *x) const;
	uint32_t youngest_age(const Entry *x, uint32_t now, uint32_t age) const;
	// With readers excluded: x's deltas into x->refs, its stamp into
	// x->last_use, and its slots emptied.
	void fold(Entry *x);
	// A forked child (writer): every slot emptied.
	void clear();

private:
	MRN_HOT_INLINE unsigned hash(const Entry *x) const
	{
		// Entries are pool blocks of a fixed size, b times a power of
		// two with b odd, and the ones in use together were mostly
		// allocated together: their addresses over that power of two
		// are consecutive multiples of b, which any kSlotsPerThread in a
		// row take distinct slots (b is odd). A multiplied hash would
		// put two of 64 such entries in one slot about a third of the time.
		return unsigned(uintptr_t(x) >> block_shift_) & (kSlotsPerThread - 1);
	}
	MRN_HOT_INLINE Slot &slot(unsigned idx, const Entry *x) const
	{
		return static_cast<Slot *>(table_.data())[idx * kSlotsPerThread + hash(x)];
	}
	// x's slot in record idx's table, taken over if it holds another
	// entry whose delta is 0; nullptr if that delta is not 0.
	MRN_HOT_INLINE Slot *claim(unsigned idx, Entry *x)
	{
		Slot &s = slot(idx, x);
		Entry *held = s.entry.load(std::memory_order_relaxed);
		if (__builtin_expect(held == x, 1))
			return &s;
		if (s.delta.load(std::memory_order_relaxed) != 0)
			return nullptr;
		if (held)
			write_back(s, held);
		s.entry.store(x, std::memory_order_relaxed);
		s.stamp.store(x->last_use.load(std::memory_order_relaxed),
			      std::memory_order_relaxed);
		return &s;
	}
	static void write_back(Slot &s, Entry *held)
	{
		const uint32_t st = s.stamp.load(std::memory_order_relaxed);
		const uint32_t cur = held->last_use.load(std::memory_order_relaxed);
		if ((st >> kSequenceBits) != (cur >> kSequenceBits) && int32_t(st - cur) > 0)
			held->last_use.store(st, std::memory_order_relaxed);
	}

	unsigned block_shift_;
	BigArray table_;
};

} // namespace mrn

#endif

// SPDX-License-Identifier: BSD-3-Clause
//
// Reference counts kept partly as per-thread deltas (lib/src/ref_deltas.h,
// #26): a hit and its put write only the thread's own slot, so a put made
// by another thread than the get, a thread that exits holding references,
// and an entry that leaves the index while threads hold it must all still
// add up: idle exactly when nobody holds it, deregistered exactly at the
// last put.
#include "cache_fixture.h"
#include "entry_pool.h"
#include "reader_lock.h"
#include "ref_deltas.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace mrn::test {
namespace {

template <typename Fn>
void in_thread(Fn fn)
{
	std::thread(fn).join();
}

TEST_F(CacheTest, PutFromAnotherThreadThanTheGetIsCounted)
{
	make();
	cache->put(get(3, page())); // the miss: registered, idle
	Entry *x = nullptr;
	in_thread([&] { x = get(3, page()); }); // a hit: +1 in that thread's slot
	ASSERT_NE(nullptr, x);
	EXPECT_EQ(1u, regs.registered);
	EXPECT_EQ(0u, stats().idle_entries) << "held by the other thread";
	EXPECT_EQ(0, cache->flush()) << "an entry in use was dropped";
	in_thread([&] { cache->put(x); }); // -1 in a third thread's slot
	EXPECT_EQ(1u, stats().idle_entries);
	EXPECT_EQ(1, cache->flush());
	EXPECT_EQ(1u, regs.deregistered);
}

TEST_F(CacheTest, ThreadThatExitsHoldingAReferenceLeavesItCounted)
{
	make();
	cache->put(get(5, page()));
	Entry *x = nullptr, *y = nullptr;
	in_thread([&] {
		x = get(5, page());
		y = get(5, page());
	});
	// Its reader record (and slots) go to the next thread, which hits
	// and puts the same entry: the sum must stay 2 held.
	in_thread([&] { cache->put(get(5, page())); });
	EXPECT_EQ(0, cache->flush());
	cache->put(x);
	EXPECT_EQ(0, cache->flush());
	cache->put(y);
	EXPECT_EQ(1, cache->flush());
	EXPECT_EQ(1u, regs.deregistered);
}

TEST_F(CacheTest, EntryInvalidatedWhileHeldThroughDeltasDiesAtItsLastPut)
{
	make();
	cache->put(get(7, page()));
	Entry *a = nullptr, *b = nullptr;
	in_thread([&] {
		a = get(7, page());
		b = get(7, page());
	});
	// Out of the index: the threads' deltas move into its count.
	mon->unmap(addr(7), addr(8));
	Entry *fresh = get(7, page());
	EXPECT_NE(a, fresh);
	EXPECT_EQ(1u, stats().in_use_detached);
	in_thread([&] { cache->put(a); });
	EXPECT_EQ(0u, regs.deregistered) << "deregistered with one user left";
	cache->put(b);
	EXPECT_EQ(1u, regs.deregistered);
	EXPECT_EQ(0u, stats().in_use_detached);
	cache->put(fresh);
}

TEST_F(CacheTest, ManyEntriesSharingSlotsAddUp)
{
	// More entries than a thread has slots: some hits and puts find their
	// slot taken and use the entry's atomic count; others take the slot
	// over. Held across threads in every order, everything must end idle.
	make();
	constexpr size_t kEntries = 300;
	for (size_t i = 0; i < kEntries; i++)
		cache->put(get(2 * i, page()));
	std::vector<Entry *> held(kEntries);
	in_thread([&] {
		for (size_t i = 0; i < kEntries; i++)
			held[i] = get(2 * i, page());
	});
	EXPECT_EQ(0, cache->flush());
	in_thread([&] {
		for (size_t i = 0; i < kEntries; i += 2)
			cache->put(held[i]);
	});
	for (size_t i = 1; i < kEntries; i += 2)
		cache->put(held[i]);
	EXPECT_EQ(kEntries, regs.registered);
	EXPECT_EQ(long(kEntries), cache->flush());
	EXPECT_EQ(kEntries, regs.deregistered);
}

// A hit or put inside another read section of the same thread (as a signal
// handler's would be: the record is shared by every cache) takes the out of
// line path and the entry's atomic count, not the thread's slot; mixed with
// the inline path's slot updates, the count must still add up.
TEST_F(CacheTest, HitsAndPutsNestedInAnotherSectionAreCounted)
{
	make();
	Entry *first = get(9, page());
	cache->put(first);
	// The atomic count's part; the thread's slot holds the rest.
	const uint32_t refs = first->refs.load();
	const uint64_t hits = stats().hits;
	CacheLock other;
	Entry *a = nullptr, *b = nullptr;
	{
		SharedGuard outer(other);
		a = get(9, page()); // nested: the atomic count
	}
	ASSERT_NE(nullptr, a);
	EXPECT_EQ(refs + 1, a->refs.load()) << "a nested hit used the thread's slot";
	b = get(9, page()); // outermost: the slot
	ASSERT_EQ(a, b);
	EXPECT_EQ(refs + 1, a->refs.load()) << "an outermost hit did not use its slot";
	EXPECT_EQ(hits + 2, stats().hits);
	{
		SharedGuard outer(other);
		cache->put(b); // nested: the atomic count
	}
	EXPECT_EQ(refs, a->refs.load()) << "a nested put used the thread's slot";
	EXPECT_EQ(0, cache->flush()) << "an entry in use was dropped";
	cache->put(a); // outermost: the slot
	EXPECT_EQ(1, cache->flush());
	EXPECT_EQ(1u, regs.deregistered);
}

// Threads beyond the reader records share the overflow record and hit
// counter, and use the entries' atomic counts.
TEST_F(CacheTest, ThreadsBeyondTheRecordsHitAndPutRight)
{
	make();
	cache->put(get(11, page()));
	const uint64_t hits = stats().hits;
	// Every record taken by a thread that waits.
	std::mutex m;
	std::condition_variable cv;
	bool release = false;
	unsigned parked = 0;
	std::vector<std::thread> holders;
	for (unsigned i = 0; i < kMaxReaderRecords; i++)
		holders.emplace_back([&] {
			cache->put(get(11, page()));
			std::unique_lock<std::mutex> l(m);
			parked++;
			cv.notify_all();
			cv.wait(l, [&] { return release; });
		});
	{
		std::unique_lock<std::mutex> l(m);
		cv.wait(l, [&] { return parked == kMaxReaderRecords; });
	}
	Entry *x = nullptr;
	unsigned index = 0;
	in_thread([&] {
		x = get(11, page());
		index = ReaderRecords::my_index();
	});
	EXPECT_EQ(kMaxReaderRecords, index) << "the thread had a record of its own";
	EXPECT_EQ(0, cache->flush()) << "an entry in use was dropped";
	in_thread([&] { cache->put(x); });
	{
		std::lock_guard<std::mutex> l(m);
		release = true;
	}
	cv.notify_all();
	for (auto &t : holders)
		t.join();
	EXPECT_EQ(hits + kMaxReaderRecords + 1, stats().hits);
	EXPECT_EQ(1, cache->flush());
	EXPECT_EQ(1u, regs.deregistered);
}

// A working set of entries allocated together (the buffers a program
// registers at start, capi_bench's "sizes") takes one slot each: with a
// multiplied address hash about a third of 64 such entries shared a slot,
// and every hit on them took a mispredicted branch and the atomic count.
TEST(RefDeltas, EntriesAllocatedTogetherTakeSlotsOfTheirOwn)
{
	for (size_t payload : {size_t(8), size_t(24), size_t(200)}) {
		EntryPool pool(payload);
		RefDeltas deltas(pool.block_size());
		std::vector<Entry *> entries;
		for (unsigned i = 0; i <= RefDeltas::kSlotsPerThread; i++)
			entries.push_back(pool.allocate());
		for (unsigned i = 0; i < RefDeltas::kSlotsPerThread; i++)
			EXPECT_TRUE(deltas.get(0, entries[i])) << "entry " << i << ", payload " << payload;
		// One more than the slots: it meets the first entry's delta.
		EXPECT_FALSE(deltas.get(0, entries.back())) << "payload " << payload;
		for (unsigned i = 0; i < RefDeltas::kSlotsPerThread; i++)
			EXPECT_TRUE(deltas.put(0, entries[i], 0));
		for (Entry *x : entries)
			pool.release(x);
	}
}

} // namespace
} // namespace mrn::test

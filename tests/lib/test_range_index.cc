// SPDX-License-Identifier: BSD-3-Clause
// The index against brute force: random inserts, erases, lookups and
// overlap queries over entries of many sizes.
#include "entry_pool.h"
#include "range_index.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <new>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace mrn {
namespace {

constexpr unsigned kShift = 12;
constexpr uintptr_t kPage = uintptr_t(1) << kShift;

TEST(RangeIndex, LevelOfLength)
{
	RangeIndex ix(kShift);
	EXPECT_EQ(0u, ix.level_of(kPage));
	EXPECT_EQ(1u, ix.level_of(kPage + 1));
	EXPECT_EQ(1u, ix.level_of(4 * kPage));
	EXPECT_EQ(2u, ix.level_of(4 * kPage + 1));
	EXPECT_EQ(2u, ix.level_of(16 * kPage));
}

// Random inserts, erases, lookups and overlap queries, checked against the
// live entries: starts on `starts` pages, lengths up to 2^max_log pages.
void agree_with_brute_force(unsigned seed, uintptr_t starts, unsigned max_log)
{
	std::mt19937_64 rng(seed);
	RangeIndex ix(kShift);
	EntryPool pool(0);
	std::vector<Entry *> live;
	const uintptr_t base = uintptr_t(1) << 40;
	auto random_range = [&](uintptr_t &s, uintptr_t &e) {
		const uintptr_t first = rng() % starts;
		// Lengths log-uniform.
		const uintptr_t pages = uintptr_t(1) << (rng() % (max_log + 1));
		s = base + first * kPage;
		e = s + (1 + rng() % pages) * kPage;
	};
	for (int step = 0; step < 20000; step++) {
		const unsigned op = unsigned(rng() % 10);
		if (op < 4 || live.empty()) {
			Entry *x = pool.allocate();
			random_range(x->start, x->end);
			ix.insert(x);
			live.push_back(x);
			if (ix.insert_needs_growth())
				ix.grow();
		} else if (op < 6) {
			const size_t i = rng() % live.size();
			ix.erase(live[i]);
			pool.release(live[i]);
			live[i] = live.back();
			live.pop_back();
		} else if (op < 8) {
			uintptr_t s, e;
			random_range(s, e);
			const bool expect = std::any_of(live.begin(), live.end(),
							[&](Entry *x) { return x->covers(s, e); });
			Entry *found = ix.find_covering(s, e, [](const Entry *) { return true; });
			ASSERT_EQ(expect, found != nullptr) << "step " << step;
			if (found) {
				ASSERT_TRUE(found->covers(s, e));
			}
		} else {
			uintptr_t s, e;
			random_range(s, e);
			std::multiset<Entry *> want, got;
			for (Entry *x : live)
				if (x->overlaps(s, e))
					want.insert(x);
			ix.for_each_overlapping(s, e, [&](Entry *x) { got.insert(x); });
			ASSERT_EQ(want, got) << "step " << step;
		}
		ASSERT_EQ(live.size(), ix.size());
	}
	std::multiset<Entry *> all;
	ix.for_each([&](Entry *x) { all.insert(x); });
	EXPECT_EQ(std::multiset<Entry *>(live.begin(), live.end()), all);
}

class RangeIndexRandom : public ::testing::TestWithParam<unsigned> {};

TEST_P(RangeIndexRandom, AgreesWithBruteForce)
{
	agree_with_brute_force(GetParam(), 4096, 14);
}

// Thousands of entries on a few keys (overlapping entries may share their
// range): runs of hundreds of slots, whose keys sit farther from their
// homes than a slot can say, and erasures that pull such runs back.
TEST_P(RangeIndexRandom, CrowdedAgreesWithBruteForce)
{
	agree_with_brute_force(GetParam(), 8, 2);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RangeIndexRandom, ::testing::Values(1u, 2u, 3u, 4u));

// A table that grew for many entries and lost most of them shrinks (with
// readers excluded, as the cache calls it), and every entry left is still
// found, by lookup and by overlap.
TEST(RangeIndex, SparseTableShrinksAndKeepsItsEntries)
{
	std::mt19937_64 rng(11);
	RangeIndex ix(kShift);
	EntryPool pool(0);
	std::vector<Entry *> live;
	const uintptr_t base = uintptr_t(1) << 40;
	const size_t first_bytes = ix.bytes();
	for (size_t i = 0; i < 6000; i++) {
		Entry *x = pool.allocate();
		x->start = base + (rng() % 100000) * kPage;
		x->end = x->start + (1 + rng() % 8) * kPage;
		if (ix.insert_needs_growth())
			ix.grow();
		ix.insert(x);
		live.push_back(x);
	}
	const size_t grown_bytes = ix.bytes();
	ASSERT_GT(grown_bytes, first_bytes);
	EXPECT_FALSE(ix.shrink_if_sparse()) << "shrank a full table";
	while (live.size() > 40) {
		ix.erase(live.back());
		pool.release(live.back());
		live.pop_back();
	}
	EXPECT_TRUE(ix.shrink_if_sparse());
	EXPECT_LT(ix.bytes(), grown_bytes);
	while (ix.shrink_if_sparse()) {
	}
	EXPECT_EQ(first_bytes, ix.bytes()) << "not down to the first table";
	ASSERT_EQ(live.size(), ix.size());
	for (Entry *x : live) {
		EXPECT_NE(nullptr, ix.find_covering(x->start, x->end,
						    [x](const Entry *c) { return c == x; }));
		bool met = false;
		ix.for_each_overlapping(x->start, x->end, [&](Entry *y) { met |= y == x; });
		EXPECT_TRUE(met);
	}
	std::multiset<Entry *> all;
	ix.for_each([&](Entry *x) { all.insert(x); });
	EXPECT_EQ(std::multiset<Entry *>(live.begin(), live.end()), all);
	for (Entry *x : live)
		pool.release(x);
}

// A table that cannot be had (the address space is full) leaves the index
// as it was: growth reports std::bad_alloc and every entry is still found;
// shrinking, which a destructor calls, reports nothing and keeps the larger
// table. Run in a child whose address space is capped just above its use.
TEST(RangeIndex, TableThatCannotBeHadLeavesTheIndexIntact)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	GTEST_SKIP() << "the sanitizers reserve address space that RLIMIT_AS would cut";
#else
	const uintptr_t base = uintptr_t(1) << 40;
	RangeIndex ix(kShift);
	EntryPool pool(0);
	std::vector<Entry *> live;
	// Grown to 2^18 slots (2 MiB): the next table needs 4 MiB more.
	while (ix.bytes() < (size_t(2) << 20) || !ix.insert_needs_growth()) {
		if (ix.insert_needs_growth())
			ix.grow();
		Entry *x = pool.allocate();
		x->start = base + live.size() * 2 * kPage;
		x->end = x->start + kPage;
		ix.insert(x);
		live.push_back(x);
	}
	auto all_found = [&] {
		for (Entry *x : live)
			if (!ix.find_covering(x->start, x->end, [x](const Entry *c) { return c == x; }))
				return false;
		return ix.size() == live.size();
	};
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		long pages = 0;
		FILE *f = std::fopen("/proc/self/statm", "r");
		if (!f || std::fscanf(f, "%ld", &pages) != 1)
			_exit(2);
		std::fclose(f);
		const rlim_t cap = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(1) << 20);
		struct rlimit rl;
		if (getrlimit(RLIMIT_AS, &rl) != 0)
			_exit(2);
		rl.rlim_cur = cap;
		if (setrlimit(RLIMIT_AS, &rl) != 0)
			_exit(2);
		const size_t before = ix.bytes();
		bool threw = false;
		try {
			ix.grow();
		} catch (const std::bad_alloc &) {
			threw = true;
		}
		if (!threw)
			_exit(3); // the cap did not bite: nothing shown
		if (ix.bytes() != before || !all_found())
			_exit(4);
		// Most entries gone: a shrink is due, and its table (1 MiB) is
		// refused too.
		rl.rlim_cur = cap - (rlim_t(1) << 20);
		if (setrlimit(RLIMIT_AS, &rl) != 0)
			_exit(2);
		while (live.size() > 100) {
			ix.erase(live.back());
			live.pop_back();
		}
		if (ix.shrink_if_sparse() || ix.bytes() != before || !all_found())
			_exit(5);
		_exit(0);
	}
	int status = 0;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
	EXPECT_EQ(0, WEXITSTATUS(status))
		<< "2: no cap could be set; 3: growth did not fail; 4: a failed growth changed "
		   "the index; 5: a failed shrink changed it";
	for (Entry *x : live)
		pool.release(x);
#endif
}

// Many small adjacent buffers (MPI messages malloc'ed one after another) and
// a few large ones: a lookup of a new buffer must end after a few slots.
// Linear probing walks to the end of a run of full slots, and adjacent
// buffers fill runs of adjacent slots. Slots read per miss here, mean and
// worst, by locality block: 1024 slots 129 and 2363; 64: 46 and 240; 16
// with one home a chunk: 17 and 74; 16 chunks with two homes each: 15 and
// 80, with blocks that start at any slot pair 14 and 85. With runs in the
// order of their homes, where a probe stops at the first key homed after
// its own (Robin Hood): 16 chunks 7.8 and 17, 32 (the table's) 8.5 and 19,
// 64 9.2 and 23. None (every key hashed, plain linear probing): 8 and 41.
TEST(RangeIndex, MissesAmongAdjacentSmallBuffersReadFewSlots)
{
	std::mt19937_64 rng(5);
	RangeIndex ix(kShift);
	EntryPool pool(0);
	const uintptr_t base = uintptr_t(1) << 40, stride = 16 * kPage;
	const size_t buffers = 40000;
	auto add = [&](uintptr_t s, uintptr_t len) {
		Entry *x = pool.allocate();
		x->start = s;
		x->end = s + len;
		if (ix.insert_needs_growth())
			ix.grow();
		ix.insert(x);
	};
	for (int i = 0; i < 4; i++)
		add(base - (uintptr_t(i) + 1) * (uintptr_t(8) << 20), uintptr_t(4) << 20);
	for (size_t i = 0; i < buffers; i++)
		add(base + i * stride, kPage * (1 + rng() % 16));
	size_t total = 0, worst = 0;
	const size_t lookups = 4000;
	for (size_t i = 0; i < lookups; i++) {
		// New buffers after the last, and holes between old ones.
		const uintptr_t s = i % 2 ? base + (buffers + i) * stride
					  : base + (rng() % buffers) * stride + stride / 2 + kPage;
		const uintptr_t len = kPage * (1 + rng() % 4);
		const size_t read = ix.slots_read_by_miss(s, s + len);
		total += read;
		worst = std::max(worst, read);
	}
	RecordProperty("mean_slots", std::to_string(double(total) / lookups));
	RecordProperty("worst_slots", std::to_string(worst));
	EXPECT_LT(double(total) / lookups, 11.0);
	EXPECT_LT(worst, 40u);
}

// Buffers whose length is their level's chunk size (64 KiB, 256 KiB,
// 1 MiB...) straddle two chunks unless aligned to it, as malloc'ed ones are
// not, and adjacent ones then file two keys under every chunk: the second
// chunk of one and the first of the next. Each has a home of its own, so a
// hit reads one slot. With one home a chunk, the blocks of such buffers
// held twice as many keys as slots and each ran into the next: 9.25 slots
// a hit here.
// And an entry is found from its second chunk where no entry starts, when
// its first home is empty.
TEST(RangeIndex, AdjacentChunkSizedBuffersAreFoundAtTheirHomes)
{
	RangeIndex ix(kShift);
	EntryPool pool(0);
	const uintptr_t chunk = 16 * kPage; // level 2
	const uintptr_t base = (uintptr_t(1) << 40) + kPage;
	const size_t buffers = 64;
	for (size_t i = 0; i < buffers; i++) {
		Entry *x = pool.allocate();
		x->start = base + i * chunk;
		x->end = x->start + chunk;
		ASSERT_EQ(2u, ix.level_of(x->length()));
		ix.insert(x);
	}
	size_t read = 0;
	for (size_t i = 0; i < buffers; i++)
		read += ix.slots_read_by_hit(base + i * chunk, base + (i + 1) * chunk);
	RecordProperty("mean_slots", std::to_string(double(read) / buffers));
	EXPECT_LT(double(read) / buffers, 1.25);

	// From the last buffer's second chunk, where no buffer starts.
	const uintptr_t tail = base + buffers * chunk - kPage;
	Entry *found = ix.find_covering(tail, tail + kPage, [](Entry *) { return true; });
	ASSERT_NE(nullptr, found);
	EXPECT_EQ(base + (buffers - 1) * chunk, found->start);
}

// One-page buffers at a power-of-two stride of 64 KiB or more (aligned
// allocations, one message each) have one key in every 16 chunks, at the
// same offset in every aligned block of the index. When blocks were aligned in
// the table, every such key had the same home within whichever block of
// the table it landed in, and the blocks' other homes stayed empty: 10
// slots read a hit and 19 a miss here at 10,000 buffers (16-chunk blocks).
// Blocks now start at any slot pair: 1.4 and 2.3 (32-chunk blocks).
TEST(RangeIndex, BuffersAtPowerOfTwoStridesSpreadOverTheirBlocks)
{
	for (const uintptr_t stride : {16 * kPage, 256 * kPage}) {
		RangeIndex ix(kShift);
		EntryPool pool(0);
		const uintptr_t base = uintptr_t(1) << 40;
		const size_t buffers = 10000;
		for (size_t i = 0; i < buffers; i++) {
			Entry *x = pool.allocate();
			x->start = base + i * stride;
			x->end = x->start + kPage;
			if (ix.insert_needs_growth())
				ix.grow();
			ix.insert(x);
		}
		size_t by_hits = 0, by_misses = 0;
		for (size_t i = 0; i < buffers; i++) {
			const uintptr_t s = base + i * stride;
			by_hits += ix.slots_read_by_hit(s, s + kPage);
			by_misses += ix.slots_read_by_miss(s + kPage, s + 2 * kPage);
		}
		const double hit = double(by_hits) / buffers, miss = double(by_misses) / buffers;
		const std::string at = std::to_string(stride / kPage) + "_pages";
		RecordProperty("slots_a_hit_" + at, std::to_string(hit));
		RecordProperty("slots_a_miss_" + at, std::to_string(miss));
		EXPECT_LT(hit, 3.0) << "stride " << stride / kPage << " pages";
		EXPECT_LT(miss, 4.0) << "stride " << stride / kPage << " pages";
	}
}

// insert() runs while readers probe: it moves the rest of a run one slot
// on to make room, and a probe going forward must still meet every key that
// was there before, whatever point of the move it reads each slot at. A
// reader looks up 64 adjacent one-page buffers, and 32 two-page ones that
// straddle two chunks of their level (looked up from their second chunk,
// through its second home), over and over while a writer files 600 more
// entries on the same ranges (homed at the same slots, so that every
// insert moves the runs behind it). Moving a run from its near end
// instead, a probe misses keys here.
TEST(RangeIndex, InsertsThatMoveARunHideNoKeyFromAProbe)
{
	// On one CPU a probe runs during an insert only if the writer is
	// preempted mid-insert: the test would show nothing.
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		GTEST_SKIP() << "one CPU: no probe runs while an insert moves a run";
	RangeIndex ix(kShift);
	EntryPool pool(0);
	const uintptr_t base = uintptr_t(1) << 40;
	struct Lookup {
		Entry *x;
		uintptr_t s, e;
	};
	std::vector<Lookup> first;
	auto add_first = [&](uintptr_t s, uintptr_t len, uintptr_t look_from) {
		Entry *x = pool.allocate();
		x->start = s;
		x->end = s + len;
		ix.insert(x);
		first.push_back({x, look_from, x->end});
	};
	for (size_t i = 0; i < 64; i++)
		add_first(base + i * kPage, kPage, base + i * kPage);
	// Level 1 (4-page chunks): pages 4k+3 and 4k+4, filed under chunks k
	// and k+1.
	const uintptr_t level1 = base + (uintptr_t(1) << 30);
	for (size_t k = 0; k < 32; k++) {
		const uintptr_t s = level1 + (4 * k + 3) * kPage;
		add_first(s, 2 * kPage, s + kPage);
	}
	ix.grow(); // room for all of it at 2,048 slots (no reader yet)
	std::vector<Entry *> more;
	for (size_t i = 0; i < 600; i++)
		more.push_back(pool.allocate());
	std::mt19937_64 rng(7);
	size_t lost = 0, during_inserts = 0;
	bool grew = false;
	for (int round = 0; round < 200 && !grew; round++) {
		std::atomic<bool> started{false}, done{false};
		std::atomic<size_t> looked{0};
		std::thread reader([&] {
			started.store(true, std::memory_order_release);
			while (!done.load(std::memory_order_acquire))
				for (const Lookup &l : first) {
					Entry *x = l.x;
					if (!ix.find_covering(l.s, l.e,
							      [x](const Entry *c) { return c == x; }))
						lost++;
					looked.fetch_add(1, std::memory_order_relaxed);
				}
		});
		while (!started.load(std::memory_order_acquire))
			std::this_thread::yield();
		const size_t before = looked.load(std::memory_order_relaxed);
		size_t inserted = 0;
		for (Entry *y : more) {
			const Lookup &l = first[rng() % first.size()];
			y->start = l.x->start;
			y->end = l.x->end;
			if ((grew = ix.insert_needs_growth()))
				break;
			ix.insert(y);
			inserted++;
		}
		during_inserts += looked.load(std::memory_order_relaxed) - before;
		done.store(true, std::memory_order_release);
		reader.join();
		for (size_t i = 0; i < inserted; i++)
			ix.erase(more[i]);
	}
	ASSERT_FALSE(grew) << "the table filled up: insert() needs readers excluded then";
	ASSERT_GT(during_inserts, 0u) << "no lookup ran while the writer inserted: nothing shown";
	RecordProperty("lookups_during_inserts", std::to_string(during_inserts));
	EXPECT_EQ(0u, lost);
	for (const Lookup &l : first)
		pool.release(l.x);
	for (Entry *y : more)
		pool.release(y);
}

} // namespace
} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
// The index against brute force: random inserts, erases, lookups and
// overlap queries over entries of many sizes.
#include "entry_pool.h"
#include "range_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
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

class RangeIndexRandom : public ::testing::TestWithParam<unsigned> {};

TEST_P(RangeIndexRandom, AgreesWithBruteForce)
{
	std::mt19937_64 rng(GetParam());
	RangeIndex ix(kShift);
	EntryPool pool(0);
	std::vector<Entry *> live;
	const uintptr_t base = uintptr_t(1) << 40;
	auto random_range = [&](uintptr_t &s, uintptr_t &e) {
		const uintptr_t first = rng() % 4096;
		// Lengths from one page to 2^14 pages, log-uniform.
		const uintptr_t pages = uintptr_t(1) << (rng() % 15);
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

// Many small adjacent buffers (MPI messages malloc'ed one after another) and
// a few large ones: a lookup of a new buffer must end after a few slots.
// Linear probing walks to the end of a run of full slots, and adjacent
// buffers fill runs of adjacent slots. Slots read per miss here, mean and
// worst, by locality block: 1024 slots 129 and 2363; 64: 46 and 240; 16
// (the table's): 17 and 74; none (every key hashed): 8 and 41.
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
	EXPECT_LT(double(total) / lookups, 24.0);
	EXPECT_LT(worst, 160u);
}

} // namespace
} // namespace mrn

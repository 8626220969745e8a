// SPDX-License-Identifier: BSD-3-Clause
// The index against brute force: random inserts, erases, lookups and
// overlap queries over entries of many sizes.
#include "../../lib/src/entry_pool.h"
#include "../../lib/src/range_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
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

} // namespace
} // namespace mrn

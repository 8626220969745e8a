// SPDX-License-Identifier: BSD-3-Clause
// UffdRanges against a model of the kernel's userfaultfd registrations:
// every page a live range needs stays registered, what nothing needs is
// unregistered, and the ranges that can split mappings stay few and bounded.
#include "uffd_ranges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <set>
#include <vector>

namespace mrn {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kGranule = 16 * kPage; // small, so that tests cross granules

// The kernel, as far as UffdRanges can tell: which pages are registered,
// and pages that cannot be (a file mapping, another uffd's VMA).
struct Kernel {
	std::set<uintptr_t> registered, unwatchable;
	int registers = 0, unregisters = 0;

	int reg(uintptr_t s, uintptr_t e)
	{
		registers++;
		for (uintptr_t a = s; a < e; a += kPage)
			if (unwatchable.count(a))
				return -EINVAL; // nothing registered
		for (uintptr_t a = s; a < e; a += kPage)
			registered.insert(a);
		return 0;
	}
	int unreg(uintptr_t s, uintptr_t e)
	{
		unregisters++;
		for (uintptr_t a = s; a < e; a += kPage)
			if (unwatchable.count(a))
				return -EINVAL;
		for (uintptr_t a = s; a < e; a += kPage)
			registered.erase(a);
		return 0;
	}
};

class UffdRangesTest : public ::testing::Test {
protected:
	UffdRanges make(uint64_t max_ranges = UINT64_MAX, size_t granule = kGranule)
	{
		return UffdRanges(
			granule, kPage, max_ranges,
			[this](uintptr_t s, uintptr_t e) { return kernel.reg(s, e); },
			[this](uintptr_t s, uintptr_t e) { return kernel.unreg(s, e); });
	}
	static uintptr_t pg(size_t i) { return uintptr_t(1) << 30 | i * kPage; }
	Kernel kernel;
};

TEST_F(UffdRangesTest, SmallRangesShareOneGranule)
{
	UffdRanges r = make();
	std::vector<uint64_t> ids;
	for (size_t i = 0; i < 16; i += 2) {
		uint64_t id = 0;
		ASSERT_EQ(0, r.add(pg(i), pg(i + 1), &id));
		ids.push_back(id);
	}
	EXPECT_EQ(1u, r.ranges());
	EXPECT_EQ(16u, kernel.registered.size()); // the whole granule
	for (size_t k = 0; k + 1 < ids.size(); k++)
		r.remove(ids[k]);
	EXPECT_EQ(16u, kernel.registered.size()) << "still needed by the last range";
	r.remove(ids.back());
	EXPECT_EQ(0u, r.ranges());
	EXPECT_TRUE(kernel.registered.empty());
}

TEST_F(UffdRangesTest, AdjacentGranulesAreOneRange)
{
	UffdRanges r = make();
	uint64_t a, b, c;
	ASSERT_EQ(0, r.add(pg(0), pg(1), &a));
	ASSERT_EQ(0, r.add(pg(32), pg(33), &c));
	EXPECT_EQ(2u, r.ranges());
	ASSERT_EQ(0, r.add(pg(16), pg(17), &b)); // joins the two
	EXPECT_EQ(1u, r.ranges());
	// Unregistering the middle granule alone would split the run's
	// mapping: it stays registered while the run is held.
	r.remove(b);
	EXPECT_EQ(1u, r.ranges());
	EXPECT_EQ(48u, kernel.registered.size());
	r.remove(a);
	EXPECT_EQ(0, kernel.unregisters);
	r.remove(c);
	EXPECT_EQ(0u, r.ranges());
	EXPECT_TRUE(kernel.registered.empty());
	EXPECT_EQ(1, kernel.unregisters) << "the run in one call";
}

// Many ranges in one run, released in any order: one unregistration.
TEST_F(UffdRangesTest, RunIsUnregisteredOnceNothingHoldsIt)
{
	UffdRanges r = make();
	std::vector<uint64_t> ids;
	for (size_t i = 0; i < 64; i++) {
		uint64_t id;
		ASSERT_EQ(0, r.add(pg(i * 8), pg(i * 8 + 1), &id));
		ids.push_back(id);
	}
	EXPECT_EQ(1u, r.ranges());
	std::mt19937 rng(7);
	std::shuffle(ids.begin(), ids.end(), rng);
	for (uint64_t id : ids)
		r.remove(id);
	EXPECT_TRUE(kernel.registered.empty());
	EXPECT_EQ(1, kernel.unregisters);
}

TEST_F(UffdRangesTest, UnwatchableNeighbourMeansExactPages)
{
	UffdRanges r = make();
	kernel.unwatchable.insert(pg(8)); // a file page in the granule
	uint64_t a, b;
	ASSERT_EQ(0, r.add(pg(1), pg(3), &a));
	ASSERT_EQ(0, r.add(pg(2), pg(5), &b));
	EXPECT_EQ(2u, r.ranges());
	EXPECT_EQ((std::set<uintptr_t>{pg(1), pg(2), pg(3), pg(4)}), kernel.registered);
	r.remove(a);
	EXPECT_EQ((std::set<uintptr_t>{pg(2), pg(3), pg(4)}), kernel.registered);
	r.remove(b);
	EXPECT_TRUE(kernel.registered.empty());
	uint64_t c;
	EXPECT_EQ(-EOPNOTSUPP, r.add(pg(8), pg(9), &c)) << "the unwatchable page itself";
	EXPECT_TRUE(kernel.registered.empty());
	EXPECT_EQ(0u, r.ranges());
}

TEST_F(UffdRangesTest, RangeOverManyGranulesWithOneUnwatchable)
{
	UffdRanges r = make();
	kernel.unwatchable.insert(pg(40)); // in the third granule, outside the range
	uint64_t a;
	ASSERT_EQ(0, r.add(pg(3), pg(36), &a));
	// Granules 0 and 1 whole, the range's pages of granule 2 exactly.
	EXPECT_EQ(2u, r.ranges());
	for (size_t i = 0; i < 36; i++)
		EXPECT_TRUE(kernel.registered.count(pg(i))) << i;
	EXPECT_FALSE(kernel.registered.count(pg(36)));
	r.remove(a);
	EXPECT_TRUE(kernel.registered.empty());
}

TEST_F(UffdRangesTest, BoundRefusesNewRangesOnly)
{
	UffdRanges r = make(2);
	uint64_t a, b, c, d;
	ASSERT_EQ(0, r.add(pg(0), pg(1), &a));
	ASSERT_EQ(0, r.add(pg(64), pg(65), &b));
	EXPECT_EQ(-EOPNOTSUPP, r.add(pg(128), pg(129), &c));
	EXPECT_EQ(1u, r.refused());
	ASSERT_EQ(0, r.add(pg(5), pg(6), &d)) << "in a granule already held: no new range";
	EXPECT_FALSE(kernel.registered.count(pg(128)));
	r.remove(a);
	EXPECT_EQ(-EOPNOTSUPP, r.add(pg(128), pg(129), &c)) << "granule 0 is still held";
	r.remove(d);
	ASSERT_EQ(0, r.add(pg(128), pg(129), &c));
	r.remove(b), r.remove(c);
	EXPECT_TRUE(kernel.registered.empty());
}

// The old monitor: one page granules, every range exact.
TEST_F(UffdRangesTest, PageGranuleIsExact)
{
	UffdRanges r = make(UINT64_MAX, kPage);
	uint64_t a, b;
	ASSERT_EQ(0, r.add(pg(0), pg(1), &a));
	ASSERT_EQ(0, r.add(pg(2), pg(3), &b));
	EXPECT_EQ(2u, r.ranges());
	EXPECT_EQ((std::set<uintptr_t>{pg(0), pg(2)}), kernel.registered);
	r.remove(a), r.remove(b);
}

// Random adds and removes, some unwatchable pages: every page a live range
// holds is registered after every step, and nothing is once all are gone.
TEST_F(UffdRangesTest, ModelHoldsUnderRandomUse)
{
	std::mt19937 rng(21);
	for (int round = 0; round < 20; round++) {
		kernel = Kernel{};
		UffdRanges r = make();
		for (int i = 0; i < 6; i++)
			kernel.unwatchable.insert(pg(rng() % 256));
		struct Live {
			uint64_t id;
			uintptr_t s, e;
		};
		std::vector<Live> live;
		for (int step = 0; step < 400; step++) {
			if (!live.empty() && rng() % 3 == 0) {
				const size_t k = rng() % live.size();
				r.remove(live[k].id);
				live.erase(live.begin() + long(k));
			} else {
				const size_t first = rng() % 250, n = 1 + rng() % 40;
				uint64_t id = 0;
				const int rc = r.add(pg(first), pg(first + n), &id);
				if (rc == 0)
					live.push_back({id, pg(first), pg(first + n)});
				else
					ASSERT_EQ(-EOPNOTSUPP, rc);
				if (rc != 0) {
					bool blocked = false;
					for (size_t p = first; p < first + n; p++)
						blocked |= kernel.unwatchable.count(pg(p)) > 0;
					ASSERT_TRUE(blocked) << "refused a watchable range";
				}
			}
			for (const Live &l : live)
				for (uintptr_t a = l.s; a < l.e; a += kPage)
					ASSERT_TRUE(kernel.registered.count(a))
						<< "round " << round << " step " << step;
		}
		for (const Live &l : live)
			r.remove(l.id);
		EXPECT_EQ(0u, r.ranges());
		// Granules whose unregistration met an unwatchable page stay
		// registered (the kernel refuses the whole call); no others.
		for (uintptr_t a : kernel.registered) {
			const uintptr_t g = a / kGranule * kGranule;
			bool blocked = false;
			for (uintptr_t b = g; b < g + kGranule; b += kPage)
				blocked |= kernel.unwatchable.count(b) > 0;
			EXPECT_TRUE(blocked) << "page left registered";
		}
	}
}

} // namespace
} // namespace mrn

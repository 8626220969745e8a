// SPDX-License-Identifier: BSD-3-Clause
//
// The imported monitor's table (lib/ofi/watched_ranges.h) against a fake
// kernel: what libfabric's caches see through subscribe, valid and
// unsubscribe, in the orders libfabric 1.17 (never unsubscribes) and 2.x
// (unsubscribes every uncached entry, also after a failed subscribe) call
// them.
#include "fake_monitor.h"
#include "watched_ranges.h"

#include <gtest/gtest.h>

#include <thread>

using mrn::ofi::Range;
using mrn::ofi::WatchedRanges;
using mrn::test::FakeMonitor;

namespace {

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kA = 0x10000000; // a buffer that starts inside a page
constexpr size_t kLen = 3 * kPage;

// The table owns its monitor; the tests keep a pointer to the fake.
std::unique_ptr<mrn::Monitor> fake(FakeMonitor **out)
{
	auto m = std::make_unique<FakeMonitor>();
	*out = m.get();
	return m;
}

class WatchedRangesTest : public ::testing::Test {
protected:
	FakeMonitor *kernel_ = nullptr;
	WatchedRanges table{fake(&kernel_), 0};
	FakeMonitor &kernel = *kernel_;
	int woken = 0;
	void SetUp() override
	{
		table.set_on_death([this] { woken++; });
	}

	// What the notifier thread does, minus libfabric.
	std::vector<Range> notify_all()
	{
		table.drain();
		std::vector<Range> dead = table.take_dead();
		table.notified(dead);
		return dead;
	}
};

TEST_F(WatchedRangesTest, AHitCostsNothingWhileNothingDied)
{
	ASSERT_EQ(table.subscribe(kA + 100, kLen), 0);
	EXPECT_TRUE(table.valid(kA + 100, kLen));
	EXPECT_EQ(table.stats().valid_slow, 0u);
	// The kernel watches whole pages around the buffer.
	EXPECT_EQ(kernel.watched(), 1u);
}

TEST_F(WatchedRangesTest, ARangeThatDiedIsNotValidBeforeAnyoneNotified)
{
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	kernel.unmap(kA + kPage, kA + 2 * kPage);
	// The first hit after the unmap drains and refuses, and wakes the
	// notifier: nothing else has run.
	EXPECT_FALSE(table.valid(kA, kLen));
	EXPECT_EQ(woken, 1);
	EXPECT_FALSE(table.valid(kA, kLen));
	EXPECT_EQ(notify_all(), (std::vector<Range>{{kA, kLen}}));
}

TEST_F(WatchedRangesTest, AnUnmapOfAnotherRangeLeavesThisOneValid)
{
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	ASSERT_EQ(table.subscribe(kA + 16 * kPage, kLen), 0);
	kernel.unmap(kA + 16 * kPage, kA + 17 * kPage);
	EXPECT_TRUE(table.valid(kA, kLen));
	EXPECT_FALSE(table.valid(kA + 16 * kPage, kLen));
}

TEST_F(WatchedRangesTest, TwoCachesShareOneWatch)
{
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	EXPECT_EQ(kernel.watched(), 1u);
	table.unsubscribe(kA, kLen);
	EXPECT_EQ(kernel.watched(), 1u);
	table.unsubscribe(kA, kLen);
	EXPECT_EQ(kernel.watched(), 0u);
	EXPECT_EQ(table.stats().ranges, 0u);
}

// Cache A hits on a dead range first and registers it again before the
// notifier has run; cache B still holds its entry on the old pages. valid()
// cannot tell the two apart, so it refuses both until the death is notified.
TEST_F(WatchedRangesTest, ARangeWatchedAgainStaysInvalidUntilItsDeathIsNotified)
{
	ASSERT_EQ(table.subscribe(kA, kLen), 0); // cache A
	ASSERT_EQ(table.subscribe(kA, kLen), 0); // cache B
	kernel.unmap(kA, kA + kLen);
	EXPECT_FALSE(table.valid(kA, kLen));     // A: refused, uncached
	table.unsubscribe(kA, kLen);             // (2.x)
	ASSERT_EQ(table.subscribe(kA, kLen), 0); // A registers the new pages
	EXPECT_EQ(kernel.watched(), 1u);
	EXPECT_FALSE(table.valid(kA, kLen)); // B's stale entry: refused
	notify_all();                        // every cache drops [kA, +kLen)
	table.unsubscribe(kA, kLen);         // B's entry (2.x)
	table.unsubscribe(kA, kLen);         // A's new entry, notified too
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	EXPECT_TRUE(table.valid(kA, kLen));
}

TEST_F(WatchedRangesTest, WithoutUnsubscribesADeadRangeIsForgottenOnceNotified)
{
	// libfabric 1.17: subscribe only.
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(table.subscribe(kA, kLen), 0);
	kernel.unmap(kA, kA + kLen);
	notify_all();
	EXPECT_EQ(table.stats().ranges, 0u);
	EXPECT_EQ(kernel.watched(), 0u);
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	EXPECT_TRUE(table.valid(kA, kLen));
}

TEST_F(WatchedRangesTest, AFailedSubscribeOfAKnownRangeTakesNoOtherCachesReference)
{
	ASSERT_EQ(table.subscribe(kA, kLen), 0); // cache B
	kernel.unmap(kA, kA + kLen);
	EXPECT_FALSE(table.valid(kA, kLen));
	kernel.fail_track = -ENOMEM;
	EXPECT_EQ(table.subscribe(kA, kLen), -ENOMEM); // cache A
	table.unsubscribe(kA, kLen);                   // 2.x, right after
	kernel.fail_track = 0;
	ASSERT_EQ(table.subscribe(kA, kLen), 0); // cache C
	notify_all();
	ASSERT_EQ(table.subscribe(kA, kLen), 0); // C again, after notify
	table.unsubscribe(kA, kLen);             // B's, late
	// C's entry still has its watch.
	EXPECT_EQ(kernel.watched(), 1u);
	EXPECT_TRUE(table.valid(kA, kLen));
}

TEST_F(WatchedRangesTest, AFailedSubscribeOfANewRangeLeavesNothing)
{
	kernel.fail_track = -ENOSPC;
	EXPECT_EQ(table.subscribe(kA, kLen), -ENOSPC);
	table.unsubscribe(kA, kLen);
	EXPECT_EQ(table.stats().ranges, 0u);
}

TEST_F(WatchedRangesTest, TheTableIsBounded)
{
	FakeMonitor *k;
	WatchedRanges small(fake(&k), 2);
	EXPECT_EQ(small.subscribe(kA, kLen), 0);
	EXPECT_EQ(small.subscribe(kA + kLen, kLen), 0);
	EXPECT_EQ(small.subscribe(kA + 2 * kLen, kLen), -ENOSPC);
	EXPECT_EQ(small.subscribe(kA, kLen), 0) << "a known range is no new entry";
}

TEST_F(WatchedRangesTest, AFailedDrainRefusesEveryHit)
{
	ASSERT_EQ(table.subscribe(kA, kLen), 0);
	ASSERT_EQ(table.subscribe(kA + 16 * kPage, kLen), 0);
	kernel.fail_drain = -EIO;
	kernel.unmap(kA, kA + kLen);
	EXPECT_FALSE(table.valid(kA, kLen));
	EXPECT_FALSE(table.valid(kA + 16 * kPage, kLen)) << "the drain did not say it lived";
	kernel.fail_drain = 0;
	EXPECT_FALSE(table.valid(kA + 16 * kPage, kLen)) << "not before it is notified";
	// The failed drain reported every subscribed range dead (the
	// validity service's rule 3), and the next drain kA's own death.
	const std::vector<Range> dead = notify_all();
	EXPECT_EQ(dead.size(), 3u);
	EXPECT_TRUE(table.valid(kA + 16 * kPage, kLen));
}

// Hits from several threads while another unmaps and the notifier drains:
// from the unmap until libfabric's notify has dropped the entries, no hit
// says valid. The notifier here reports a death done only once the hitters
// stopped asking about it (as notify removes the entries before it returns).
TEST_F(WatchedRangesTest, NoHitAfterAnUnmapSaysValid)
{
	constexpr int kRanges = 64, kRounds = 2000;
	for (int i = 0; i < kRanges; i++)
		ASSERT_EQ(table.subscribe(kA + i * 4 * kPage, kLen), 0);
	// unmapped: the range the hitters ask about, once it is unmapped.
	// seq moves after unmapped is cleared and before the range is watched
	// again: a hitter that read unmapped == i read seq before the move, so
	// a hit on i that saw the same seq before and after asked while i was
	// dead (had seq moved first, a hitter could read the new seq, then i,
	// then ask after the range was legitimately watched again).
	// asking: set before the unmap, so that the notifier, however early it
	// drains, waits for the hitters to be done with the range.
	std::atomic<int> unmapped{-1}, asking{-1};
	std::atomic<uint64_t> seq{0}, checks{0};
	std::atomic<bool> done{false}, wrong{false};
	std::thread notifier([&] {
		while (!done.load()) {
			table.drain();
			const std::vector<Range> dead = table.take_dead();
			while (!dead.empty() && asking.load() >= 0 && !done.load())
				std::this_thread::yield();
			table.notified(dead);
		}
	});
	std::vector<std::thread> hitters;
	for (int t = 0; t < 2; t++)
		hitters.emplace_back([&] {
			while (!done.load()) {
				const uint64_t s1 = seq.load();
				const int u = unmapped.load();
				const bool ok = u >= 0 && table.valid(kA + u * 4 * kPage, kLen);
				if (ok && seq.load() == s1)
					wrong = true;
				checks++;
			}
		});
	for (int round = 0; round < kRounds; round++) {
		const int i = round % kRanges;
		asking.store(i);
		kernel.unmap(kA + i * 4 * kPage, kA + i * 4 * kPage + kLen);
		unmapped.store(i);
		EXPECT_FALSE(table.valid(kA + i * 4 * kPage, kLen)) << "round " << round;
		for (const uint64_t c = checks.load(); checks.load() < c + 4;)
			std::this_thread::yield();
		// The cache registers it again (2.x order: unsubscribe first).
		table.unsubscribe(kA + i * 4 * kPage, kLen);
		unmapped.store(-1);
		seq.fetch_add(1);
		asking.store(-1);
		while (table.stats().notified < static_cast<uint64_t>(round + 1))
			std::this_thread::yield();
		ASSERT_EQ(table.subscribe(kA + i * 4 * kPage, kLen), 0);
	}
	done = true;
	notifier.join();
	for (auto &h : hitters)
		h.join();
	EXPECT_FALSE(wrong.load());
	EXPECT_EQ(table.stats().deaths, static_cast<uint64_t>(kRounds));
}

} // namespace

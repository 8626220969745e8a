// SPDX-License-Identifier: BSD-3-Clause
//
// The validity service (lib/src/watch_set.h) against a fake kernel: one
// test group per rule of its header, each failing when that rule is broken.
#include "fake_monitor.h"
#include "watch_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

using mrn::WatchedRange;
using mrn::WatchSet;
using mrn::test::FakeMonitor;

namespace {

constexpr uintptr_t kPage = 4096;
constexpr uintptr_t kA = 0x10000000;
constexpr uintptr_t kB = 0x20000000;
constexpr size_t kLen = 3 * kPage;

class WatchSetTest : public ::testing::Test {
protected:
	// Each open makes a fresh fake kernel context (a forked child opens
	// its own); kernel is the newest.
	std::vector<FakeMonitor *> opened;
	int open_error = 0;
	FakeMonitor *kernel = nullptr;
	WatchSet::Opener opener = [this](int *err, std::string *) -> std::unique_ptr<mrn::Monitor> {
		if (open_error) {
			*err = open_error;
			return nullptr;
		}
		auto m = std::make_unique<FakeMonitor>();
		kernel = m.get();
		opened.push_back(kernel);
		return m;
	};
	WatchSet set{opener, 0};
	// A forked child's set lets go of its parent's monitor without
	// destroying it (its destructor would act on the parent's state):
	// the test frees it.
	std::unique_ptr<FakeMonitor> fork_child(bool reopen)
	{
		FakeMonitor *parents = kernel;
		set.fork_prepare();
		set.fork_child(reopen);
		return std::unique_ptr<FakeMonitor>(parents);
	}

	// What an adapter does: drain, deliver every death, acknowledge.
	std::vector<WatchedRange> deliver()
	{
		(void)set.drain();
		std::vector<WatchedRange> dead = set.take_dead();
		set.delivered(dead);
		return dead;
	}
	static bool has(const std::vector<WatchedRange> &v, uintptr_t addr)
	{
		return std::any_of(v.begin(), v.end(),
				   [addr](const WatchedRange &r) { return r.addr == addr; });
	}
};

// Rule 1: one kernel watch per range at a time, counted.

TEST_F(WatchSetTest, HoldersOfOneRangeShareOneKernelWatch)
{
	WatchSet::Handle h1, h2;
	bool shared = true;
	ASSERT_EQ(set.hold(kA, kLen, &h1, &shared), 0);
	EXPECT_FALSE(shared);
	ASSERT_EQ(set.hold(kA, kLen, &h2, &shared), 0);
	EXPECT_TRUE(shared);
	EXPECT_EQ(kernel->watched(), 1u);
	EXPECT_EQ(set.release(h1), 0);
	EXPECT_EQ(kernel->watched(), 1u) << "another holder still needs the watch";
	EXPECT_EQ(set.release(h2), 0);
	EXPECT_EQ(kernel->watched(), 0u) << "the last release removes it";
	EXPECT_EQ(set.stats().ranges, 0u);
}

TEST_F(WatchSetTest, AHoldAfterADeathMakesANewWatch)
{
	WatchSet::Handle h1, h2;
	ASSERT_EQ(set.hold(kA, kLen, &h1), 0);
	kernel->unmap(kA, kA + kPage);
	EXPECT_TRUE(has(deliver(), kA));
	bool shared = true;
	ASSERT_EQ(set.hold(kA, kLen, &h2, &shared), 0);
	EXPECT_FALSE(shared) << "the dead watch must not be shared";
	EXPECT_EQ(kernel->watched(), 1u);
	// The new watch reports the next unmap.
	kernel->unmap(kA, kA + kPage);
	EXPECT_TRUE(has(deliver(), kA));
	EXPECT_EQ(set.release(h1), 0);
	EXPECT_EQ(set.release(h2), 0);
	EXPECT_EQ(set.stats().ranges, 0u);
}

TEST_F(WatchSetTest, AReleaseTellsWhenTheWatchHadDiedUndrained)
{
	WatchSet::Handle h;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	kernel->unmap(kA, kA + kPage);
	EXPECT_EQ(set.release(h), 1);
	EXPECT_EQ(set.release(h), -ESTALE) << "a handle is released once";
	EXPECT_EQ(kernel->watched(), 0u);
}

// Rule 2: each death reported once; invalid until delivered.

TEST_F(WatchSetTest, ADeathIsReportedOnceAndTheRangeIsInvalidUntilDelivered)
{
	WatchSet::Handle h, again;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	EXPECT_TRUE(set.valid(kA, kLen));
	EXPECT_EQ(set.stats().valid_slow, 0u) << "a quiet hit takes no lock";
	kernel->unmap(kA + kPage, kA + 2 * kPage);
	EXPECT_FALSE(set.valid(kA, kLen));
	const std::vector<WatchedRange> dead = set.take_dead();
	ASSERT_EQ(dead.size(), 1u);
	EXPECT_TRUE(set.take_dead().empty()) << "reported once";
	// A cache re-registers before the others heard: still refused.
	ASSERT_EQ(set.hold(kA, kLen, &again), 0);
	EXPECT_FALSE(set.valid(kA, kLen));
	EXPECT_FALSE(set.quiet());
	set.delivered(dead);
	EXPECT_TRUE(set.valid(kA, kLen));
	EXPECT_TRUE(set.quiet());
}

TEST_F(WatchSetTest, AnUnmapOfAnotherRangeLeavesThisOneValid)
{
	WatchSet::Handle ha, hb;
	ASSERT_EQ(set.hold(kA, kLen, &ha), 0);
	ASSERT_EQ(set.hold(kB, kLen, &hb), 0);
	kernel->unmap(kB, kB + kPage);
	EXPECT_TRUE(set.valid(kA, kLen));
	EXPECT_FALSE(set.valid(kB, kLen));
	const std::vector<WatchedRange> dead = deliver();
	EXPECT_TRUE(has(dead, kB));
	EXPECT_FALSE(has(dead, kA));
}

TEST_F(WatchSetTest, ADeadRangeStaysUntilDeliveredThoughEveryHolderLeft)
{
	WatchSet::Handle h;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	kernel->unmap(kA, kA + kPage);
	ASSERT_EQ(set.drain(), 0);
	EXPECT_EQ(set.release(h), 0) << "drained, so not dirty at release";
	EXPECT_EQ(set.stats().ranges, 1u) << "its death still waits for delivery";
	set.delivered(set.take_dead());
	EXPECT_EQ(set.stats().ranges, 0u);
}

// Rule 3: after a failed drain nothing is trusted, and nothing is lost.

TEST_F(WatchSetTest, AFailedDrainDeliversEveryHeldRangeAndRefusesHits)
{
	WatchSet::Handle ha, hb;
	ASSERT_EQ(set.hold(kA, kLen, &ha), 0);
	ASSERT_EQ(set.hold(kB, kLen, &hb), 0);
	kernel->unmap(kB, kB + kPage);
	kernel->fail_drain = -EIO;
	EXPECT_EQ(set.drain(), -EIO);
	EXPECT_TRUE(set.drain_failed());
	EXPECT_FALSE(set.valid(kA, kLen)) << "A's watch is live, but the drain failed";
	const std::vector<WatchedRange> dead = set.take_dead();
	EXPECT_TRUE(has(dead, kA));
	EXPECT_TRUE(has(dead, kB));
	set.delivered(dead);
	EXPECT_FALSE(set.valid(kA, kLen)) << "still refused while drains fail";
	kernel->fail_drain = 0;
	// The kernel kept B's death: it is reported by the next drain.
	EXPECT_TRUE(has(deliver(), kB));
	EXPECT_FALSE(set.drain_failed());
	EXPECT_TRUE(set.valid(kA, kLen));
}

// Rule 4: a forked child.

TEST_F(WatchSetTest, AForkedChildDeliversEveryInheritedRangeOnceAndReopens)
{
	WatchSet::Handle h;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	const std::unique_ptr<FakeMonitor> parents = fork_child(true);
	EXPECT_TRUE(parents->abandoned) << "the parent's context is let go, not closed";
	EXPECT_FALSE(set.quiet()) << "the first check after fork must drain";
	EXPECT_EQ(set.release(h), -ESTALE) << "a handle from before the fork";
	const std::vector<WatchedRange> dead = deliver();
	EXPECT_TRUE(has(dead, kA));
	ASSERT_EQ(opened.size(), 2u) << "the child opened its own context";
	EXPECT_EQ(set.generation(), kernel->generation());
	EXPECT_TRUE(set.quiet());
	(void)deliver();
	EXPECT_EQ(opened.size(), 2u) << "once";
	WatchSet::Handle child;
	ASSERT_EQ(set.hold(kA, kLen, &child), 0);
	EXPECT_EQ(kernel->watched(), 1u);
	EXPECT_EQ(parents->watched(), 1u) << "the parent's watch is the parent's";
	// The child's record may sit in the slot the parent's handle names.
	EXPECT_EQ(set.release(h), -ESTALE);
	EXPECT_EQ(kernel->watched(), 1u) << "the child's hold is untouched";
	EXPECT_EQ(set.release(child), 0);
}

TEST_F(WatchSetTest, AChildThatCannotReopenHasNoWatchesAndTriesOnce)
{
	WatchSet::Handle h;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	const std::unique_ptr<FakeMonitor> parents = fork_child(true);
	open_error = -ENODEV;
	EXPECT_TRUE(has(deliver(), kA));
	EXPECT_TRUE(set.quiet());
	EXPECT_EQ(set.hold(kA, kLen, &h), -ENODEV);
	EXPECT_EQ(opened.size(), 1u);
}

TEST_F(WatchSetTest, AChildThatMayNotReopenNeverOpens)
{
	WatchSet::Handle h;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	const std::unique_ptr<FakeMonitor> parents = fork_child(false);
	EXPECT_TRUE(has(deliver(), kA));
	EXPECT_EQ(set.hold(kB, kLen, &h), -ENODEV);
	EXPECT_EQ(opened.size(), 1u);
}

TEST_F(WatchSetTest, TheParentGoesOnAsBefore)
{
	WatchSet::Handle h;
	ASSERT_EQ(set.hold(kA, kLen, &h), 0);
	set.fork_prepare();
	set.fork_parent();
	EXPECT_TRUE(set.valid(kA, kLen));
	EXPECT_TRUE(deliver().empty());
	EXPECT_EQ(set.release(h), 0);
}

// Bounds and failures.

TEST_F(WatchSetTest, TheSetIsBoundedAndAFailedHoldLeavesNothing)
{
	FakeMonitor *sets = kernel;
	WatchSet bounded{opener, 1};
	WatchSet::Handle h;
	ASSERT_EQ(bounded.hold(kA, kLen, &h), 0);
	EXPECT_EQ(bounded.hold(kB, kLen, &h), -ENOSPC);
	sets->fail_track = -EFAULT;
	WatchSet::Handle h2;
	EXPECT_EQ(set.hold(kB, kLen, &h2), -EFAULT);
	EXPECT_EQ(set.stats().ranges, 0u);
	EXPECT_EQ(set.hold(kA, 0, &h2), -EINVAL);
}

TEST_F(WatchSetTest, WithoutAMonitorNothingIsHeldAndHitsAreQuiet)
{
	open_error = -ENODEV;
	int err = 0;
	WatchSet none{opener, 0, &err};
	EXPECT_EQ(err, -ENODEV);
	WatchSet::Handle h;
	EXPECT_EQ(none.hold(kA, kLen, &h), -ENODEV);
	EXPECT_TRUE(none.quiet());
}

// Threads: holds, releases, unmaps and deliveries at once; afterwards
// nothing is left and every death was delivered.
TEST_F(WatchSetTest, ThreadsLeaveNothingBehind)
{
	constexpr int kThreads = 4, kRounds = 2000;
	std::atomic<bool> stop{false};
	std::thread unmapper([&] {
		while (!stop.load()) {
			for (int i = 0; i < 8; i++)
				kernel->unmap(kA + i * kLen, kA + i * kLen + kPage);
			(void)deliver();
		}
	});
	std::vector<std::thread> holders;
	for (int t = 0; t < kThreads; t++)
		holders.emplace_back([&, t] {
			for (int r = 0; r < kRounds; r++) {
				WatchSet::Handle h;
				const uintptr_t a = kA + ((t + r) % 8) * kLen;
				if (set.hold(a, kLen, &h) == 0) {
					(void)set.valid(a, kLen);
					EXPECT_GE(set.release(h), 0);
				}
			}
		});
	for (auto &t : holders)
		t.join();
	stop.store(true);
	unmapper.join();
	(void)deliver();
	const mrn::WatchSetStats s = set.stats();
	EXPECT_EQ(s.ranges, 0u);
	EXPECT_EQ(s.deaths, s.delivered);
	EXPECT_EQ(kernel->watched(), 0u);
}

} // namespace

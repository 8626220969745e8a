// SPDX-License-Identifier: BSD-3-Clause
//
// Monitors none and external: unmaps reported by memory hooks
// (mrn_report_unmap) through the queue (lib/src/hook_queue.h), which the
// cache drains through its generation check. The queue alone, then the
// cache through the public API, from a signal handler too.
#include "hook_queue.h"
#include "mrnotify.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

using mrn::HookQueue;

namespace {

constexpr uintptr_t kMiB = 1 << 20;
constexpr uintptr_t kBase = 0x40000000;

using Reported = std::vector<std::pair<uintptr_t, uintptr_t>>;

uint64_t drain(HookQueue &q, Reported *out)
{
	return q.drain([out](uintptr_t s, uintptr_t e) { out->emplace_back(s, e); });
}

bool covered(const Reported &r, uintptr_t s, uintptr_t e)
{
	for (auto [rs, re] : r)
		if (rs <= s && e <= re)
			return true;
	return false;
}

TEST(HookQueue, OnlyRangesOverWhatWasWatchedAreQueued)
{
	HookQueue q;
	EXPECT_FALSE(q.push(kBase, kMiB)) << "nothing watched yet";
	q.extend(kBase, kBase + 4 * kMiB);
	EXPECT_FALSE(q.push(kBase + 8 * kMiB, kMiB));
	EXPECT_EQ(__atomic_load_n(q.generation(), __ATOMIC_ACQUIRE), 0u) << "the word did not move";
	EXPECT_TRUE(q.push(kBase + kMiB, 4096));
	EXPECT_EQ(__atomic_load_n(q.generation(), __ATOMIC_ACQUIRE), 1u);
	Reported r;
	EXPECT_EQ(drain(q, &r), 1u) << "drained up to the word";
	ASSERT_EQ(r.size(), 1u);
	EXPECT_EQ(r[0], std::make_pair(kBase + kMiB, kBase + kMiB + 4096));
	r.clear();
	EXPECT_EQ(drain(q, &r), 1u);
	EXPECT_TRUE(r.empty()) << "reported once";
}

TEST(HookQueue, AFullQueueMergesRangesInsteadOfLosingThem)
{
	HookQueue q;
	q.extend(kBase, kBase + 1024 * kMiB);
	const size_t n = 2 * HookQueue::kSlots;
	for (size_t i = 0; i < n; i++)
		ASSERT_TRUE(q.push(kBase + i * 4096 * 64, 4096));
	EXPECT_EQ(q.queued(), HookQueue::kSlots);
	EXPECT_EQ(q.overflows(), n - HookQueue::kSlots);
	Reported r;
	EXPECT_EQ(drain(q, &r), n);
	for (size_t i = 0; i < n; i++)
		EXPECT_TRUE(covered(r, kBase + i * 4096 * 64, kBase + i * 4096 * 64 + 4096)) << i;
	// The merged span is in 2 MiB granules around what was lost only.
	EXPECT_FALSE(covered(r, kBase + 900 * kMiB, kBase + 900 * kMiB + 4096));
}

// Producers on several threads while one thread drains: every range
// pushed is reported, and the last drain catches the word up.
TEST(HookQueue, ThreadsLoseNothing)
{
	HookQueue q;
	q.extend(kBase, kBase + 4096 * kMiB);
	constexpr int kThreads = 4, kEach = 5000;
	std::atomic<bool> stop{false};
	Reported r;
	std::thread drainer([&] {
		while (!stop.load())
			(void)drain(q, &r);
	});
	std::vector<std::thread> producers;
	for (int t = 0; t < kThreads; t++)
		producers.emplace_back([&q, t] {
			for (int i = 0; i < kEach; i++)
				q.push(kBase + (uintptr_t(t) * kEach + i) * 4096, 4096);
		});
	for (auto &p : producers)
		p.join();
	stop.store(true);
	drainer.join();
	EXPECT_EQ(drain(q, &r), uint64_t(kThreads) * kEach);
	EXPECT_EQ(__atomic_load_n(q.generation(), __ATOMIC_ACQUIRE), uint64_t(kThreads) * kEach);
	for (int t = 0; t < kThreads; t++)
		for (int i = 0; i < kEach; i += 97) {
			const uintptr_t s = kBase + (uintptr_t(t) * kEach + i) * 4096;
			EXPECT_TRUE(covered(r, s, s + 4096)) << t << " " << i;
		}
}

// The cache through the public API, monitor external: a reported unmap
// makes the next get register anew; without the report (the control) the
// idle registration is handed out again.
struct Registrar {
	int registered = 0, deregistered = 0;
	static int reg(void *ctx, void *, void *, size_t, uint32_t, void *)
	{
		static_cast<Registrar *>(ctx)->registered++;
		return 0;
	}
	static int dereg(void *ctx, void *)
	{
		static_cast<Registrar *>(ctx)->deregistered++;
		return 0;
	}
};

class ExternalMonitor : public ::testing::Test {
protected:
	Registrar books;
	mrn_cache_t *cache = nullptr;
	void *buf = nullptr;
	const size_t len = 4 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
	void SetUp() override
	{
		mrn_config c;
		ASSERT_EQ(mrn_config_init(&c), 0);
		c.name = "hooks";
		c.reg = Registrar::reg;
		c.dereg = Registrar::dereg;
		c.context = &books;
		c.payload_size = 8;
		c.monitor = MRN_MONITOR_EXTERNAL;
		c.fork_policy = MRN_FORK_NONE;
		ASSERT_EQ(mrn_cache_create(&c, &cache), 0);
		buf = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ASSERT_NE(buf, MAP_FAILED);
	}
	void TearDown() override
	{
		mrn_cache_destroy(cache);
		munmap(buf, len);
	}
	// One get and put: true when it registered.
	bool use()
	{
		const int before = books.registered;
		mrn_entry_t *e = nullptr;
		EXPECT_EQ(mrn_get(cache, buf, len, 0, nullptr, &e), 0);
		mrn_put(cache, e);
		return books.registered != before;
	}
};

TEST_F(ExternalMonitor, WithoutAReportTheIdleRegistrationIsHandedOutAgain)
{
	EXPECT_TRUE(use());
	EXPECT_FALSE(use());
}

TEST_F(ExternalMonitor, AReportedUnmapIsAppliedByTheNextCall)
{
	EXPECT_TRUE(use());
	EXPECT_EQ(mrn_report_unmap(cache, buf, 4096), 1);
	EXPECT_TRUE(use()) << "registered anew";
	mrn_stats st;
	ASSERT_EQ(mrn_cache_stats(cache, &st, sizeof(st)), 0);
	EXPECT_EQ(st.hook_reports, 1u);
	EXPECT_EQ(st.invalidations, 1u);
}

TEST_F(ExternalMonitor, AnUnmapElsewhereIsDropped)
{
	EXPECT_TRUE(use());
	EXPECT_EQ(mrn_report_unmap(cache, static_cast<char *>(buf) + 64 * len, 4096), 0);
	EXPECT_FALSE(use());
}

mrn_cache_t *signal_cache;
void *signal_buf;

void report_from_handler(int)
{
	mrn_report_unmap(signal_cache, signal_buf, 4096);
}

TEST_F(ExternalMonitor, AReportFromASignalHandlerIsApplied)
{
	EXPECT_TRUE(use());
	signal_cache = cache;
	signal_buf = buf;
	struct sigaction sa {}, old{};
	sa.sa_handler = report_from_handler;
	ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
	raise(SIGUSR1);
	sigaction(SIGUSR1, &old, nullptr);
	EXPECT_TRUE(use());
}

TEST(ExternalMonitorKinds, AKernelOrUffdCacheTakesNoReports)
{
	Registrar books;
	mrn_config c;
	ASSERT_EQ(mrn_config_init(&c), 0);
	c.reg = Registrar::reg;
	c.dereg = Registrar::dereg;
	c.context = &books;
	c.payload_size = 8;
	c.monitor = MRN_MONITOR_UFFD;
	mrn_cache_t *cache = nullptr;
	if (mrn_cache_create(&c, &cache) != 0)
		GTEST_SKIP() << "no userfaultfd here";
	int x;
	EXPECT_EQ(mrn_report_unmap(cache, &x, sizeof(x)), -EOPNOTSUPP);
	mrn_cache_destroy(cache);
}

} // namespace

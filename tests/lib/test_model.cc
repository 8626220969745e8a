// SPDX-License-Identifier: BSD-3-Clause
//
// Model-based test: several threads get and put random ranges while another
// "unmaps" random ranges through the fake monitor. A reference model keeps,
// per page, when it was last unmapped; every entry the cache hands out must
// cover the request with the access asked for, and must have been
// registered after the last unmap of each of its pages that finished before
// the get began (a stale hit otherwise), and must still be registered while
// it is held. A fourth thread forks now and then: the child must find its
// cache empty. A quarter of the entries are put by another thread than the
// one that got them (a mailbox each), as reference deltas must allow. Run
// with a kernel-like monitor (registrations by cookie) and a uffd-like one
// (address ranges). At the end every entry is idle (a flush drops them all)
// and every registration was deregistered exactly once.
#include "cache_fixture.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <vector>

namespace mrn::test {
namespace {

constexpr size_t kPages = 512;

class Model {
public:
	// Unmaps are numbered; a page remembers the number of its last one.
	uint64_t begin_unmap() { return ++clock_; }
	void unmapped(size_t first, size_t last, uint64_t stamp)
	{
		for (size_t p = first; p <= last; p++)
			last_unmap_[p].store(stamp, std::memory_order_release);
		done_.store(stamp, std::memory_order_release);
	}
	// Unmaps completed so far (their stamps are <= this).
	uint64_t completed() const { return done_.load(std::memory_order_acquire); }
	uint64_t last_unmap(size_t page) const
	{
		return last_unmap_[page].load(std::memory_order_acquire);
	}
	uint64_t now() const { return clock_.load(std::memory_order_acquire); }

private:
	std::atomic<uint64_t> clock_{0};
	std::atomic<uint64_t> done_{0};
	std::array<std::atomic<uint64_t>, kPages> last_unmap_{};
};

class ModelTest : public CacheTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ModelTest, ConcurrentGetsPutsUnmapsAndForksAgreeWithTheModel)
{
	Options o;
	o.max_entries = 64; // keep eviction busy too
	o.range_mode = GetParam();
	make(o);
	Model model;
	std::mutex unmap_mutex; // unmaps are serialised, as munmap is per page
	// Each registration records the model clock when it was made; the
	// cache calls the register function after watching, as the protocol
	// requires.
	regs.clock = [&] { return model.now(); };
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> ops{0}, failures{0};

	const int kThreads = 3;
	// 1.2 million operations in all; sanitizer builds run fewer
	// (tests/harness/sanitizer-check.sh sets MRN_MODEL_OPS_PER_THREAD).
	const char *env_ops = getenv("MRN_MODEL_OPS_PER_THREAD");
	const uint64_t kOpsPerThread = env_ops ? strtoull(env_ops, nullptr, 10) : 400000;
	std::vector<std::thread> threads;
	std::array<std::atomic<Entry *>, kThreads> mailbox{};
	for (int t = 0; t < kThreads; t++) {
		threads.emplace_back([&, t] {
			std::mt19937_64 rng(t + 1);
			for (uint64_t i = 0; i < kOpsPerThread; i++) {
				const size_t first = rng() % (kPages - 8);
				const size_t npages = 1 + rng() % 8;
				const uint32_t access = 1u << (rng() % 3);
				const uint64_t started = model.completed();
				Entry *e = nullptr;
				const int rc = cache->get(at(first), npages * page() - 1, access,
							  &e);
				if (rc != 0) {
					failures++;
					continue;
				}
				bool ok = e->covers(addr(first), addr(first + npages)) &&
					  (e->access & access) == access;
				// Registered after every unmap of its pages that
				// completed before this get started?
				const uint64_t made = reg_of(e).made;
				for (size_t p = (e->start - addr(0)) / page();
				     p < (e->end - addr(0)) / page(); p++) {
					const uint64_t u = model.last_unmap(p);
					if (u && u <= started && made < u)
						ok = false;
				}
				{
					// Nothing is deregistered while in use.
					std::lock_guard<std::mutex> g(regs.m);
					if (!regs.live.count(reg_of(e).serial))
						ok = false;
				}
				if (!ok)
					failures++;
				if (rng() % 4 == 0)
					std::this_thread::yield();
				// Handed on: the next thread's mailbox gets it, and
				// this thread puts what its own mailbox held.
				if (rng() % 4 == 0)
					e = mailbox[(t + 1) % kThreads].exchange(e);
				if (e)
					cache->put(e);
				ops++;
			}
		});
	}
	std::thread unmapper([&] {
		std::mt19937_64 rng(99);
		while (!stop.load()) {
			const size_t first = rng() % (kPages - 16);
			const size_t last = first + rng() % 16;
			std::lock_guard<std::mutex> g(unmap_mutex);
			const uint64_t stamp = model.begin_unmap();
			mon->unmap(addr(first), addr(last + 1));
			model.unmapped(first, last, stamp);
			std::this_thread::sleep_for(std::chrono::microseconds(20));
		}
	});
	std::atomic<int> bad_children{0}, children{0};
	std::thread forker([&] {
		while (!stop.load()) {
			const pid_t pid = fork();
			if (pid == 0) {
				mrn_stats s{};
				cache->stats(&s);
				_exit(s.entries == 0 && s.pinned_bytes == 0 ? 0 : 1);
			}
			int status = 0;
			if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
			    WEXITSTATUS(status) != 0) {
				bad_children++;
				fprintf(stderr, "forked child: wait status %#x\n", status);
			}
			children++;
			std::this_thread::sleep_for(std::chrono::milliseconds(5));
		}
	});
	for (auto &t : threads)
		t.join();
	stop = true;
	unmapper.join();
	forker.join();
	for (auto &m : mailbox)
		if (Entry *e = m.exchange(nullptr))
			cache->put(e);
	// Nobody holds anything now: counts that did not add up would leave
	// an entry busy (or have freed one early, which ASan sees).
	cache->flush();
	const mrn_stats end = stats();
	EXPECT_EQ(0u, end.entries) << "entries still busy after every put";
	EXPECT_EQ(0u, end.in_use_detached);
	EXPECT_EQ(0, bad_children.load()) << "of " << children.load() << " forked children";
	EXPECT_EQ(0u, failures.load());
	EXPECT_EQ(kThreads * kOpsPerThread, ops.load());
	const mrn_stats s = stats();
	EXPECT_GT(s.hits, 0u);
	EXPECT_GT(s.invalidations, 0u);
	RecordProperty("hits", std::to_string(s.hits));
}

INSTANTIATE_TEST_SUITE_P(Monitors, ModelTest, ::testing::Values(false, true),
			 [](const ::testing::TestParamInfo<bool> &i) {
				 return i.param ? "RangeMonitor" : "KernelMonitor";
			 });

} // namespace
} // namespace mrn::test

// SPDX-License-Identifier: BSD-3-Clause
//
// Stress in the guest (mrnotify.ko, rxe0, real ibv_reg_mr pinning): user
// threads get and put random sub-ranges of shared buffers through the cache
// while a mutator thread munmaps and remaps, mremaps, madvise(DONTNEED)s
// and forks. Every entry handed out is checked with the pagemap oracle: the
// pages it pinned must be the pages mapped now. A buffer is mutated only
// while no user holds it (a per-buffer lock), so any stale entry is the
// cache's fault, not a race the application made.
//
// MRNOTIFY_STRESS_OPS sets the number of operations (default 1,000,000).
#include "verbs_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace mrn::test {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kBuffers = 16;
constexpr size_t kBufPages = 8;

struct Buffer {
	std::shared_mutex lock;
	char *addr = nullptr;
};

char *map(void *at, size_t len)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	if (p == MAP_FAILED)
		throw std::runtime_error("mmap failed");
	std::memset(p, 7, len); // present, so the oracle sees frames
	return static_cast<char *>(p);
}

uint64_t ops_wanted()
{
	const char *s = std::getenv("MRNOTIFY_STRESS_OPS");
	return s ? std::strtoull(s, nullptr, 10) : 1000000;
}

TEST(CacheStress, NoStaleHitUnderUnmapsRemapsAndForks)
{
	RcLoopback rc("rxe0");
	VerbsCache cache(rc.pd(), MRN_MONITOR_KERNEL);
	const size_t len = kBufPages * kPage;
	std::vector<Buffer> bufs(kBuffers);
	for (auto &b : bufs)
		b.addr = map(nullptr, len);

	const uint64_t total = ops_wanted();
	std::atomic<uint64_t> ops{0}, checked{0}, stale{0}, mutations{0};
	std::atomic<bool> stop{false};

	auto user = [&](unsigned seed) {
		std::mt19937_64 rng(seed);
		while (ops.fetch_add(1) < total) {
			Buffer &b = bufs[rng() % kBuffers];
			const size_t first = rng() % kBufPages;
			const size_t n = 1 + rng() % (kBufPages - first);
			const size_t off = rng() % 64;
			std::shared_lock<std::shared_mutex> g(b.lock);
			char *p = b.addr + first * kPage + off;
			const size_t plen = n * kPage - off;
			mrn_entry_t *e = cache.get(p, plen);
			// The entry's pages at p's offset must be what is mapped.
			const auto &pinned = *VerbsCache::reg_of(e).pinned;
			const char *base = static_cast<char *>(mrn_entry_addr(e));
			const size_t skip = size_t(p - base) / kPage;
			std::vector<uint64_t> now(mrn_oracle_page_count(p, plen));
			if (mrn_oracle_read_pfns(p, plen, now.data()) == 0) {
				for (size_t i = 0; i < now.size(); i++)
					if (now[i] != pinned.pfns()[skip + i])
						stale++;
				checked++;
			}
			cache.put(e);
		}
	};
	auto mutator = [&] {
		std::mt19937_64 rng(1234);
		while (!stop.load()) {
			Buffer &b = bufs[rng() % kBuffers];
			{
				std::unique_lock<std::shared_mutex> g(b.lock);
				// Never munmap and then map at the same address here:
				// other threads mmap too (the cache's own tables) and
				// could be handed the hole in between. MAP_FIXED and
				// mremap over the live range replace it atomically.
				switch (rng() % 4) {
				case 0: // mmap MAP_FIXED over the live range
					map(b.addr, len);
					break;
				case 1: { // mremap new pages over the live range
					char *fresh = map(nullptr, len);
					if (mremap(fresh, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
						   b.addr) == MAP_FAILED)
						throw std::runtime_error("mremap failed");
					break;
				}
				case 2: { // zap some pages; touching them maps new ones
					const size_t pg = rng() % kBufPages;
					madvise(b.addr + pg * kPage, kPage, MADV_DONTNEED);
					std::memset(b.addr + pg * kPage, 9, kPage);
					break;
				}
				case 3: { // fork: must not disturb anything
					const pid_t pid = fork();
					if (pid == 0)
						_exit(0);
					int st;
					waitpid(pid, &st, 0);
					break;
				}
				}
			}
			mutations++;
			std::this_thread::sleep_for(std::chrono::milliseconds(20));
		}
	};

	std::thread m(mutator);
	std::vector<std::thread> users;
	for (unsigned t = 0; t < 3; t++)
		users.emplace_back(user, t + 1);
	for (auto &t : users)
		t.join();
	stop = true;
	m.join();

	const mrn_stats s = cache.stats();
	std::printf("operations %llu, checked %llu, stale pages %llu, mutations %llu, "
		    "hits %llu, misses %llu, invalidations %llu, retries %llu\n",
		    (unsigned long long)total, (unsigned long long)checked.load(),
		    (unsigned long long)stale.load(), (unsigned long long)mutations.load(),
		    (unsigned long long)s.hits, (unsigned long long)s.misses,
		    (unsigned long long)s.invalidations, (unsigned long long)s.retries);
	EXPECT_EQ(0u, stale.load());
	EXPECT_GE(checked.load(), total * 9 / 10);
	EXPECT_GT(mutations.load(), 10u);
	EXPECT_GT(s.invalidations, 0u);
	EXPECT_GT(s.hits, s.misses);
	for (auto &b : bufs)
		munmap(b.addr, len);
	cache.destroy();
	EXPECT_EQ(0, cache.live());
}

} // namespace
} // namespace mrn::test

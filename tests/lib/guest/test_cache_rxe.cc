// SPDX-License-Identifier: BSD-3-Clause
// The seed's scenario end to end, in the guest with mrnotify.ko and rxe0:
// register through the cache, RDMA-WRITE, munmap, mmap MAP_FIXED at the same
// address with new contents, get from the cache again, RDMA-WRITE: the
// process must see the second write. The same steps with a cache that hears
// of no unmaps (MRN_MONITOR_EXTERNAL, to which the test reports none: a cache whose
// memory hooks missed the unmap) lose it: that is what the test guards.
#include "verbs_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace mrn::test {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kPages = 4;

char *map(void *at, size_t len) { return map_anon(at, len); }

class CacheOnRxe : public ::testing::Test {
protected:
	RcLoopback rc{"rxe0"};
	std::vector<char> src = std::vector<char>(kPages * kPage);
	MrPtr src_mr = rc.reg_mr(src.data(), src.size());

	// RDMA-WRITE `c` into [dst, dst + len) through the cache's registration.
	void write_through(VerbsCache &cache, char *dst, size_t len, char c)
	{
		std::memset(src.data(), c, len);
		mrn_entry_t *e = cache.get(dst, len);
		rc.rdma_write(src.data(), src_mr->lkey, dst, VerbsCache::reg_of(e).mr->rkey, len);
		cache.put(e);
	}

	// The seed's scenario; returns whether the second write arrived.
	bool seed_scenario(VerbsCache &cache)
	{
		const size_t len = kPages * kPage;
		char *buf = map(nullptr, len);
		EXPECT_NE(nullptr, buf);
		std::memset(buf, '.', len);
		write_through(cache, buf, len, 'A');
		EXPECT_TRUE(all_are(buf, len, 'A')) << "the first RDMA WRITE did not arrive";
		EXPECT_EQ(0, munmap(buf, len));
		EXPECT_EQ(buf, map(buf, len));
		std::memset(buf, 'n', len);
		write_through(cache, buf, len, 'B');
		const bool arrived = all_are(buf, len, 'B');
		munmap(buf, len);
		return arrived;
	}
};

TEST_F(CacheOnRxe, SeedScenarioWithTheKernelMonitor)
{
	VerbsCache cache(rc.pd(), MRN_MONITOR_KERNEL);
	ASSERT_EQ(MRN_MONITOR_KERNEL, mrn_cache_monitor(cache.raw()));
	EXPECT_TRUE(seed_scenario(cache)) << "the second write went to the old pages";
	const mrn_stats s = cache.stats();
	EXPECT_EQ(1u, s.invalidations);
	EXPECT_EQ(2u, s.misses);
}

TEST_F(CacheOnRxe, SeedScenarioWithoutInvalidationLosesTheWrite)
{
	VerbsCache cache(rc.pd(), MRN_MONITOR_EXTERNAL);
	EXPECT_FALSE(seed_scenario(cache)) << "a cache without invalidation should be stale here";
	EXPECT_EQ(1u, cache.stats().hits);
}

TEST_F(CacheOnRxe, HitsReuseTheRegistrationAndItIsCurrent)
{
	VerbsCache cache(rc.pd(), MRN_MONITOR_KERNEL);
	const size_t len = 2 * kPage;
	char *buf = map(nullptr, len);
	ASSERT_NE(nullptr, buf);
	std::memset(buf, 0, len);
	for (int i = 0; i < 20; i++)
		write_through(cache, buf, len, char('a' + i));
	EXPECT_TRUE(all_are(buf, len, char('a' + 19)));
	EXPECT_EQ(1u, cache.registrations());
	mrn_entry_t *e = cache.get(buf, len);
	EXPECT_EQ(0, VerbsCache::reg_of(e).pinned->stale_pages());
	cache.put(e);
	munmap(buf, len);
}

// Every unmap path the module knows invalidates the cached registration.
TEST_F(CacheOnRxe, MadviseDontneedAndMremapAreCaught)
{
	VerbsCache cache(rc.pd(), MRN_MONITOR_KERNEL);
	const size_t len = kPages * kPage;
	char *buf = map(nullptr, len);
	ASSERT_NE(nullptr, buf);
	std::memset(buf, 1, len);
	write_through(cache, buf, len, 'x');
	ASSERT_EQ(0, madvise(buf + kPage, kPage, MADV_DONTNEED));
	std::memset(buf, 0, len);
	write_through(cache, buf, len, 'y');
	EXPECT_TRUE(all_are(buf, len, 'y')) << "stale after madvise(DONTNEED)";

	// Move the pages away and map new ones in their place.
	char *elsewhere = map(nullptr, len);
	ASSERT_EQ(elsewhere, mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, elsewhere));
	ASSERT_EQ(buf, map(buf, len));
	write_through(cache, buf, len, 'z');
	EXPECT_TRUE(all_are(buf, len, 'z')) << "stale after mremap";
	EXPECT_TRUE(all_are(elsewhere, len, 'y'));
	EXPECT_EQ(2u, cache.stats().invalidations);
	munmap(buf, len);
	munmap(elsewhere, len);
}

// An invalidation of one entry leaves hits on the others without a drain:
// each checks its own validity word (the kernel's, per registration) once
// the generation moved. The entry that was invalidated still misses, and
// its write arrives. Negative control: a module without validity words
// (or a library that ignores them) drains at the first hit after the
// invalidation: drains 1 more, valid_word_hits 0.
TEST_F(CacheOnRxe, AnInvalidationOfOneEntryLeavesHitsOnTheOthers)
{
	VerbsCache cache(rc.pd(), MRN_MONITOR_KERNEL);
	const size_t len = kPage;
	char *bufs[3];
	for (auto &b : bufs) {
		b = map(nullptr, len);
		ASSERT_NE(nullptr, b);
		write_through(cache, b, len, 'a');
	}
	const mrn_stats before = cache.stats();
	ASSERT_EQ(0, madvise(bufs[1], len, MADV_DONTNEED));
	for (int round = 0; round < 5; round++) {
		write_through(cache, bufs[0], len, char('b' + round));
		write_through(cache, bufs[2], len, char('b' + round));
	}
	const mrn_stats mid = cache.stats();
	EXPECT_EQ(before.drains, mid.drains) << "a hit on an untouched entry drained";
	EXPECT_EQ(10u, mid.valid_word_hits - before.valid_word_hits);
	EXPECT_EQ(before.misses, mid.misses);
	std::memset(bufs[1], 0, len);
	write_through(cache, bufs[1], len, 'z');
	EXPECT_TRUE(all_are(bufs[1], len, 'z')) << "stale after madvise(DONTNEED)";
	const mrn_stats after = cache.stats();
	EXPECT_EQ(mid.drains + 1, after.drains);
	EXPECT_EQ(mid.misses + 1, after.misses);
	EXPECT_EQ(before.invalidations + 1, after.invalidations);
	EXPECT_TRUE(all_are(bufs[0], len, 'f'));
	for (auto &b : bufs)
		munmap(b, len);
}

TEST_F(CacheOnRxe, EverythingIsDeregisteredAtDestroy)
{
	VerbsCache cache(rc.pd(), MRN_MONITOR_KERNEL);
	char *buf = map(nullptr, 16 * kPage);
	for (size_t i = 0; i < 8; i++)
		write_through(cache, buf + i * kPage, kPage, 'q');
	EXPECT_EQ(8, cache.live());
	// Half of them unmapped: dropped at the next use or at destroy.
	munmap(buf, 4 * kPage);
	cache.destroy();
	EXPECT_EQ(0, cache.live());
	munmap(buf + 4 * kPage, 12 * kPage);
}

// THP "always" and rdma-core's fork support (ibv_fork_init, which UCX's
// defaults and btl/openib turn on): ibv_reg_mr then advises every range
// MADV_DONTFORK, which splits huge pages, which the kernel reports as a CLEAR
// of 2 MiB. Fixed buffers reused in a loop must stay cached: in the steady
// state the kernel-monitored cache hits as often as a blind one (>= 99%).
// Run with RDMAV_FORK_SAFE=1 (tests/Makefile.am does) so that libibverbs
// enables fork support before the first registration.
// Whether the mapping holding p is advised MADV_DONTFORK ("dc" in smaps).
bool vma_is_dontfork(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return false;
	const uintptr_t a = reinterpret_cast<uintptr_t>(p);
	char line[512];
	bool inside = false, dc = false;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t s, e;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &s, &e) == 2 && strchr(line, ' ') &&
		    line[strspn(line, "0123456789abcdef")] == '-') {
			inside = s <= a && a < e;
			continue;
		}
		if (inside && strncmp(line, "VmFlags:", 8) == 0) {
			dc = strstr(line, " dc") != nullptr;
			break;
		}
	}
	fclose(f);
	return dc;
}

class Thp {
public:
	Thp()
	{
		FILE *f = fopen(kPath, "r");
		char buf[128] = "";
		if (f && fgets(buf, sizeof(buf), f)) {
			const char *l = strchr(buf, '['), *r = l ? strchr(l, ']') : nullptr;
			if (l && r)
				old_.assign(l + 1, r);
		}
		if (f)
			fclose(f);
		ok_ = !old_.empty() && set("always");
	}
	~Thp()
	{
		if (ok_)
			set(old_.c_str());
	}
	bool ok() const { return ok_; }

private:
	static bool set(const char *mode)
	{
		FILE *f = fopen(kPath, "w");
		if (!f)
			return false;
		const bool ok = fputs(mode, f) >= 0;
		return fclose(f) == 0 && ok;
	}
	static constexpr const char *kPath = "/sys/kernel/mm/transparent_hugepage/enabled";
	std::string old_;
	bool ok_ = false;
};

TEST_F(CacheOnRxe, HugePagesAndForkInitKeepFixedBuffersCached)
{
	{
		// Does ibv_reg_mr advise here? (rdma-core reports
		// IBV_FORK_UNNEEDED on this kernel whether it does or not.)
		char *probe = map(nullptr, kPage);
		ASSERT_NE(nullptr, probe);
		MrPtr mr = rc.reg_mr(probe, kPage);
		const bool advised = vma_is_dontfork(probe);
		mr.reset();
		munmap(probe, kPage);
		if (!advised)
			GTEST_SKIP()
				<< "ibv_reg_mr does not madvise(DONTFORK) here (rdma-core's fork "
				   "support is off: run with RDMAV_FORK_SAFE=1)";
	}
	Thp thp;
	if (!thp.ok())
		GTEST_SKIP() << "cannot set transparent_hugepage/enabled to always";
	// 32 MiB on a 2 MiB boundary, touched: backed by huge pages. Buffers
	// of 1 B to 4 MiB share them, as an application's send and receive
	// buffers do.
	const size_t huge = size_t(2) << 20, region = 16 * huge;
	char *raw = map(nullptr, region + huge);
	ASSERT_NE(nullptr, raw);
	char *base = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + huge - 1) &
					      ~(huge - 1));
	std::memset(base, 1, region);
	std::vector<std::pair<size_t, size_t>> bufs; // offset, length
	size_t off = 0;
	for (size_t len = 1; len <= (size_t(4) << 20); len *= 8) {
		bufs.emplace_back(off, len);
		off += (len + 3 * kPage) & ~(kPage - 1); // a page or more apart
	}
	const int kRounds = 50;
	auto run = [&](VerbsCache &cache) {
		uint64_t misses_after_first = 0;
		for (int round = 0; round < kRounds; round++) {
			const uint64_t before = cache.stats().misses;
			for (auto [o, l] : bufs)
				cache.put(cache.get(base + o, l));
			if (round > 0)
				misses_after_first += cache.stats().misses - before;
		}
		return misses_after_first;
	};
	uint64_t ours_steady, blind_steady;
	mrn_stats ours_stats;
	{
		VerbsCache blind(rc.pd(), MRN_MONITOR_EXTERNAL);
		blind_steady = run(blind);
	}
	{
		VerbsCache ours(rc.pd(), MRN_MONITOR_KERNEL);
		ours_steady = run(ours);
		ours_stats = ours.stats();
	}
	const double gets = double((kRounds - 1) * bufs.size());
	const double ours_hits = gets - double(ours_steady),
		     blind_hits = gets - double(blind_steady);
	std::printf("# steady state, %zu buffers x %d rounds: kernel monitor %" PRIu64
		    " misses, blind cache %" PRIu64 "; hits %.1f%% of the blind cache's; "
		    "invalidations %" PRIu64 ", retries %" PRIu64 "\n",
		    bufs.size(), kRounds - 1, ours_steady, blind_steady,
		    100 * ours_hits / blind_hits, ours_stats.invalidations, ours_stats.retries);
	// The splits happened (registrations being made were invalidated and
	// made again), or this test shows nothing.
	EXPECT_GT(ours_stats.retries + ours_stats.invalidations, 0u)
		<< "no huge page split reached the cache";
	EXPECT_GE(ours_hits, 0.99 * blind_hits) << "huge page splits thrash the cache";
	munmap(raw, region + huge);
}

} // namespace
} // namespace mrn::test

// SPDX-License-Identifier: BSD-3-Clause
// The seed's scenario end to end, in the guest with mrnotify.ko and rxe0:
// register through the cache, RDMA-WRITE, munmap, mmap MAP_FIXED at the same
// address with new contents, get from the cache again, RDMA-WRITE: the
// process must see the second write. The same steps with a cache that hears
// of no unmaps (test-only monitor) lose it: that is what the test guards.
#include "verbs_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace mrn::test {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kPages = 4;

char *map(void *at, size_t len)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

bool all_are(const char *p, size_t len, char c)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != c)
			return false;
	return true;
}

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
	VerbsCache cache(rc.pd(), MRN_MONITOR_TEST_NO_INVALIDATION);
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

} // namespace
} // namespace mrn::test

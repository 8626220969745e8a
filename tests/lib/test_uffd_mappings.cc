// SPDX-License-Identifier: BSD-3-Clause
// The userfaultfd monitor against the host kernel, as the application sees
// it: its mappings (vm.max_map_count), its own userfaultfd, mremap, fork and
// transparent huge pages (issue #21).
#include "cache.h"
#include "mappings_left.h"
#include "monitor.h"
#include "serial_cache.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cinttypes>
#include <cstdint>
#include <thread>
#include <utility>
#include <fstream>
#include <string>

namespace mrn::test {
namespace {

constexpr size_t kRegs = 40000;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
const size_t kPage = page_size();

bool uffd_available()
{
	const int fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* user mode */));
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

// The monitor before issue #21: every cached range registered exactly, with
// no bound. Only this test builds it, as the negative control.
bool make_exact_range_cache(CacheUnderTest *out)
{
	mrn_config cfg;
	if (mrn_config_init(&cfg) != 0)
		return false;
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	std::unique_ptr<Cache> c;
	const int rc = Cache::create(
		cfg,
		[](std::unique_ptr<Monitor> *m, std::string *why) {
			UffdOptions old;
			old.granule = kPage;
			old.max_ranges = UINT64_MAX;
			int err = 0;
			*m = make_uffd_monitor(old, &err, why);
			return *m ? 0 : err;
		},
		&c);
	if (rc != 0)
		return false;
	auto cache = std::shared_ptr<Cache>(std::move(c));
	out->use = [cache](void *p, size_t len) {
		Entry *e = nullptr;
		const int r = cache->get(p, len, 1, &e);
		if (r == 0)
			cache->put(e);
		return r;
	};
	out->stats = [cache](mrn_stats *s) { cache->stats(s); };
	out->destroy = [cache]() mutable { cache.reset(); };
	return true;
}

class UffdMappings : public ::testing::TestWithParam<Layout> {
protected:
	void SetUp() override
	{
		if (!uffd_available())
			GTEST_SKIP() << "userfaultfd is not available here";
	}
};

// The scenario of #21 with the default configuration: every one of the 200
// mmaps works, malloc works, and destroying the cache gives the mappings
// back. Before, with alternating pages, 199 of 200 mmaps failed.
TEST_P(UffdMappings, ApplicationKeepsItsMappings)
{
	const MappingsLeft r = run_mappings_left(GetParam(), kRegs, [](CacheUnderTest *c) {
		return make_public_cache(MRN_MONITOR_UFFD, c);
	});
	ASSERT_EQ(0, r.status);
	EXPECT_EQ(kRegs, r.registrations);
	EXPECT_EQ(0u, r.mmaps_failed) << "of 200, with " << r.maps_registered << " mappings";
	EXPECT_TRUE(r.malloc_ok);
	EXPECT_EQ(0u, r.stats.uncached) << "every registration fits the budget here";
	EXPECT_EQ(0u, r.stats.uffd_out_of_budget);
	// A 2 MiB granule holds 512 pages: far fewer ranges than registrations.
	EXPECT_LE(r.stats.uffd_ranges, kRegs / 64);
	// The application's mappings split at most at both ends of each uffd
	// range, and are whole again once the cache is gone; the old monitor
	// split them once per registration (the control below).
	EXPECT_LE(r.maps_registered, r.maps_before + 2 * r.stats.uffd_ranges);
	EXPECT_EQ(r.maps_destroyed, r.maps_before) << "mappings left split after the cache went";
	RecordProperty("maps_before", std::to_string(r.maps_before));
	RecordProperty("maps_registered", std::to_string(r.maps_registered));
	RecordProperty("uffd_ranges", std::to_string(r.stats.uffd_ranges));
	std::printf("[ layout %d ] the application's mappings: %zu before, %zu with %zu "
		    "registrations, %zu after destroy; uffd_ranges %" PRIu64
		    "; the process's: %zu before, %zu with\n",
		    int(GetParam()), r.maps_before, r.maps_registered, r.registrations,
		    r.maps_destroyed, r.stats.uffd_ranges, r.process_maps_before,
		    r.process_maps_registered);
}

INSTANTIATE_TEST_SUITE_P(Layouts, UffdMappings,
			 ::testing::Values(Layout::kAlternatingPages, Layout::kAdjacentPages,
					   Layout::kManyMappings));

// The negative control: the old monitor (exact ranges, no bound) on the
// same alternating pages uses the mappings up.
TEST(UffdMappingsControl, ExactRangesUseTheMappingsUp)
{
	if (!uffd_available())
		GTEST_SKIP() << "userfaultfd is not available here";
	if (kSanitized)
		GTEST_SKIP() << "out of mappings, the sanitizer's own allocator kills the child; "
				"the plain build runs this control";
	const MappingsLeft r =
		run_mappings_left(Layout::kAlternatingPages, kRegs, make_exact_range_cache);
	ASSERT_EQ(0, r.status);
	std::printf("[ control ] exact ranges: the application's mappings %zu before, %zu with "
		    "%zu registrations (the process's %zu); %zu of 200 mmaps failed\n",
		    r.maps_before, r.maps_registered, r.registrations, r.process_maps_registered,
		    r.mmaps_failed);
	EXPECT_GT(r.mmaps_failed, 100u) << "the old monitor left the mappings alone?";
}

// Past the bound, registrations are uncached rather than splitting more
// mappings: shown with a bound of 100 and one cached page every 4 MiB.
TEST(UffdMappingsBudget, PastTheBoundRegistrationsAreUncached)
{
	if (!uffd_available())
		GTEST_SKIP() << "userfaultfd is not available here";
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	std::unique_ptr<Cache> cache;
	ASSERT_EQ(0, Cache::create(
			     cfg,
			     [](std::unique_ptr<Monitor> *m, std::string *why) {
				     UffdOptions o = UffdOptions::defaults();
				     o.max_ranges = 100;
				     int err = 0;
				     *m = make_uffd_monitor(o, &err, why);
				     return *m ? 0 : err;
			     },
			     &cache));
	const size_t len = size_t(1) << 30;
	char *mem = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
	ASSERT_NE(MAP_FAILED, mem);
	const std::vector<std::pair<char *, size_t>> app{{mem, len}};
	ASSERT_EQ(1u, mapping_count_in(app));
	for (size_t off = 0; off < len; off += 4 << 20) {
		Entry *e = nullptr;
		ASSERT_EQ(0, cache->get(mem + off, kPage, 1, &e));
		cache->put(e);
	}
	mrn_stats s{};
	cache->stats(&s);
	EXPECT_EQ(100u, s.uffd_ranges);
	EXPECT_EQ(256u - 100u, s.uffd_out_of_budget);
	EXPECT_EQ(s.uffd_out_of_budget, s.uncached);
	EXPECT_LE(mapping_count_in(app), 1u + 2 * 100) << "split past the bound";
	cache.reset();
	munmap(mem, len);
}

// --- the application's own view ------------------------------------------------

class UffdApp : public ::testing::Test, protected SerialCache {
protected:
	void SetUp() override
	{
		if (!uffd_available())
			GTEST_SKIP() << "userfaultfd is not available here";
		ASSERT_EQ(0, create(MRN_MONITOR_UFFD));
		// 4 MiB, 2 MiB aligned: two whole granules.
		raw = static_cast<char *>(mmap(nullptr, 6 << 20, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		ASSERT_NE(MAP_FAILED, raw);
		mem = reinterpret_cast<char *>((uintptr_t(raw) + (2 << 20) - 1) &
					       ~uintptr_t((2 << 20) - 1));
		memset(mem, 7, 4 << 20);
	}
	void TearDown() override
	{
		destroy();
		if (raw)
			munmap(raw, 6 << 20);
	}
	char *raw = nullptr, *mem = nullptr;
};

int own_uffd()
{
	const int fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1));
	if (fd < 0)
		return -1;
	uffdio_api api{};
	api.api = UFFD_API;
	if (ioctl(fd, UFFDIO_API, &api) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int uffd_register(int fd, void *p, size_t len, uint64_t mode)
{
	uffdio_register r{};
	r.range.start = uintptr_t(p);
	r.range.len = len;
	r.mode = mode;
	return ioctl(fd, UFFDIO_REGISTER, &r) == 0 ? 0 : -errno;
}

// Memory the application registered with its own userfaultfd first stays
// its own: the cache registers it uncached, and the application's uffd
// still serves its faults.
TEST_F(UffdApp, ApplicationsOwnUffdComesFirst)
{
	const int fd = own_uffd();
	ASSERT_GE(fd, 0);
	char *theirs = mem + (2 << 20);
	ASSERT_EQ(0, madvise(theirs, kPage, MADV_DONTNEED));
	ASSERT_EQ(0, uffd_register(fd, theirs, kPage, UFFDIO_REGISTER_MODE_MISSING));
	EXPECT_EQ(1, use(theirs, kPage));
	EXPECT_EQ(2, use(theirs, kPage)) << "cached memory another uffd owns";
	EXPECT_EQ(2u, stats().uncached);
	// Its missing-page fault still reaches the application's uffd.
	std::thread toucher([&] { theirs[0] = 1; });
	pollfd p{fd, POLLIN, 0};
	ASSERT_EQ(1, poll(&p, 1, 5000)) << "the application's uffd got no fault";
	uffd_msg msg{};
	ASSERT_EQ(ssize_t(sizeof(msg)), read(fd, &msg, sizeof(msg)));
	EXPECT_EQ(UFFD_EVENT_PAGEFAULT, msg.event);
	static char zero_page[1 << 16];
	uffdio_copy copy{};
	copy.dst = uintptr_t(theirs);
	copy.src = uintptr_t(zero_page);
	copy.len = kPage;
	ASSERT_EQ(0, ioctl(fd, UFFDIO_COPY, &copy));
	toucher.join();
	close(fd);
}

// The other order, documented in docs/libmrnotify.md: while the cache keeps
// a registration, its 2 MiB granule belongs to the cache's uffd, and the
// application's own registration there fails with EBUSY (the kernel lets
// one userfaultfd own a VMA). Once the cache lets go (flush, destroy), it
// works.
TEST_F(UffdApp, ApplicationsUffdNearCachedMemoryWaitsForTheCache)
{
	const int fd = own_uffd();
	ASSERT_GE(fd, 0);
	EXPECT_EQ(1, use(mem, kPage));
	EXPECT_EQ(-EBUSY, uffd_register(fd, mem + 64 * kPage, kPage, UFFDIO_REGISTER_MODE_MISSING));
	// The next granule is the application's to take.
	EXPECT_EQ(0, uffd_register(fd, mem + (2 << 20), kPage, UFFDIO_REGISTER_MODE_MISSING));
	EXPECT_EQ(1, mrn_flush(cache));
	EXPECT_EQ(0u, stats().uffd_ranges);
	EXPECT_EQ(0, uffd_register(fd, mem + 64 * kPage, kPage, UFFDIO_REGISTER_MODE_MISSING));
	close(fd);
}

// mremap of a cached range: the entry is invalidated, the data moves as
// without the library, and the new address caches anew.
TEST_F(UffdApp, MremapMovesDataAndInvalidates)
{
	char *src = mem + 4 * kPage;
	src[0] = 42;
	const int first = use(src, 2 * kPage);
	char *dst = static_cast<char *>(mmap(nullptr, 2 * kPage, PROT_NONE,
					     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(MAP_FAILED, dst);
	ASSERT_EQ(dst, mremap(src, 2 * kPage, 2 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, dst));
	EXPECT_EQ(42, dst[0]);
	use(mem, kPage); // drains
	EXPECT_EQ(1u, stats().invalidations);
	const int moved = use(dst, 2 * kPage);
	EXPECT_NE(first, moved);
	EXPECT_EQ(moved, use(dst, 2 * kPage));
	// The hole mremap left is the application's: mapping it again works.
	ASSERT_EQ(src, mmap(src, 2 * kPage, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	EXPECT_NE(first, use(src, 2 * kPage));
	munmap(dst, 2 * kPage);
}

// fork with cached ranges: the child's mappings are plain (no uffd: it
// unmaps, maps and mallocs without waiting on the parent's monitor
// thread), and the parent's cache still hears of its own unmaps.
TEST_F(UffdApp, ForkedChildUnmapsFreely)
{
	EXPECT_EQ(1, use(mem, 8 * kPage));
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		alarm(20); // a child that waited on the parent's thread would hang
		if (munmap(mem, 8 * kPage) != 0)
			_exit(1);
		void *p = mmap(mem, 8 * kPage, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (p != mem)
			_exit(2);
		void *m = malloc(16 << 20);
		_exit(m ? 0 : 3);
	}
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
	EXPECT_EQ(7, mem[0]) << "the child's unmap reached the parent";
	EXPECT_EQ(1, use(mem, 8 * kPage));
	ASSERT_EQ(0, madvise(mem, kPage, MADV_DONTNEED));
	EXPECT_EQ(2, use(mem, 8 * kPage));
}

// AnonHugePages of the mappings that overlap [start, end), in KiB (smaps).
long huge_kib_in(const void *start, const void *end)
{
	std::ifstream smaps("/proc/self/smaps");
	std::string line;
	bool in = false;
	long sum = 0;
	while (std::getline(smaps, line)) {
		uintptr_t s, e;
		// A mapping's first line starts with its range; the field
		// lines with a name ("AnonHugePages:" fails at the 'n').
		if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &s, &e) == 2) {
			in = s < uintptr_t(end) && uintptr_t(start) < e;
			continue;
		}
		long kib;
		if (in && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kib) == 1)
			sum += kib;
	}
	return sum;
}

// Caches one page inside a huge page; returns the huge KiB of the 4 MiB
// around it before and after (-1: no huge pages here).
std::pair<long, long> huge_kib_around_cached_page(CacheUnderTest &cache)
{
	char *thp = static_cast<char *>(mmap(nullptr, 8 << 20, PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (thp == MAP_FAILED)
		return {-1, -1};
	char *huge = reinterpret_cast<char *>((uintptr_t(thp) + (2 << 20) - 1) &
					      ~uintptr_t((2 << 20) - 1));
	std::pair<long, long> r{-1, -1};
	if (madvise(huge, 4 << 20, MADV_HUGEPAGE) == 0) {
		memset(huge, 1, 4 << 20);
		r.first = huge_kib_in(huge, huge + (4 << 20));
		if (cache.use(huge + 100 * kPage, kPage) == 0)
			r.second = huge_kib_in(huge, huge + (4 << 20));
	}
	munmap(thp, 8 << 20);
	return r;
}

// Caching a page inside a huge page leaves the huge page whole: the granule
// is the huge page, so the mapping splits only at its edges.
TEST(UffdHugePages, StayWhole)
{
	if (!uffd_available())
		GTEST_SKIP() << "userfaultfd is not available here";
	CacheUnderTest cache;
	ASSERT_TRUE(make_public_cache(MRN_MONITOR_UFFD, &cache));
	const auto [before, after] = huge_kib_around_cached_page(cache);
	cache.destroy();
	if (before < 2048)
		GTEST_SKIP() << "the kernel gave no huge page";
	EXPECT_EQ(before, after) << "the cached page split its huge page";
}

// The negative control: the old monitor's exact range splits it.
TEST(UffdHugePagesControl, ExactRangeSplitsTheHugePage)
{
	if (!uffd_available())
		GTEST_SKIP() << "userfaultfd is not available here";
	CacheUnderTest cache;
	ASSERT_TRUE(make_exact_range_cache(&cache));
	const auto [before, after] = huge_kib_around_cached_page(cache);
	cache.destroy();
	if (before < 2048)
		GTEST_SKIP() << "the kernel gave no huge page";
	EXPECT_LT(after, before);
}

} // namespace
} // namespace mrn::test

// SPDX-License-Identifier: BSD-3-Clause
// The public C API: configuration from the environment, and the cache with
// the real userfaultfd monitor on the host kernel (no module needed).
#include "mrnotify.h"
#include "serial_cache.h"

#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

struct EnvGuard {
	explicit EnvGuard(const char *name, const char *value) : name_(name)
	{
		if (const char *old = getenv(name))
			old_ = old, had_ = true;
		setenv(name, value, 1);
	}
	~EnvGuard()
	{
		if (had_)
			setenv(name_, old_.c_str(), 1);
		else
			unsetenv(name_);
	}
	const char *name_;
	std::string old_;
	bool had_ = false;
};

TEST(Config, Defaults)
{
	mrn_config c;
	ASSERT_EQ(0, mrn_config_init(&c));
	EXPECT_EQ(sizeof(c), c.size);
	EXPECT_EQ(MRN_MONITOR_AUTO, c.monitor);
	EXPECT_EQ(1, c.leave_pinned);
	EXPECT_EQ(MRN_FORK_AUTO, c.fork_policy);
	EXPECT_EQ(0u, c.max_pinned_bytes);
}

TEST(Config, EnvironmentIsRead)
{
	EnvGuard a("MRNOTIFY_MONITOR", "uffd"), b("MRNOTIFY_MAX_PINNED", "64M"),
		d("MRNOTIFY_MAX_ENTRIES", "100"), e("MRNOTIFY_LEAVE_PINNED", "0"),
		f("MRNOTIFY_FORK", "none"), g("MRNOTIFY_VERBOSE", "2"), h("MRNOTIFY_STATS", "yes");
	mrn_config c;
	ASSERT_EQ(0, mrn_config_init(&c));
	EXPECT_EQ(MRN_MONITOR_UFFD, c.monitor);
	EXPECT_EQ(64u << 20, c.max_pinned_bytes);
	EXPECT_EQ(100u, c.max_entries);
	EXPECT_EQ(0, c.leave_pinned);
	EXPECT_EQ(MRN_FORK_NONE, c.fork_policy);
	EXPECT_EQ(2, c.verbose);
	EXPECT_EQ(1, c.print_stats);
}

TEST(Config, BadValuesAreErrors)
{
	// Pairs, not a map: the same variable appears with several bad values.
	const std::vector<std::pair<std::string, std::string>> bad = {
		{"MRNOTIFY_MONITOR", "kernal"},     {"MRNOTIFY_MONITOR", "test-no-invalidation"},
		{"MRNOTIFY_MONITOR", "external"},   {"MRNOTIFY_MAX_PINNED", "-1"},
		{"MRNOTIFY_MAX_PINNED", "12Q"},     {"MRNOTIFY_MAX_PINNED", ""},
		{"MRNOTIFY_MAX_ENTRIES", "-5"},     {"MRNOTIFY_MAX_ENTRIES", "1e3"},
		{"MRNOTIFY_LEAVE_PINNED", "maybe"}, {"MRNOTIFY_FORK", "copy"},
		{"MRNOTIFY_VERBOSE", "9"},
	};
	for (const auto &[var, value] : bad) {
		EnvGuard g(var.c_str(), value.c_str());
		mrn_config c;
		EXPECT_EQ(-EINVAL, mrn_config_init(&c)) << var << "=" << value;
	}
}

TEST(Config, Sizes)
{
	uint64_t v = 0;
	EXPECT_EQ(0, mrn_size_from_string("0", &v));
	EXPECT_EQ(0u, v);
	EXPECT_EQ(0, mrn_size_from_string("4k", &v));
	EXPECT_EQ(4096u, v);
	EXPECT_EQ(0, mrn_size_from_string("2GiB", &v));
	EXPECT_EQ(2ull << 30, v);
	EXPECT_EQ(-EINVAL, mrn_size_from_string("99999999999T", &v));
	EXPECT_EQ(-EINVAL, mrn_size_from_string("k", &v));
}

TEST(Api, NullArgumentsAreErrorsNotCrashes)
{
	mrn_entry_t *e = nullptr;
	EXPECT_EQ(-EINVAL, mrn_get(nullptr, &e, 1, 0, nullptr, &e));
	EXPECT_EQ(-EINVAL, mrn_find(nullptr, &e, 1, &e));
	EXPECT_EQ(-EINVAL, mrn_invalidate_range(nullptr, &e, 1));
	EXPECT_EQ(-EINVAL, mrn_flush(nullptr));
	EXPECT_EQ(0, mrn_evict_one(nullptr));
	EXPECT_EQ(-EINVAL, mrn_config_init(nullptr));
	EXPECT_EQ(-EINVAL, mrn_cache_create(nullptr, nullptr));
	mrn_put(nullptr, nullptr);
	mrn_cache_destroy(nullptr);
	mrn_cache_print_stats(nullptr);
	EXPECT_EQ(0u, mrn_cache_bytes_per_entry(nullptr));
	EXPECT_EQ(MRN_MONITOR_NONE, mrn_cache_monitor(nullptr));
	EXPECT_EQ(nullptr, mrn_entry_payload(nullptr));
	EXPECT_EQ(nullptr, mrn_entry_addr(nullptr));
	EXPECT_EQ(0u, mrn_entry_length(nullptr));
	EXPECT_EQ(0u, mrn_entry_access(nullptr));
	EXPECT_EQ(nullptr, mrn_entry_from_payload(nullptr));
	EXPECT_EQ(nullptr, mrn_watch_generation(nullptr));
}

// The per-call argument of mrn_get reaches the register function of that
// call (the Open MPI glue passes its module and flags this way).
TEST(Api, PerCallArgumentReachesTheRegisterFunction)
{
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	cfg.monitor = MRN_MONITOR_NONE;
	cfg.payload_size = sizeof(void *);
	cfg.reg = [](void *, void *arg, void *, size_t, uint32_t, void *payload) {
		*static_cast<void **>(payload) = arg;
		return 0;
	};
	cfg.dereg = [](void *, void *) { return 0; };
	mrn_cache_t *cache = nullptr;
	ASSERT_EQ(0, mrn_cache_create(&cfg, &cache));
	static char page[8192] __attribute__((aligned(4096)));
	int first = 0, second = 0;
	mrn_entry_t *a = nullptr, *b = nullptr;
	ASSERT_EQ(0, mrn_get(cache, page, 1, 1, &first, &a));
	ASSERT_EQ(0, mrn_get(cache, page + 4096, 1, 1, &second, &b));
	EXPECT_EQ(&first, *static_cast<void **>(mrn_entry_payload(a)));
	EXPECT_EQ(&second, *static_cast<void **>(mrn_entry_payload(b)));
	mrn_put(cache, a);
	mrn_put(cache, b);
	mrn_cache_destroy(cache);
}

TEST(Create, RejectsBadConfigurations)
{
	mrn_cache_t *c = nullptr;
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	EXPECT_EQ(-EINVAL, mrn_cache_create(&cfg, &c)); // no register functions
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	cfg.payload_size = 1 << 20;
	EXPECT_EQ(-EINVAL, mrn_cache_create(&cfg, &c));
	cfg.payload_size = 8;
	cfg.monitor = static_cast<mrn_monitor_t>(42);
	EXPECT_EQ(-EINVAL, mrn_cache_create(&cfg, &c));
	cfg.monitor = MRN_MONITOR_NONE;
	cfg.fork_policy = static_cast<mrn_fork_policy_t>(7);
	EXPECT_EQ(-EINVAL, mrn_cache_create(&cfg, &c));
	cfg.fork_policy = MRN_FORK_AUTO;
	cfg.monitor = MRN_MONITOR_KERNEL;
	if (access("/dev/mrnotify", F_OK) != 0) {
		EXPECT_EQ(-ENODEV, mrn_cache_create(&cfg, &c));
	}
}

// #27: 4 was a monitor for the project's tests that kept idle entries and
// never invalidated them, and the installed library accepted it. No value
// outside the public enum opens a cache, with the installed library linked
// as an application links it.
TEST(Create, RefusesEveryMonitorOutsideThePublicEnum)
{
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	cfg.fork_policy = MRN_FORK_NONE;
	for (int value : {4, 7, -1}) {
		cfg.monitor = static_cast<mrn_monitor_t>(value);
		mrn_cache_t *c = nullptr;
		EXPECT_EQ(-EINVAL, mrn_cache_create(&cfg, &c)) << "monitor " << value;
		EXPECT_EQ(nullptr, c);
		if (c)
			mrn_cache_destroy(c);
	}
	EXPECT_STREQ("unknown", mrn_monitor_to_string(static_cast<mrn_monitor_t>(4)));
	EXPECT_STREQ("unknown", mrn_monitor_to_string(static_cast<mrn_monitor_t>(7)));
}

// The monitor a cache created with `want` ends up with (a dummy register
// pair: nothing is registered).
mrn_monitor_t monitor_of(mrn_monitor_t want)
{
	mrn_config cfg;
	if (mrn_config_init(&cfg) != 0)
		return static_cast<mrn_monitor_t>(-1);
	cfg.monitor = want;
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	mrn_cache_t *cache = nullptr;
	if (mrn_cache_create(&cfg, &cache) != 0)
		return static_cast<mrn_monitor_t>(-1);
	const mrn_monitor_t m = mrn_cache_monitor(cache);
	mrn_cache_destroy(cache);
	return m;
}

// auto-external (API 5): kernel, else uffd, else external, for callers whose
// own hooks report unmaps (the Open MPI component with Open MPI's hooks on).
// Where neither monitor can be had, auto gives none (idle entries dropped)
// and auto-external external; elsewhere both give the same real monitor.
TEST(AutoExternal, PicksARealMonitorFirst)
{
	EXPECT_STREQ("auto-external", mrn_monitor_to_string(MRN_MONITOR_AUTO_EXTERNAL));
	mrn_monitor_t out;
	EXPECT_EQ(-EINVAL, mrn_monitor_from_string("auto-external", &out))
		<< "only code chooses it, never MRNOTIFY_MONITOR";
	const mrn_monitor_t plain = monitor_of(MRN_MONITOR_AUTO);
	if (plain == MRN_MONITOR_NONE)
		GTEST_SKIP() << "neither kernel nor uffd here: FallsBackToExternal covers it";
	EXPECT_EQ(plain, monitor_of(MRN_MONITOR_AUTO_EXTERNAL));
}

TEST(AutoExternal, FallsBackToExternalWhereAutoFallsBackToNone)
{
	if (access("/dev/mrnotify", F_OK) == 0)
		GTEST_SKIP() << "/dev/mrnotify exists: the kernel monitor wins either way";
	int fds[2];
	ASSERT_EQ(0, pipe(fds));
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		// userfaultfd(2) refused, as a seccomp profile (containers) or
		// an old kernel would: ENOSYS.
		struct sock_filter insns[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = {static_cast<unsigned short>(std::size(insns)), insns};
		int got[2] = {-1, -1};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0) {
			got[0] = monitor_of(MRN_MONITOR_AUTO);
			got[1] = monitor_of(MRN_MONITOR_AUTO_EXTERNAL);
		}
		_exit(write(fds[1], got, sizeof(got)) == sizeof(got) ? 0 : 1);
	}
	close(fds[1]);
	int got[2] = {-1, -1};
	const ssize_t n = read(fds[0], got, sizeof(got));
	close(fds[0]);
	int status = 0;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(static_cast<ssize_t>(sizeof(got)), n);
	ASSERT_NE(-1, got[0]) << "could not install the seccomp filter";
	EXPECT_EQ(MRN_MONITOR_NONE, got[0]) << "auto without kernel or uffd";
	EXPECT_EQ(MRN_MONITOR_EXTERNAL, got[1]) << "auto-external without kernel or uffd";
}

// External mode: idle entries are kept and only mrn_invalidate_range() drops
// them (the Open MPI component with Open MPI's own memory hooks).
TEST(External, KeepsIdleEntriesUntilTheCallerInvalidates)
{
	int registered = 0, deregistered = 0;
	struct Counts {
		int *reg, *dereg;
	} counts{&registered, &deregistered};
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	cfg.monitor = MRN_MONITOR_EXTERNAL;
	cfg.fork_policy = MRN_FORK_NONE;
	cfg.context = &counts;
	cfg.reg = [](void *ctx, void *, void *, size_t, uint32_t, void *) {
		++*static_cast<Counts *>(ctx)->reg;
		return 0;
	};
	cfg.dereg = [](void *ctx, void *) {
		++*static_cast<Counts *>(ctx)->dereg;
		return 0;
	};
	mrn_cache_t *cache = nullptr;
	ASSERT_EQ(0, mrn_cache_create(&cfg, &cache));
	EXPECT_EQ(MRN_MONITOR_EXTERNAL, mrn_cache_monitor(cache));
	EXPECT_STREQ("external", mrn_monitor_to_string(MRN_MONITOR_EXTERNAL));

	std::vector<char> buf(4 * kPage);
	char *p = buf.data();
	for (int i = 0; i < 3; i++) {
		mrn_entry_t *e = nullptr;
		ASSERT_EQ(0, mrn_get(cache, p, 2 * kPage, 1, nullptr, &e));
		mrn_put(cache, e);
	}
	EXPECT_EQ(1, registered) << "idle entry was not kept";
	EXPECT_EQ(0, deregistered);
	EXPECT_EQ(0, mrn_invalidate_range(cache, p + 3 * kPage, kPage)) << "no overlap";
	EXPECT_EQ(1, mrn_invalidate_range(cache, p + kPage, 1));
	EXPECT_EQ(1, deregistered);
	mrn_entry_t *e = nullptr;
	ASSERT_EQ(0, mrn_get(cache, p, 2 * kPage, 1, nullptr, &e));
	mrn_put(cache, e);
	EXPECT_EQ(2, registered);
	::testing::internal::CaptureStderr();
	mrn_cache_print_stats(cache);
	const std::string printed = ::testing::internal::GetCapturedStderr();
	EXPECT_NE(std::string::npos, printed.find("(monitor external): hits 2 misses 2"))
		<< printed;
	mrn_cache_destroy(cache);
	EXPECT_EQ(2, deregistered);
}

// mrn_get_flags(MRN_GET_UNCACHED): registrations a cache must not keep (Open
// MPI's bypass, persistent and device-memory ones) through the library,
// which the component used to re-implement.
struct UncachedBooks {
	int registered = 0, deregistered = 0;
	int fail_next = 0; // register fails with -ENOMEM this many times
	std::vector<std::pair<uintptr_t, size_t>> ranges;
};

class Uncached : public ::testing::Test {
protected:
	void SetUp() override
	{
		mrn_config cfg;
		ASSERT_EQ(0, mrn_config_init(&cfg));
		cfg.monitor = MRN_MONITOR_EXTERNAL; // keeps idle entries, no kernel needed
		cfg.fork_policy = MRN_FORK_NONE;
		cfg.context = &books;
		cfg.reg = [](void *ctx, void *, void *addr, size_t len, uint32_t, void *) {
			auto *b = static_cast<UncachedBooks *>(ctx);
			if (b->fail_next > 0) {
				b->fail_next--;
				return -ENOMEM;
			}
			b->registered++;
			b->ranges.emplace_back(reinterpret_cast<uintptr_t>(addr), len);
			return 0;
		};
		cfg.dereg = [](void *ctx, void *) {
			static_cast<UncachedBooks *>(ctx)->deregistered++;
			return 0;
		};
		ASSERT_EQ(0, mrn_cache_create(&cfg, &cache));
		buf.resize(8 * kPage);
		base = buf.data() + (kPage - reinterpret_cast<uintptr_t>(buf.data()) % kPage) % kPage;
	}
	void TearDown() override
	{
		mrn_cache_destroy(cache);
		EXPECT_EQ(books.registered, books.deregistered);
	}
	uint64_t uncached_count()
	{
		mrn_stats st;
		EXPECT_EQ(0, mrn_cache_stats(cache, &st, sizeof(st)));
		return st.uncached;
	}
	UncachedBooks books;
	mrn_cache_t *cache = nullptr;
	std::vector<char> buf;
	char *base = nullptr;
};

TEST_F(Uncached, NeverLookedUpNorKeptAndDeregisteredAtItsPut)
{
	mrn_entry_t *cached = nullptr, *a = nullptr, *b = nullptr, *found = nullptr;
	ASSERT_EQ(0, mrn_get(cache, base, kPage, 1, nullptr, &cached));
	ASSERT_EQ(0, mrn_get_flags(cache, base, kPage, 1, MRN_GET_UNCACHED, nullptr, &a));
	ASSERT_EQ(0, mrn_get_flags(cache, base, kPage, 1, MRN_GET_UNCACHED, nullptr, &b));
	EXPECT_NE(cached, a) << "an uncached get hit the cached entry";
	EXPECT_NE(a, b) << "an uncached entry was looked up";
	EXPECT_EQ(3, books.registered);
	EXPECT_EQ(2u, uncached_count());
	mrn_put(cache, a);
	EXPECT_EQ(1, books.deregistered) << "deregistered at its put";
	ASSERT_EQ(0, mrn_find(cache, base, kPage, &found));
	EXPECT_EQ(cached, found) << "only the cached entry is found";
	mrn_put(cache, found);
	mrn_put(cache, b);
	mrn_put(cache, cached);
	EXPECT_EQ(2, books.deregistered) << "the cached entry stays, idle";
}

TEST_F(Uncached, WholePagesUnlessExact)
{
	mrn_entry_t *pages = nullptr, *exact = nullptr;
	char *addr = base + 100;
	ASSERT_EQ(0, mrn_get_flags(cache, addr, 10, 1, MRN_GET_UNCACHED, nullptr, &pages));
	EXPECT_EQ(base, mrn_entry_addr(pages));
	EXPECT_EQ(kPage, mrn_entry_length(pages));
	ASSERT_EQ(0, mrn_get_flags(cache, addr, 10, 1, MRN_GET_UNCACHED | MRN_GET_EXACT, nullptr,
				   &exact));
	EXPECT_EQ(addr, mrn_entry_addr(exact));
	EXPECT_EQ(10u, mrn_entry_length(exact));
	ASSERT_EQ(2u, books.ranges.size());
	EXPECT_EQ(reinterpret_cast<uintptr_t>(addr), books.ranges[1].first) << "registered as given";
	EXPECT_EQ(10u, books.ranges[1].second);
	mrn_put(cache, pages);
	mrn_put(cache, exact);
}

// As grdma and the component's own path did: out of resources, an idle
// registration is given back and the registration tried again.
TEST_F(Uncached, EvictsAnIdleEntryAndRetriesWhenRegisteringFails)
{
	mrn_entry_t *idle = nullptr, *u = nullptr;
	ASSERT_EQ(0, mrn_get(cache, base + 4 * kPage, kPage, 1, nullptr, &idle));
	mrn_put(cache, idle);
	books.fail_next = 1;
	ASSERT_EQ(0, mrn_get_flags(cache, base, kPage, 1, MRN_GET_UNCACHED, nullptr, &u));
	EXPECT_EQ(1, books.deregistered) << "the idle entry was given back";
	mrn_put(cache, u);
	books.fail_next = 1; // nothing idle now: the error comes back
	EXPECT_EQ(-ENOMEM, mrn_get_flags(cache, base, kPage, 1, MRN_GET_UNCACHED, nullptr, &u));
}

TEST_F(Uncached, BadFlagsAreErrors)
{
	mrn_entry_t *e = nullptr;
	EXPECT_EQ(-EINVAL, mrn_get_flags(cache, base, kPage, 1, MRN_GET_EXACT, nullptr, &e))
		<< "EXACT alone";
	EXPECT_EQ(-EINVAL, mrn_get_flags(cache, base, kPage, 1, 0x80, nullptr, &e));
	EXPECT_EQ(-EINVAL, mrn_get_flags(cache, base, 0, 1, MRN_GET_UNCACHED, nullptr, &e));
	EXPECT_EQ(-EINVAL,
		  mrn_get_flags(cache, base, 0, 1, MRN_GET_UNCACHED | MRN_GET_EXACT, nullptr, &e));
	EXPECT_EQ(-EINVAL, mrn_get_flags(nullptr, base, kPage, 1, MRN_GET_UNCACHED, nullptr, &e));
	EXPECT_EQ(0, books.registered);
	ASSERT_EQ(0, mrn_get_flags(cache, base, kPage, 1, 0, nullptr, &e)) << "0 is mrn_get";
	mrn_entry_t *again = nullptr;
	ASSERT_EQ(0, mrn_get(cache, base, kPage, 1, nullptr, &again));
	EXPECT_EQ(e, again);
	mrn_put(cache, e);
	mrn_put(cache, again);
}

// A caller built against the header before the uffd fields passes the
// smaller struct: it gets those fields and nothing is written past them.
TEST(Stats, CallersBuiltWithFewerFieldsGetThose)
{
	mrn::test::SerialCache c;
	ASSERT_EQ(0, c.create(MRN_MONITOR_NONE));
	mrn_stats s;
	memset(&s, 0xab, sizeof(s));
	const size_t old_size = offsetof(mrn_stats, uffd_ranges);
	EXPECT_EQ(0, mrn_cache_stats(c.cache, &s, old_size));
	EXPECT_EQ(0u, s.hits);
	EXPECT_EQ(0xababababababababull, s.uffd_ranges) << "written past the caller's struct";
	EXPECT_EQ(-EINVAL, mrn_cache_stats(c.cache, &s, old_size - sizeof(uint64_t)));
	EXPECT_EQ(0, mrn_cache_stats(c.cache, &s, sizeof(s)));
	EXPECT_EQ(0u, s.uffd_ranges);
}

// --- the uffd monitor against the host kernel ------------------------------------

class Uffd : public ::testing::Test, protected mrn::test::SerialCache {
protected:
	void SetUp() override
	{
		const int rc = create(MRN_MONITOR_UFFD);
		if (rc == -ENODEV)
			GTEST_SKIP() << "userfaultfd is not available here";
		ASSERT_EQ(0, rc);
		ASSERT_EQ(MRN_MONITOR_UFFD, mrn_cache_monitor(cache));
		mem = static_cast<char *>(mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		ASSERT_NE(MAP_FAILED, mem);
		memset(mem, 1, 16 * kPage);
	}
	void TearDown() override
	{
		destroy();
		if (mem)
			munmap(mem, 16 * kPage);
		EXPECT_EQ(books.registered, books.deregistered);
	}
	char *mem = nullptr;
};

TEST_F(Uffd, HitWhileMapped)
{
	EXPECT_EQ(1, use(mem, kPage));
	EXPECT_EQ(1, use(mem, kPage));
	EXPECT_EQ(1u, stats().hits);
}

TEST_F(Uffd, MunmapAndRemapInvalidates)
{
	EXPECT_EQ(1, use(mem + kPage, kPage));
	ASSERT_EQ(0, munmap(mem + kPage, kPage));
	ASSERT_EQ(mem + kPage, mmap(mem + kPage, kPage, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	EXPECT_EQ(2, use(mem + kPage, kPage));
	EXPECT_EQ(1u, stats().invalidations);
}

TEST_F(Uffd, MadviseDontneedInvalidates)
{
	EXPECT_EQ(1, use(mem, 4 * kPage));
	ASSERT_EQ(0, madvise(mem + 2 * kPage, kPage, MADV_DONTNEED));
	EXPECT_EQ(2, use(mem, 4 * kPage));
}

TEST_F(Uffd, MprotectDoesNotInvalidate)
{
	EXPECT_EQ(1, use(mem, 2 * kPage));
	ASSERT_EQ(0, mprotect(mem, 2 * kPage, PROT_READ));
	ASSERT_EQ(0, mprotect(mem, 2 * kPage, PROT_READ | PROT_WRITE));
	EXPECT_EQ(1, use(mem, 2 * kPage));
	EXPECT_EQ(0u, stats().invalidations);
}

TEST_F(Uffd, UnmapOfOtherMemoryDoesNotInvalidate)
{
	EXPECT_EQ(1, use(mem, kPage));
	ASSERT_EQ(0, munmap(mem + 8 * kPage, kPage));
	EXPECT_EQ(1, use(mem, kPage));
}

// No window (#10): a get() that starts after munmap() + mmap(), or after
// mmap(MAP_FIXED) over the range, has returned never hits the old
// registration. Before, 1 to 947 of 2,000 such gets did.
TEST_F(Uffd, NoStaleHitAfterMunmapAndMmap)
{
	char *p = mem + kPage;
	int stale = 0;
	for (int i = 0; i < 2000; i++) {
		const int before = use(p, kPage);
		ASSERT_EQ(0, munmap(p, kPage));
		ASSERT_EQ(p, mmap(p, kPage, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
		stale += use(p, kPage) == before;
	}
	EXPECT_EQ(0, stale) << "stale hits of 2000";
}

TEST_F(Uffd, NoStaleHitAfterMmapFixedOver)
{
	char *p = mem + 2 * kPage;
	int stale = 0;
	for (int i = 0; i < 2000; i++) {
		const int before = use(p, 2 * kPage);
		ASSERT_EQ(p, mmap(p, 2 * kPage, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
		stale += use(p, 2 * kPage) == before;
	}
	EXPECT_EQ(0, stale) << "stale hits of 2000";
}

// uffd never reports hole punches or truncation of shared memory: such
// memory is registered uncached (#10). Before, every later get returned the
// registration of the freed pages.
TEST_F(Uffd, SharedMemoryIsNeverStale)
{
	const int fd = memfd_create("mrn-capi", 0);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, ftruncate(fd, 4 * kPage));
	char *m = static_cast<char *>(
		mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
	ASSERT_NE(MAP_FAILED, m);
	memset(m, 1, 4 * kPage);
	const int a = use(m, 4 * kPage);
	ASSERT_EQ(0, fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4 * kPage));
	memset(m, 2, 4 * kPage);
	const int b = use(m, 4 * kPage);
	EXPECT_NE(a, b) << "hole punch";
	ASSERT_EQ(0, ftruncate(fd, 0));
	ASSERT_EQ(0, ftruncate(fd, 4 * kPage));
	memset(m, 3, 4 * kPage);
	EXPECT_NE(b, use(m, 4 * kPage)) << "truncation";
	EXPECT_EQ(3u, stats().uncached);
	munmap(m, 4 * kPage);
	close(fd);
}

// An MPI rank bound to one core must not confine the monitor thread there
// (unmapping threads wait on it): it may run on every CPU.
TEST(UffdThread, RunsOnEveryCpuOfTheProcess)
{
	cpu_set_t all, one;
	ASSERT_EQ(0, sched_getaffinity(0, sizeof(all), &all));
	if (CPU_COUNT(&all) < 2)
		GTEST_SKIP() << "one CPU only";
	CPU_ZERO(&one);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &all)) {
			CPU_SET(i, &one);
			break;
		}
	ASSERT_EQ(0, sched_setaffinity(0, sizeof(one), &one)); // "bound to a core"
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	cfg.monitor = MRN_MONITOR_UFFD;
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	mrn_cache_t *cache = nullptr;
	const int rc = mrn_cache_create(&cfg, &cache);
	if (rc == -ENODEV) {
		sched_setaffinity(0, sizeof(all), &all);
		GTEST_SKIP() << "userfaultfd is not available here";
	}
	ASSERT_EQ(0, rc);
	// The monitor thread is the task that is neither us nor confined.
	int widest = 0;
	for (int attempt = 0; attempt < 100 && widest < CPU_COUNT(&all); attempt++) {
		DIR *d = opendir("/proc/self/task");
		ASSERT_NE(nullptr, d);
		while (dirent *de = readdir(d)) {
			const pid_t tid = pid_t(atoi(de->d_name));
			cpu_set_t s;
			if (tid > 0 && tid != pid_t(syscall(SYS_gettid)) &&
			    sched_getaffinity(tid, sizeof(s), &s) == 0)
				widest = std::max(widest, CPU_COUNT(&s));
		}
		closedir(d);
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	mrn_cache_destroy(cache);
	ASSERT_EQ(0, sched_setaffinity(0, sizeof(all), &all));
	EXPECT_EQ(CPU_COUNT(&all), widest) << "the monitor thread inherited the rank's binding";
}

TEST_F(Uffd, FileBackedMemoryIsNotKeptIdle)
{
	// In the working directory (the build tree), not /tmp: /tmp may be a
	// tmpfs (as in tests/harness/stacks.sh's chroot), whose shmem pages uffd can watch.
	char path[] = "mrn-capi-XXXXXX";
	const int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	unlink(path);
	ASSERT_EQ(0, ftruncate(fd, kPage));
	char *f = static_cast<char *>(mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE, fd, 0));
	ASSERT_NE(MAP_FAILED, f);
	EXPECT_EQ(1, use(f, kPage));
	EXPECT_EQ(2, use(f, kPage)); // uffd cannot watch it: not cached when idle
	munmap(f, kPage);
	close(fd);
}

TEST(Auto, PicksAMonitorAndSaysWhich)
{
	mrn_config cfg;
	ASSERT_EQ(0, mrn_config_init(&cfg));
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	mrn_cache_t *c = nullptr;
	ASSERT_EQ(0, mrn_cache_create(&cfg, &c));
	const mrn_monitor_t m = mrn_cache_monitor(c);
	EXPECT_NE(MRN_MONITOR_AUTO, m);
	if (access("/dev/mrnotify", F_OK) == 0) {
		EXPECT_EQ(MRN_MONITOR_KERNEL, m);
	}
	mrn_cache_destroy(c);
}

} // namespace

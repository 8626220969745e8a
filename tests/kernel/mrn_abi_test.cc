// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko: the device, the status page, the ioctl ABI and its errnos.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "mrn_test_util.h"

using mrn::Ctx;
using mrn::Map;
using mrn::page_size;

namespace {

TEST(Device, IsWorldAccessibleMiscDevice)
{
	struct stat st;
	ASSERT_EQ(0, stat(MRN_DEVICE_PATH, &st));
	EXPECT_TRUE(S_ISCHR(st.st_mode));
	EXPECT_EQ(0666u, st.st_mode & 07777);
}

// The device is a stream: lseek and pread fail with ESPIPE. Kernels before
// 6.12 said so through no_llseek, later ones through stream_open() alone.
TEST(Device, IsNotSeekable)
{
	Ctx c(false);
	ASSERT_GE(c.fd(), 0);
	errno = 0;
	EXPECT_EQ(-1, lseek(c.fd(), 0, SEEK_SET));
	EXPECT_EQ(ESPIPE, errno);
	char b;
	errno = 0;
	EXPECT_EQ(-1, pread(c.fd(), &b, 1, 0));
	EXPECT_EQ(ESPIPE, errno);
}

// poll(): readable while a registration is dirty and not yet drained; a
// thread blocked in poll() is woken by the unmap. (Before poll support the
// device was always readable: the first check fails.)
TEST(Device, PollIsReadableWhileSomethingIsDirty)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	m.touch();
	ASSERT_GT(c.reg(m.get(), page_size(), 1), 0);
	pollfd p{c.fd(), POLLIN, 0};
	EXPECT_EQ(0, poll(&p, 1, 0)) << "readable with nothing dirty";
	std::atomic<int> woke{-1};
	std::thread waiter([&] {
		pollfd q{c.fd(), POLLIN, 0};
		woke = poll(&q, 1, 20000) == 1 && (q.revents & POLLIN) ? 1 : 0;
	});
	// Usually blocked by now; the test holds whether or not it is.
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	ASSERT_EQ(0, munmap(m.get(), page_size()));
	m.release();
	waiter.join();
	EXPECT_EQ(1, woke.load()) << "the poller was not woken by the unmap";
	EXPECT_EQ(1, poll(&p, 1, 0));
	EXPECT_TRUE(p.revents & POLLIN);
	EXPECT_EQ(1u, c.drain_ids().size());
	EXPECT_EQ(0, poll(&p, 1, 0)) << "still readable after the drain";
}

TEST(StatusPage, StartsAtZeroWithAbiVersion)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(0u, c.gen());
	EXPECT_EQ(static_cast<uint32_t>(MRN_ABI_VERSION), c.status()->abi_version);
	EXPECT_EQ(static_cast<uint32_t>(MRN_FEATURE_VALIDITY), c.status()->features);
	EXPECT_EQ(0u, c.status()->deferred);
	mrn_query q = c.query();
	EXPECT_EQ(static_cast<uint32_t>(MRN_ABI_VERSION), q.abi_version);
}

TEST(StatusPage, WritableOrExecutableMappingRefused)
{
	Ctx c(false);
	ASSERT_GE(c.fd(), 0);
	const size_t ps = page_size();
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, ps, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd(), 0));
	EXPECT_EQ(EPERM, errno);
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, ps, PROT_READ | PROT_EXEC, MAP_SHARED, c.fd(), 0));
	EXPECT_EQ(EPERM, errno);
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, ps, PROT_READ, MAP_PRIVATE, c.fd(), 0));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, 2 * ps, PROT_READ, MAP_SHARED, c.fd(), 0));
	EXPECT_EQ(EINVAL, errno);
	// From the second page on are the validity words (Validity.*), up to
	// MRN_VALIDITY_SLOTS of them; nothing beyond.
	const size_t beyond = ps + ((4 * size_t{MRN_VALIDITY_SLOTS} + ps - 1) / ps) * ps;
	errno = 0;
	EXPECT_EQ(MAP_FAILED,
		  mmap(nullptr, ps, PROT_READ, MAP_SHARED, c.fd(), static_cast<off_t>(beyond)));
	EXPECT_EQ(EINVAL, errno);
}

TEST(StatusPage, CannotBeMadeWritable)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	void *p = const_cast<mrn_status *>(c.status());
	errno = 0;
	EXPECT_EQ(-1, mprotect(p, page_size(), PROT_READ | PROT_WRITE));
	EXPECT_EQ(EACCES, errno);
	errno = 0;
	EXPECT_EQ(-1, mprotect(p, page_size(), PROT_READ | PROT_EXEC));
	EXPECT_EQ(EACCES, errno);
	// Re-enabling inheritance must not work either (VM_IO).
	errno = 0;
	EXPECT_EQ(-1, madvise(p, page_size(), MADV_DOFORK));
	EXPECT_EQ(EINVAL, errno);
	// Writing through /proc/self/mem (FOLL_FORCE) must fail as well.
	int memfd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	ASSERT_GE(memfd, 0);
	uint64_t v = 12345;
	EXPECT_EQ(-1,
		  pwrite(memfd, &v, sizeof(v), static_cast<off_t>(reinterpret_cast<uintptr_t>(p))));
	close(memfd);
	EXPECT_EQ(0u, c.gen());
	// Read-only open works the same way.
	int fd = open(MRN_DEVICE_PATH, O_RDONLY | O_CLOEXEC);
	ASSERT_GE(fd, 0);
	void *q = mmap(nullptr, page_size(), PROT_READ, MAP_SHARED, fd, 0);
	EXPECT_NE(MAP_FAILED, q);
	if (q != MAP_FAILED) {
		EXPECT_EQ(-1, mprotect(q, page_size(), PROT_READ | PROT_WRITE));
		munmap(q, page_size());
	}
	close(fd);
}

TEST(Register, DrainReportsCookieIdAndRangeOnce)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(4 * page_size());
	ASSERT_NE(nullptr, m.get());
	m.touch();
	mrn::StatsDelta stats;
	int64_t id = c.reg(m.get(), m.size(), 0xC00C1E);
	ASSERT_GT(id, 0);
	EXPECT_EQ(0u, c.gen());
	EXPECT_EQ(1u, c.query().registrations);

	char *base = m.get();
	ASSERT_EQ(0, munmap(base, m.size()));
	m.release();
	EXPECT_EQ(1u, c.gen());
	EXPECT_EQ(1u, c.query().dirty);

	uint64_t g = 0;
	auto e = c.drain(16, &g);
	ASSERT_EQ(1u, e.size());
	EXPECT_EQ(0xC00C1Eu, e[0].cookie);
	EXPECT_EQ(static_cast<uint64_t>(id), e[0].id);
	EXPECT_EQ(reinterpret_cast<uintptr_t>(base), e[0].addr);
	EXPECT_EQ(4 * page_size(), e[0].length);
	EXPECT_EQ(1u, g);
	EXPECT_EQ(g, c.gen());

	// Reported once; the id is stale.
	EXPECT_TRUE(c.drain().empty());
	EXPECT_EQ(-ESTALE, c.unreg(id));
	mrn_query q = c.query();
	EXPECT_EQ(0u, q.registrations);
	EXPECT_EQ(0u, q.dirty);
	EXPECT_EQ(1, stats["invalidated"]);
	EXPECT_EQ(1, stats["drained"]);
}

// The module-wide usage in /sys/class/misc/mrnotify/ is ABI (#27): each file
// one decimal value, what mrnotify-check reads, moving with this test's own
// use (nothing else uses the module while it runs); root only.
long long sysfs_value(const char *name)
{
	std::ifstream f(std::string("/sys/class/misc/mrnotify/") + name);
	long long v = -1;
	std::string rest;
	if (!(f >> v) || (f >> rest))
		return -1;
	return v;
}

TEST(Sysfs, UsageFilesFollowTheContextsAndRegistrations)
{
	const long long contexts = sysfs_value("contexts"), regs = sysfs_value("registrations");
	const long long invalidated = sysfs_value("invalidated"), drained = sysfs_value("drained");
	ASSERT_GE(contexts, 0) << "/sys/class/misc/mrnotify/contexts";
	ASSERT_GE(regs, 0);
	ASSERT_GE(invalidated, 0);
	ASSERT_GE(drained, 0);
	ASSERT_GE(sysfs_value("user_limit_hits"), 0);
	{
		Ctx c;
		ASSERT_TRUE(c.ok());
		Map m(4 * page_size());
		ASSERT_NE(nullptr, m.get());
		m.touch();
		ASSERT_GT(c.reg(m.get(), page_size()), 0);
		ASSERT_GT(c.reg(m.get() + page_size(), page_size()), 0);
		EXPECT_EQ(contexts + 1, sysfs_value("contexts"));
		EXPECT_EQ(regs + 2, sysfs_value("registrations"));
		ASSERT_EQ(0, munmap(m.get(), m.size()));
		m.release();
		EXPECT_EQ(2u, c.drain(16).size());
		EXPECT_EQ(invalidated + 2, sysfs_value("invalidated"));
		EXPECT_EQ(drained + 2, sysfs_value("drained"));
	}
	EXPECT_EQ(contexts, sysfs_value("contexts"));
	EXPECT_EQ(regs, sysfs_value("registrations"));
}

TEST(Sysfs, UsageFilesAreRootOnly)
{
	struct stat st;
	for (const char *name :
	     {"contexts", "registrations", "invalidated", "drained", "user_limit_hits"}) {
		const std::string path = std::string("/sys/class/misc/mrnotify/") + name;
		ASSERT_EQ(0, stat(path.c_str(), &st)) << path;
		EXPECT_EQ(0400u, st.st_mode & 07777) << path;
	}
}

TEST(Register, UnregisterCleanThenAgainIsESTALE)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	int64_t id = c.reg(m.get(), m.size());
	ASSERT_GT(id, 0);
	EXPECT_EQ(0, c.unreg(id));
	EXPECT_EQ(-ESTALE, c.unreg(id));
	// An unregistered range is no longer watched.
	m.touch();
	ASSERT_EQ(0, munmap(m.get(), m.size()));
	m.release();
	EXPECT_EQ(0u, c.gen());
	EXPECT_TRUE(c.drain().empty());
}

TEST(Register, UnregisterDirtyReportsWasDirtyAndDrainSkipsIt)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map a(page_size()), b(page_size());
	mrn::StatsDelta stats;
	int64_t ia = c.reg(a.get(), a.size(), 1);
	int64_t ib = c.reg(b.get(), b.size(), 2);
	ASSERT_GT(ia, 0);
	ASSERT_GT(ib, 0);
	ASSERT_EQ(0, madvise(a.get(), a.size(), MADV_DONTNEED));
	ASSERT_EQ(0, madvise(b.get(), b.size(), MADV_DONTNEED));
	EXPECT_EQ(2u, c.gen());
	EXPECT_EQ(MRN_UNREGISTER_WAS_DIRTY, c.unreg(ia));
	EXPECT_EQ(-ESTALE, c.unreg(ia));
	auto e = c.drain();
	ASSERT_EQ(1u, e.size());
	EXPECT_EQ(static_cast<uint64_t>(ib), e[0].id);
	mrn_query q = c.query();
	EXPECT_EQ(1, stats["unregistered_dirty"]);
	EXPECT_EQ(0u, q.registrations);
}

TEST(Register, ByteRangesNeedNoAlignment)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	const size_t ps = page_size();
	Map m(3 * ps);
	m.touch();
	// 50 bytes inside page 1 only.
	char *p = m.get() + ps + 100;
	int64_t id = c.reg(p, 50, 7);
	ASSERT_GT(id, 0);
	ASSERT_EQ(0, madvise(m.get(), ps, MADV_DONTNEED));          // page 0
	ASSERT_EQ(0, madvise(m.get() + 2 * ps, ps, MADV_DONTNEED)); // page 2
	EXPECT_EQ(0u, c.gen());
	ASSERT_EQ(0, madvise(m.get() + ps, ps, MADV_DONTNEED)); // page 1
	EXPECT_EQ(1u, c.gen());
	auto e = c.drain();
	ASSERT_EQ(1u, e.size());
	EXPECT_EQ(reinterpret_cast<uintptr_t>(p), e[0].addr);
	EXPECT_EQ(50u, e[0].length);
	EXPECT_EQ(7u, e[0].cookie);
	// A range that straddles a page boundary covers both pages.
	int64_t id2 = c.reg(m.get() + ps - 1, 2, 8);
	ASSERT_GT(id2, 0);
	ASSERT_EQ(0, madvise(m.get() + ps, ps, MADV_DONTNEED));
	EXPECT_EQ(std::set<uint64_t>{static_cast<uint64_t>(id2)}, c.drain_ids());
}

TEST(Register, RangeNotMappedYetIsWatchedOnceMapped)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	const size_t ps = page_size();
	Map hole(4 * ps);
	char *p = hole.get();
	ASSERT_EQ(0, munmap(p, 4 * ps));
	hole.release();
	int64_t id = c.reg(p, 4 * ps, 3);
	ASSERT_GT(id, 0);
	void *q = mmap(p, 4 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		       -1, 0);
	ASSERT_EQ(static_cast<void *>(p), q);
	EXPECT_EQ(0u, c.gen()); // mapping into a hole replaces nothing
	ASSERT_EQ(0, munmap(p, 4 * ps));
	EXPECT_EQ(std::set<uint64_t>{static_cast<uint64_t>(id)}, c.drain_ids());
}

TEST(Register, IdsAreNotReusedSoon)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	std::set<int64_t> seen;
	int64_t last = 0;
	for (int i = 0; i < 200; i++) {
		int64_t id = c.reg(m.get(), m.size());
		ASSERT_GT(id, 0);
		EXPECT_GT(id, last);
		EXPECT_TRUE(seen.insert(id).second);
		last = id;
		ASSERT_EQ(0, c.unreg(id));
	}
}

// A slot whose generation would wrap is retired, so that no id ever names
// a later registration. debug_generation_step (debugfs, tests only) moves
// a slot's generation by 2^30 at each reuse: the second reuse would pass
// the 31-bit maximum. Without the retirement (the module before #47, with
// this step), the third id was the first one again: (2^31 & (2^31 - 1)) =
// 0, the same slot, and UNREGISTER of the first id removed the third
// registration.
TEST(Register, ASlotIsRetiredBeforeItsGenerationWraps)
{
	const std::string knob = "/sys/kernel/debug/mrnotify/debug_generation_step";
	{
		std::ofstream f(knob);
		ASSERT_TRUE(f << (1U << 30) && f.flush()) << "no " << knob;
	}
	struct Restore {
		std::string path;
		~Restore() { std::ofstream(path) << 1; }
	} restore{knob};
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	const int64_t first = c.reg(m.get(), m.size());
	ASSERT_GT(first, 0);
	ASSERT_EQ(0, c.unreg(static_cast<uint64_t>(first)));
	const int64_t second = c.reg(m.get(), m.size());
	ASSERT_GT(second, 0);
	EXPECT_EQ(static_cast<uint32_t>(first), static_cast<uint32_t>(second)) << "slot reused";
	ASSERT_EQ(0, c.unreg(static_cast<uint64_t>(second)));
	const int64_t third = c.reg(m.get(), m.size());
	ASSERT_GT(third, 0);
	EXPECT_NE(first, third);
	EXPECT_NE(static_cast<uint32_t>(first), static_cast<uint32_t>(third)) << "slot retired";
	EXPECT_EQ(-ESTALE, c.unreg(static_cast<uint64_t>(first)));
	EXPECT_EQ(-ESTALE, c.unreg(static_cast<uint64_t>(second)));
	EXPECT_EQ(1u, c.query().registrations) << "a stale id removed the live registration";
	EXPECT_EQ(0, c.unreg(static_cast<uint64_t>(third)));
}

// The tracepoints follow a registration's life: REGISTER, the mark and its
// reason, the DRAIN that reports it, and UNREGISTER.
TEST(Trace, ARegistrationsLifeIsTraced)
{
	std::string dir;
	for (const char *d : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"})
		if (access((std::string(d) + "/events/mrnotify/enable").c_str(), W_OK) == 0) {
			dir = d;
			break;
		}
	ASSERT_FALSE(dir.empty()) << "no events/mrnotify in tracefs";
	auto put = [&](const char *file, const char *v) {
		std::ofstream f(dir + "/" + file, std::ios::trunc);
		return static_cast<bool>(f << v && f.flush());
	};
	ASSERT_TRUE(put("trace", ""));
	ASSERT_TRUE(put("events/mrnotify/enable", "1"));
	{
		Ctx c;
		ASSERT_TRUE(c.ok());
		Map m(2 * page_size());
		m.touch();
		const int64_t dead = c.reg(m.get(), page_size(), 0x5eed);
		const int64_t live = c.reg(m.get() + page_size(), page_size(), 0x11fe);
		ASSERT_GT(dead, 0);
		ASSERT_GT(live, 0);
		ASSERT_EQ(0, madvise(m.get(), page_size(), MADV_DONTNEED));
		EXPECT_EQ(1u, c.drain().size());
		EXPECT_EQ(0, c.unreg(static_cast<uint64_t>(live)));
	}
	ASSERT_TRUE(put("events/mrnotify/enable", "0"));
	std::ifstream in(dir + "/trace");
	std::string line, all;
	int registers = 0, marks = 0, drains = 0, unregisters = 0;
	while (std::getline(in, line)) {
		if (line.empty() || line[0] == '#')
			continue;
		all += line + "\n";
		registers += line.find("mrn_register:") != std::string::npos;
		marks += line.find("mrn_mark:") != std::string::npos &&
			 line.find("reason=clear") != std::string::npos;
		drains += line.find("mrn_drain:") != std::string::npos &&
			  line.find("count=1") != std::string::npos;
		unregisters += line.find("mrn_unregister:") != std::string::npos;
	}
	EXPECT_EQ(2, registers) << all;
	EXPECT_EQ(1, marks) << all;
	EXPECT_EQ(1, drains) << all;
	EXPECT_EQ(1, unregisters) << all;
}

// The validity words: one per slot, valid while its registration is live
// and clean, changed before the generation moves when it is not.
class Validity : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_TRUE(c.ok());
		len = 4 * MRN_VALIDITY_SLOTS;
		void *p = mmap(nullptr, len, PROT_READ, MAP_SHARED, c.fd(), page_size());
		ASSERT_NE(MAP_FAILED, p) << strerror(errno);
		words = static_cast<const uint32_t *>(p);
	}
	void TearDown() override
	{
		if (words)
			munmap(const_cast<uint32_t *>(words), len);
	}
	bool valid(int64_t id) const
	{
		const uint32_t w =
			__atomic_load_n(&words[static_cast<uint32_t>(id)], __ATOMIC_ACQUIRE);
		return w == MRN_VALID_WORD(static_cast<uint64_t>(id));
	}
	Ctx c;
	size_t len = 0;
	const uint32_t *words = nullptr;
};

TEST_F(Validity, AnInvalidationChangesOnlyItsRegistrationsWord)
{
	const size_t ps = page_size();
	Map m(3 * ps);
	m.touch();
	std::vector<int64_t> ids;
	for (int i = 0; i < 3; i++) {
		ids.push_back(c.reg(m.get() + i * ps, ps, i));
		ASSERT_GT(ids.back(), 0);
		EXPECT_TRUE(valid(ids.back())) << i;
	}
	ASSERT_EQ(0, madvise(m.get() + ps, ps, MADV_DONTNEED));
	EXPECT_EQ(1u, c.gen());
	EXPECT_EQ(0u, c.status()->deferred);
	EXPECT_TRUE(valid(ids[0]));
	EXPECT_FALSE(valid(ids[1]));
	EXPECT_TRUE(valid(ids[2]));
	EXPECT_EQ(1u, c.drain().size());
	// Unregistered: its word goes; the slot's next registration has its own.
	ASSERT_EQ(0, c.unreg(static_cast<uint64_t>(ids[2])));
	EXPECT_FALSE(valid(ids[2]));
	const int64_t again = c.reg(m.get() + 2 * ps, ps, 9);
	ASSERT_GT(again, 0);
	EXPECT_EQ(static_cast<uint32_t>(ids[2]), static_cast<uint32_t>(again)) << "slot reused";
	EXPECT_TRUE(valid(again));
	EXPECT_FALSE(valid(ids[2]));
}

// Registrations a callback left to DRAIN keep a valid word until DRAIN
// (or QUERY) marks them: the deferred counter says so first.
TEST_F(Validity, DeferredMarksMoveTheDeferredCounterFirst)
{
	Map m(page_size());
	m.touch();
	const int n = 3 * static_cast<int>(mrn::kMarkBudget);
	std::vector<int64_t> ids;
	for (int i = 0; i < n; i++) {
		ids.push_back(c.reg(m.get(), page_size(), i));
		ASSERT_GT(ids.back(), 0);
	}
	ASSERT_EQ(0, madvise(m.get(), page_size(), MADV_DONTNEED));
	EXPECT_EQ(1u, c.status()->deferred);
	int still_valid = 0;
	for (int64_t id : ids)
		still_valid += valid(id);
	EXPECT_EQ(n - mrn::kMarkBudget, still_valid);
	c.query(); // resolves the deferred range
	for (int64_t id : ids)
		EXPECT_FALSE(valid(id));
	EXPECT_EQ(static_cast<size_t>(n), c.drain().size());
}

TEST_F(Validity, MappingRules)
{
	const size_t ps = page_size();
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, ps, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd(), ps));
	EXPECT_EQ(EPERM, errno);
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, ps, PROT_READ, MAP_PRIVATE, c.fd(), ps));
	EXPECT_EQ(EINVAL, errno);
	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(nullptr, len + ps, PROT_READ, MAP_SHARED, c.fd(), ps));
	EXPECT_EQ(EINVAL, errno) << "beyond the last word";
	EXPECT_EQ(EACCES, mprotect(const_cast<uint32_t *>(words), ps, PROT_READ | PROT_WRITE)
				  ? errno
				  : 0);
	// Not inherited: the child has no mapping there.
	pid_t pid = fork();
	if (pid == 0) {
		unsigned char vec = 0;
		_exit(mincore(const_cast<uint32_t *>(words), ps, &vec) == -1 && errno == ENOMEM
			      ? 0
			      : 1);
	}
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// --- malformed ioctls ------------------------------------------------------

struct RegCase {
	const char *what;
	uint32_t cmd_size; // the size bits of the command
	uint32_t size;
	uint32_t flags;
	uint64_t addr;
	uint64_t length;
	bool dirty_tail;
	int err;
};

TEST(Malformed, RegisterTable)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	const uint64_t a = reinterpret_cast<uintptr_t>(m.get());
	const uint64_t ps = page_size();
	const uint64_t top = mrn::task_size();
	const uint32_t v1 = MRN_REGISTER_SIZE_VER1;
	const uint32_t sz = sizeof(mrn_register);
	const uint32_t pg = static_cast<uint32_t>(ps);
	const RegCase cases[] = {
		{"size 0", sz, 0, 0, a, ps, false, EINVAL},
		{"size 8", sz, 8, 0, a, ps, false, EINVAL},
		{"size v1-1", sz, v1 - 1, 0, a, ps, false, EINVAL},
		{"size != command's", sz, v1 + 8, 0, a, ps, false, EINVAL},
		{"size > page", sz, pg + 8, 0, a, ps, false, EINVAL},
		{"command size 0", 0, 0, 0, a, ps, false, ENOTTY},
		{"command size v1-8", v1 - 8, v1 - 8, 0, a, ps, false, ENOTTY},
		{"command size v1+4", v1 + 4, v1 + 4, 0, a, ps, false, ENOTTY},
		{"command size > page", pg + 8, pg + 8, 0, a, ps, false, ENOTTY},
		{"nonzero tail", v1 + 8, v1 + 8, 0, a, ps, true, E2BIG},
		{"unknown flag bit 0", sz, sz, 1, a, ps, false, EINVAL},
		{"unknown flag bit 31", sz, sz, 1u << 31, a, ps, false, EINVAL},
		{"zero length", sz, sz, 0, a, 0, false, EINVAL},
		{"wraps", sz, sz, 0, a, ~0ULL - a + 2, false, EOVERFLOW},
		{"wraps from top", sz, sz, 0, ~0ULL - 10, 20, false, EOVERFLOW},
		{"kernel half", sz, sz, 0, 0xffff888000000000ULL, ps, false, EFAULT},
		{"crosses TASK_SIZE", sz, sz, 0, top - ps, 2 * ps, false, EFAULT},
		{"starts at TASK_SIZE", sz, sz, 0, top, 1, false, EFAULT},
		{"huge length", sz, sz, 0, 0, 1ULL << 62, false, EFAULT},
	};
	for (const auto &tc : cases) {
		std::vector<uint64_t> buf(ps / 8 + 8, 0);
		auto *r = reinterpret_cast<mrn_register *>(buf.data());
		r->size = tc.size;
		r->flags = tc.flags;
		r->addr = tc.addr;
		r->length = tc.length;
		if (tc.dirty_tail)
			buf[MRN_REGISTER_SIZE_VER1 / 8] = 1;
		errno = 0;
		EXPECT_EQ(-1, mrn::ioctl_sized(c.fd(), _IOC_NR(MRN_IOC_REGISTER), tc.cmd_size,
					       buf.data()))
			<< tc.what;
		EXPECT_EQ(tc.err, errno) << tc.what;
	}
	EXPECT_EQ(0u, c.query().registrations);
	// The largest range that ends exactly at TASK_SIZE is fine.
	EXPECT_GT(c.reg_raw(top - ps, ps), 0);
	EXPECT_GT(c.reg_raw(0, ps), 0); // page zero is a user address
	// A larger struct with a zero tail is accepted (newer header, older module).
	std::vector<uint64_t> big(16, 0);
	auto *r = reinterpret_cast<mrn_register *>(big.data());
	r->size = 64;
	r->addr = a;
	r->length = 1;
	ASSERT_EQ(0, mrn::ioctl_sized(c.fd(), _IOC_NR(MRN_IOC_REGISTER), 64, big.data()));
	EXPECT_GT(r->id, 0u);
	// Bad argument pointers.
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_REGISTER, nullptr));
	EXPECT_EQ(EFAULT, errno);
	errno = 0;
	EXPECT_EQ(-1,
		  ioctl(c.fd(), MRN_IOC_REGISTER, reinterpret_cast<void *>(0xffff888000000000ULL)));
	EXPECT_EQ(EFAULT, errno);
}

TEST(Malformed, RegisterOutputNotWritableIsEFAULTAndNothingRegistered)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map data(page_size());
	Map ro(page_size());
	auto *r = reinterpret_cast<mrn_register *>(ro.get());
	r->size = sizeof(*r);
	r->addr = reinterpret_cast<uintptr_t>(data.get());
	r->length = 1;
	ASSERT_EQ(0, mprotect(ro.get(), ro.size(), PROT_READ));
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_REGISTER, r));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(0u, c.query().registrations);
}

TEST(Malformed, UnregisterTable)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	int64_t id = c.reg(m.get(), m.size());
	ASSERT_GT(id, 0);
	struct {
		const char *what;
		uint32_t size;
		uint32_t flags;
		uint64_t id;
		int err;
	} cases[] = {
		{"size 0", 0, 0, static_cast<uint64_t>(id), EINVAL},
		{"size 8", 8, 0, static_cast<uint64_t>(id), EINVAL},
		{"size > page", static_cast<uint32_t>(page_size()) + 1, 0,
		 static_cast<uint64_t>(id), EINVAL},
		{"flags", sizeof(mrn_unregister), 1, static_cast<uint64_t>(id), EINVAL},
		// Ids never handed out are malformed (EINVAL); handed-out
		// ids that are gone are stale (ESTALE, below).
		{"id 0", sizeof(mrn_unregister), 0, 0, EINVAL},
		{"id not yet handed out", sizeof(mrn_unregister), 0,
		 static_cast<uint64_t>(id) + 1000, EINVAL},
		{"id above u32", sizeof(mrn_unregister), 0,
		 (1ULL << 32) + static_cast<uint64_t>(id), EINVAL},
		{"id all ones", sizeof(mrn_unregister), 0, ~0ULL, EINVAL},
	};
	for (const auto &tc : cases) {
		mrn_unregister u;
		memset(&u, 0, sizeof(u));
		u.size = tc.size;
		u.flags = tc.flags;
		u.id = tc.id;
		errno = 0;
		EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_UNREGISTER, &u)) << tc.what;
		EXPECT_EQ(tc.err, errno) << tc.what;
	}
	// None of that touched the registration.
	EXPECT_EQ(1u, c.query().registrations);
	EXPECT_EQ(0, c.unreg(id));
	EXPECT_EQ(-ESTALE, c.unreg(id)); // double unregister
	// The command's size bits are decoded strictly.
	mrn_unregister u;
	memset(&u, 0, sizeof(u));
	u.size = 8;
	errno = 0;
	EXPECT_EQ(-1, mrn::ioctl_sized(c.fd(), _IOC_NR(MRN_IOC_UNREGISTER), 8, &u));
	EXPECT_EQ(ENOTTY, errno);
}

// An id is a slot (low 32 bits) and the slot's generation: a freed slot is
// reused with the next generation, so the index stays dense and no id names
// two registrations.
TEST(Register, IdsAreNeverReused)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	std::set<int64_t> seen;
	int64_t last = 0;
	for (int i = 0; i < 1000; i++) {
		int64_t id = c.reg(m.get(), m.size());
		ASSERT_GT(id, last); // one slot, its generation growing
		ASSERT_EQ(1, id & 0xffffffff) << "the freed slot is reused";
		ASSERT_TRUE(seen.insert(id).second);
		last = id;
		ASSERT_EQ(0, c.unreg(id));
		ASSERT_EQ(-ESTALE, c.unreg(id));
	}
	// A REGISTER refused before it takes a slot burns no generation.
	EXPECT_EQ(-EINVAL, c.reg(m.get(), 0));
	int64_t next = c.reg(m.get(), m.size());
	EXPECT_EQ(last + (1LL << 32), next);
	// Every older generation of the slot is stale; a newer one was never
	// handed out.
	EXPECT_EQ(-ESTALE, c.unreg(last));
	EXPECT_EQ(-EINVAL, c.unreg(next + (1LL << 32)));
	EXPECT_EQ(0, c.unreg(next));
}

// Sparse live ids cost no index space: register 64, keep one, repeat.
// Before slots were reused, each round's survivor held a whole xarray node.
TEST(Register, SparseLiveIdsKeepTheIndexDense)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(page_size());
	int64_t top = 0;
	for (int round = 0; round < 200; round++) {
		std::vector<int64_t> ids;
		for (int i = 0; i < 64; i++) {
			ids.push_back(c.reg(m.get(), m.size()));
			ASSERT_GT(ids.back(), 0);
			top = std::max(top, ids.back() & 0xffffffff);
		}
		for (int i = 1; i < 64; i++)
			ASSERT_EQ(0, c.unreg(ids[i]));
	}
	EXPECT_EQ(200u, c.query().registrations);
	// 200 live, at most 200 + 63 slots ever used.
	EXPECT_LE(top, 263);
}

TEST(Malformed, DrainTable)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	std::vector<mrn_dirty_entry> buf(4);
	struct {
		const char *what;
		uint32_t size;
		uint32_t flags;
		uint32_t entry_size;
		int err;
	} cases[] = {
		{"size 0", 0, 0, sizeof(mrn_dirty_entry), EINVAL},
		{"size v1-8", MRN_DRAIN_SIZE_VER1 - 8, 0, sizeof(mrn_dirty_entry), EINVAL},
		{"flags", sizeof(mrn_drain), 4, sizeof(mrn_dirty_entry), EINVAL},
		{"entry_size 0", sizeof(mrn_drain), 0, 0, EINVAL},
		{"entry_size 16", sizeof(mrn_drain), 0, 16, EINVAL},
		{"entry_size 33", sizeof(mrn_drain), 0, 33, EINVAL},
		{"entry_size 8192", sizeof(mrn_drain), 0, 8192, EINVAL},
	};
	for (const auto &tc : cases) {
		mrn_drain d;
		memset(&d, 0, sizeof(d));
		d.size = tc.size;
		d.flags = tc.flags;
		d.entries = reinterpret_cast<uintptr_t>(buf.data());
		d.capacity = 4;
		d.entry_size = tc.entry_size;
		errno = 0;
		EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_DRAIN, &d)) << tc.what;
		EXPECT_EQ(tc.err, errno) << tc.what;
	}
}

TEST(Malformed, QueryAndUnknownCommands)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	std::vector<uint64_t> buf(64, 0);
	auto *q = reinterpret_cast<mrn_query *>(buf.data());
	EXPECT_EQ(64u, sizeof(mrn_query));
	EXPECT_EQ(64, MRN_QUERY_SIZE_VER1);
	q->size = MRN_QUERY_SIZE_VER1 - 8;
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_QUERY, q));
	EXPECT_EQ(EINVAL, errno);
	q->size = sizeof(mrn_query);
	q->flags = 2;
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_QUERY, q));
	EXPECT_EQ(EINVAL, errno);
	q->flags = 0;
	const unsigned bigger = sizeof(mrn_query) + 16;
	q->size = bigger;
	buf[sizeof(mrn_query) / 8 + 1] = 5;
	errno = 0;
	EXPECT_EQ(-1, mrn::ioctl_sized(c.fd(), _IOC_NR(MRN_IOC_QUERY), bigger, q));
	EXPECT_EQ(E2BIG, errno);
	buf[sizeof(mrn_query) / 8 + 1] = 0;
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_QUERY, q)); // size field != command's
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(0, mrn::ioctl_sized(c.fd(), _IOC_NR(MRN_IOC_QUERY), bigger, q));
	EXPECT_EQ(static_cast<uint32_t>(MRN_ABI_VERSION), q->abi_version);
	EXPECT_EQ(0u, buf[sizeof(mrn_query) / 8 + 1]); // the tail is not written

	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IOWR(MRN_IOC_MAGIC, 9, struct mrn_query), q));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IOWR('x', 4, struct mrn_query), q));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IO(MRN_IOC_MAGIC, 4), q));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IOR(MRN_IOC_MAGIC, 4, struct mrn_query), q));
	EXPECT_EQ(ENOTTY, errno);
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IOW(MRN_IOC_MAGIC, 4, struct mrn_query), q));
	EXPECT_EQ(ENOTTY, errno);
	for (unsigned nr : {0u, 5u, 255u}) {
		errno = 0;
		EXPECT_EQ(-1, mrn::ioctl_sized(c.fd(), nr, sizeof(mrn_query), q)) << nr;
		EXPECT_EQ(ENOTTY, errno) << nr;
	}
	// The development ABI's magic is not ours any more.
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IOWR(0xB7, 4, struct mrn_query), q));
	EXPECT_EQ(ENOTTY, errno);
	// A larger command with a zero tail is fine if the size field agrees.
	memset(buf.data(), 0, buf.size() * 8);
	q->size = 512;
	EXPECT_EQ(0, ioctl(c.fd(), _IOWR(MRN_IOC_MAGIC, 4, char[512]), q));
	q->size = sizeof(mrn_query);
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), _IOWR(MRN_IOC_MAGIC, 4, char[512]), q));
	EXPECT_EQ(EINVAL, errno);
}

TEST(Drain, BadPointerIsEFAULTAndLosesNothing)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	const size_t ps = page_size();
	Map m(8 * ps);
	std::set<uint64_t> ids;
	mrn::StatsDelta stats;
	for (int i = 0; i < 8; i++)
		ids.insert(static_cast<uint64_t>(c.reg(m.get() + i * ps, ps, i)));
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_DONTNEED));
	EXPECT_EQ(8u, c.gen());

	mrn_drain d = Ctx::drain_arg(reinterpret_cast<void *>(0xffff888000000000ULL), 8);
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_DRAIN, &d));
	EXPECT_EQ(EFAULT, errno);
	d.entries = 0;
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_DRAIN, &d));
	EXPECT_EQ(EFAULT, errno);

	// A buffer whose second half is not writable: entries 0-3 are written
	// before the fault, and still nothing may be lost.
	Map buf(2 * ps);
	ASSERT_EQ(0, mprotect(buf.get() + ps, ps, PROT_READ));
	d.entries = reinterpret_cast<uintptr_t>(buf.get() + ps - 4 * sizeof(mrn_dirty_entry));
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_DRAIN, &d));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(8u, c.query().dirty);

	// Header not writable (read-only struct): EFAULT, nothing lost.
	Map hdr(ps);
	std::vector<mrn_dirty_entry> out(8);
	auto *hd = reinterpret_cast<mrn_drain *>(hdr.get());
	*hd = d;
	hd->entries = reinterpret_cast<uintptr_t>(out.data());
	ASSERT_EQ(0, mprotect(hdr.get(), ps, PROT_READ));
	errno = 0;
	EXPECT_EQ(-1, ioctl(c.fd(), MRN_IOC_DRAIN, hd));
	EXPECT_EQ(EFAULT, errno);

	EXPECT_EQ(ids, c.drain_ids());
	EXPECT_EQ(8, stats["drained"]);
}

TEST(Drain, CapacityAndMore)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	const size_t ps = page_size();
	Map m(10 * ps);
	std::set<uint64_t> ids;
	for (int i = 0; i < 10; i++)
		ids.insert(static_cast<uint64_t>(c.reg(m.get() + i * ps, ps, 100 + i)));
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_DONTNEED));
	EXPECT_EQ(10u, c.gen());

	std::vector<mrn_dirty_entry> got;
	bool more = false;
	uint64_t g = 0;
	ASSERT_EQ(0, c.drain_once(&got, 0, &more, &g)); // a peek
	EXPECT_TRUE(got.empty());
	EXPECT_TRUE(more);
	EXPECT_EQ(10u, g);
	ASSERT_EQ(0, c.drain_once(&got, 3, &more, &g));
	EXPECT_EQ(3u, got.size());
	EXPECT_TRUE(more);
	ASSERT_EQ(0, c.drain_once(&got, 3, &more, &g));
	ASSERT_EQ(0, c.drain_once(&got, 3, &more, &g));
	EXPECT_EQ(9u, got.size());
	EXPECT_TRUE(more);
	ASSERT_EQ(0, c.drain_once(&got, 3, &more, &g));
	EXPECT_EQ(10u, got.size());
	EXPECT_FALSE(more);
	EXPECT_EQ(c.gen(), g);
	std::set<uint64_t> seen;
	for (const auto &e : got) {
		EXPECT_TRUE(seen.insert(e.id).second);
		EXPECT_EQ(e.cookie - 100, (e.addr - reinterpret_cast<uintptr_t>(m.get())) / ps);
	}
	EXPECT_EQ(ids, seen);
}

// Two one-page registrations, both invalidated, drained raw with room for
// three slots of entry_size bytes (0xAA before). The entries written.
uint32_t drain_two_raw(uint32_t entry_size, std::vector<unsigned char> *buf)
{
	Ctx c;
	EXPECT_TRUE(c.ok());
	const size_t ps = page_size();
	Map m(2 * ps);
	EXPECT_GT(c.reg(m.get(), ps, 11), 0);
	EXPECT_GT(c.reg(m.get() + ps, ps, 12), 0);
	EXPECT_EQ(0, madvise(m.get(), m.size(), MADV_DONTNEED));
	buf->assign(3 * entry_size, 0xAA);
	mrn_drain d;
	memset(&d, 0, sizeof(d));
	d.size = sizeof(d);
	d.entries = reinterpret_cast<uintptr_t>(buf->data());
	d.capacity = 3;
	d.entry_size = entry_size;
	EXPECT_EQ(0, ioctl(c.fd(), MRN_IOC_DRAIN, &d));
	return d.count;
}

TEST(Drain, LargerEntrySizeIsZeroFilled)
{
	std::vector<unsigned char> buf;
	ASSERT_EQ(2u, drain_two_raw(48, &buf));
	for (int i = 0; i < 2; i++) {
		mrn_dirty_entry e;
		memcpy(&e, &buf[i * 48], sizeof(e));
		EXPECT_TRUE(e.cookie == 11 || e.cookie == 12);
		EXPECT_EQ(static_cast<uint32_t>(MRN_REASON_CLEAR), e.reason);
		EXPECT_EQ(0u, e.flags);
		for (int j = MRN_DIRTY_ENTRY_SIZE_VER2; j < 48; j++)
			EXPECT_EQ(0, buf[i * 48 + j]);
	}
	EXPECT_EQ(0xAA, buf[2 * 48]); // beyond count: untouched
}

// A program built for the first layout (32-byte entries) gets entries
// without a reason, packed as before.
TEST(Drain, FirstLayoutHasNoReason)
{
	std::vector<unsigned char> buf;
	ASSERT_EQ(2u, drain_two_raw(MRN_DIRTY_ENTRY_SIZE_VER1, &buf));
	std::set<uint64_t> cookies;
	for (int i = 0; i < 2; i++) {
		uint64_t cookie;
		memcpy(&cookie, &buf[i * MRN_DIRTY_ENTRY_SIZE_VER1], sizeof(cookie));
		cookies.insert(cookie);
	}
	EXPECT_EQ((std::set<uint64_t>{11, 12}), cookies);
	EXPECT_EQ(0xAA, buf[2 * MRN_DIRTY_ENTRY_SIZE_VER1]); // beyond count: untouched
}

// Independent as long as one change marks no more than a callback's
// budget: beyond it, the rest is deferred and every context of the process
// sees its generation move (Contexts.BeyondTheBudget below).
TEST(Contexts, ManyPerProcessAreIndependent)
{
	const int n = static_cast<int>(mrn::kMarkBudget);
	std::vector<std::unique_ptr<Ctx>> ctxs;
	Map m(2 * page_size());
	std::vector<int64_t> ids;
	for (int i = 0; i < n; i++) {
		ctxs.emplace_back(new Ctx());
		ASSERT_TRUE(ctxs.back()->ok());
		// Everyone watches page 0; odd contexts watch page 1 as well.
		ids.push_back(ctxs.back()->reg(m.get(), page_size(), i));
		ASSERT_GT(ids.back(), 0);
		if (i & 1) {
			ASSERT_GT(ctxs.back()->reg(m.get() + page_size(), page_size(), 1000 + i),
				  0);
		}
	}
	ASSERT_EQ(0, madvise(m.get() + page_size(), page_size(), MADV_DONTNEED));
	for (int i = 0; i < n; i++)
		EXPECT_EQ((i & 1) ? 1u : 0u, ctxs[i]->gen()) << i;
	ASSERT_EQ(0, madvise(m.get(), page_size(), MADV_DONTNEED));
	for (int i = 0; i < n; i++) {
		auto e = ctxs[i]->drain();
		EXPECT_EQ((i & 1) ? 2u : 1u, e.size()) << i;
	}
	// Closing half of them leaves the others working.
	for (int i = 0; i < n; i += 2)
		ctxs[i].reset();
	Map m2(page_size());
	for (int i = 1; i < n; i += 2)
		ASSERT_GT(ctxs[i]->reg(m2.get(), m2.size(), i), 0);
	ASSERT_EQ(0, madvise(m2.get(), m2.size(), MADV_DONTNEED));
	for (int i = 1; i < n; i += 2)
		EXPECT_EQ(1u, ctxs[i]->drain().size()) << i;
}

// A change over more registrations than one callback marks: every context
// of the process sees its generation move before the change returns, and
// each DRAIN still reports exactly its own registrations.
TEST(Contexts, BeyondTheBudgetEveryContextDrainsExactlyItsOwn)
{
	const int n = 4 * static_cast<int>(mrn::kMarkBudget);
	std::vector<std::unique_ptr<Ctx>> ctxs;
	Map m(2 * page_size());
	for (int i = 0; i < n; i++) {
		ctxs.emplace_back(new Ctx());
		ASSERT_TRUE(ctxs.back()->ok());
		ASSERT_GT(ctxs.back()->reg(m.get(), page_size(), i), 0);
		if (i & 1) {
			ASSERT_GT(ctxs.back()->reg(m.get() + page_size(), page_size(), 1000 + i),
				  0);
		}
	}
	mrn::StatsDelta stats;
	ASSERT_EQ(0, madvise(m.get() + page_size(), page_size(), MADV_DONTNEED));
	EXPECT_EQ(1, stats["deferred"]);
	for (int i = 0; i < n; i++)
		EXPECT_GE(ctxs[i]->gen(), 1u) << i;
	for (int i = 0; i < n; i++) {
		auto e = ctxs[i]->drain();
		ASSERT_EQ((i & 1) ? 1u : 0u, e.size()) << i;
		if (i & 1) {
			EXPECT_EQ(1000u + i, e[0].cookie) << i;
		}
	}
	ASSERT_EQ(0, madvise(m.get(), page_size(), MADV_DONTNEED));
	for (int i = 0; i < n; i++)
		EXPECT_EQ(1u, ctxs[i]->drain().size()) << i;
}

// The number of contexts of one process bounds what a deferral costs the
// change that makes it: the 65th open fails with EMFILE.
TEST(Contexts, AtMost64PerProcess)
{
	std::vector<std::unique_ptr<Ctx>> ctxs;
	for (int i = 0; i < 64; i++) {
		ctxs.emplace_back(new Ctx());
		if (!ctxs.back()->ok()) {
			ctxs.pop_back();
			break;
		}
	}
	EXPECT_EQ(64u, ctxs.size()) << "a context of this process is still open elsewhere?";
	mrn::expect_one_more_open_is_emfile(&ctxs);
}

} // namespace

#if defined(__x86_64__)
namespace {

// A 32-bit system call from this 64-bit process (int $0x80: the i386
// numbers, 32-bit arguments), as a 32-bit program would make it.
long syscall32(long nr, long a, long b, long c)
{
	long ret;
	asm volatile("int $0x80"
		     : "=a"(ret)
		     : "a"(nr), "b"(a), "c"(b), "d"(c)
		     : "memory", "r8", "r9", "r10", "r11");
	return ret;
}

constexpr long kI386Open = 5, kI386Close = 6, kI386Ioctl = 54;

} // namespace

// The generation is one 64-bit word that a 32-bit process would read in two
// halves: 32-bit callers are refused at open, and a context opened by a
// 64-bit process answers no 32-bit ioctl.
TEST(Compat, ThirtyTwoBitCallersAreRefused)
{
	// Arguments a 32-bit call can reach: below 4 GiB.
	void *low = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
	ASSERT_NE(MAP_FAILED, low);
	char *path = static_cast<char *>(low);
	strcpy(path, MRN_DEVICE_PATH);
	const long fd32 = syscall32(kI386Open, reinterpret_cast<long>(path), O_RDWR, 0);
	if (fd32 == -ENOSYS) {
		munmap(low, page_size());
		GTEST_SKIP() << "no 32-bit system calls (IA32 emulation off)";
	}
	if (fd32 >= 0)
		syscall32(kI386Close, fd32, 0, 0);
	EXPECT_EQ(-EOPNOTSUPP, fd32) << "a 32-bit open of " << MRN_DEVICE_PATH;

	Ctx c;
	ASSERT_TRUE(c.ok());
	auto *q = reinterpret_cast<mrn_query *>(path + 64);
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	EXPECT_EQ(-ENOTTY, syscall32(kI386Ioctl, c.fd(), static_cast<long>(MRN_IOC_QUERY),
				     reinterpret_cast<long>(q)));
	munmap(low, page_size());
}
#endif

// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko on huge pages and on paths that replace frames without an
// unmap (KSM, collapse, migration): never a lost invalidation, and figures
// for how many registrations each path invalidates.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "mrn_precision.h"

using namespace mrn;

namespace {

class Precision : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_TRUE(c.ok()) << "open: " << strerror(errno); }
	Ctx c;
};


// A PMD split replaces no page but is announced as CLEAR over 2 MiB: the
// figure is how many of 512 one-page registrations one split invalidates.
TEST_F(Precision, ThpSplitInvalidatesTheWholeHugePage)
{
	Thp t;
	if (!t.get())
		GTEST_SKIP() << "no transparent huge page (THP disabled?)";
	const int n = static_cast<int>(kHuge / page_size());
	auto ids = reg_pages(c, t.get(), n);
	auto before = pfns(t.get(), n);
	// mprotect of one page splits the VMA, and so the huge PMD.
	ASSERT_EQ(0, mprotect(t.get() + 7 * page_size(), page_size(), PROT_READ));
	auto after = pfns(t.get(), n);
	Ids drained = c.drain_ids();
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	const long moved = pages_replaced(before, after);
	printf("THP split by mprotect of 1 page: %zu of %d one-page registrations invalidated, "
	       "%ld pages replaced, AnonHugePages now %ld kB\n",
	       drained.size(), n, moved, mrn::smaps_kb(t.get(), "AnonHugePages"));
}

// fork with a THP pinned for DMA (io_uring fixed buffers: FOLL_LONGTERM):
// the parent's huge PMD is split and the pinned pages stay the parent's.
TEST_F(Precision, ForkWithPinnedThp)
{
	Thp t;
	if (!t.get())
		GTEST_SKIP() << "no transparent huge page (THP disabled?)";
	mrn::LongTermPin pin(t.get(), kHuge);
	if (!pin.ok())
		GTEST_SKIP() << "io_uring fixed buffers unavailable: " << strerror(errno);
	const int n = static_cast<int>(kHuge / page_size());
	auto ids = reg_pages(c, t.get(), n);
	auto before = pfns(t.get(), n);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		t.get()[0] = 1; // the child writes its copy
		_exit(0);
	}
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	memset(t.get(), 0x22, kHuge); // the parent writes: no COW for pinned pages
	auto after = pfns(t.get(), n);
	Ids drained = c.drain_ids();
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	const long moved = pages_replaced(before, after);
	printf("fork with a pinned THP: %zu of %d registrations invalidated, %ld pages replaced "
	       "in the parent\n",
	       drained.size(), n, moved);
}

// madvise on part of a THP that holds a registration elsewhere in it.
TEST_F(Precision, MadviseOnPartOfAThp)
{
	Thp t;
	if (!t.get())
		GTEST_SKIP() << "no transparent huge page (THP disabled?)";
	mrn::LongTermPin pin(t.get() + 256 * page_size(), page_size());
	const int n = static_cast<int>(kHuge / page_size());
	auto ids = reg_pages(c, t.get(), n);
	auto before = pfns(t.get(), n);
	ASSERT_EQ(0, madvise(t.get(), page_size(), MADV_DONTNEED));
	t.get()[0] = 1;
	auto after = pfns(t.get(), n);
	Ids drained = c.drain_ids();
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	EXPECT_TRUE(drained.count(ids[0])) << "the zapped page must be invalidated";
	const long moved = pages_replaced(before, after);
	printf("MADV_DONTNEED of 1 page of a THP (page 256 pinned: %s): %zu of %d registrations "
	       "invalidated, %ld pages replaced\n",
	       pin.ok() ? "yes" : "no", drained.size(), n, moved);
}

// MADV_FREE invalidates at madvise time, although the pages stay mapped
// until reclaim: the figure shows how many of 16 registrations.
TEST_F(Precision, MadvFreeInvalidatesAtMadviseTime)
{
	Map m(16 * page_size());
	m.touch();
	auto ids = reg_pages(c, m.get(), 16);
	auto before = pfns(m.get(), 16);
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_FREE));
	auto after = pfns(m.get(), 16);
	Ids drained = c.drain_ids();
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	long still = 0;
	for (int i = 0; i < 16; i++)
		still += after[i] != 0 && after[i] == before[i];
	printf("MADV_FREE: %zu of 16 registrations invalidated at madvise time; %ld pages still "
	       "mapped to the same frame\n",
	       drained.size(), still);
}

// MADV_PAGEOUT reclaims what it can (nothing anonymous without swap):
// every page that left must have been invalidated; the figure says how many.
TEST_F(Precision, MadvPageout)
{
#ifndef MADV_PAGEOUT
	GTEST_SKIP() << "no MADV_PAGEOUT in these headers";
#else
	mrn::FileMap f(16 * page_size(), MAP_SHARED);
	ASSERT_NE(nullptr, f.get());
	auto ids = reg_pages(c, f.get(), 16);
	auto before = pfns(f.get(), 16);
	ASSERT_EQ(0, madvise(f.get(), 16 * page_size(), MADV_PAGEOUT)) << strerror(errno);
	auto after = pfns(f.get(), 16);
	Ids drained = c.drain_ids();
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	long gone = 0;
	for (int i = 0; i < 16; i++)
		gone += before[i] != after[i];
	printf("MADV_PAGEOUT of 16 shared file pages: %ld left their frame, %zu of 16 "
	       "registrations invalidated\n",
	       gone, drained.size());
#endif
}

// fork of a MAP_PRIVATE hugetlb mapping: CLEAR over the whole VMA on 6.1.
TEST_F(Precision, PrivateHugetlbFork)
{
	std::string old;
	{
		std::ifstream f("/proc/sys/vm/nr_hugepages");
		f >> old;
	}
	auto set_huge = [](const std::string &v) {
		std::ofstream f("/proc/sys/vm/nr_hugepages");
		f << v;
		return static_cast<bool>(f.flush());
	};
	if (old.empty() || !set_huge(std::to_string(std::stol(old) + 2)))
		GTEST_SKIP() << "cannot reserve hugetlb pages";
	void *raw = mmap(nullptr, kHuge, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (raw == MAP_FAILED) {
		set_huge(old);
		GTEST_SKIP() << "MAP_HUGETLB: " << strerror(errno);
	}
	char *h = static_cast<char *>(raw);
	memset(h, 0x33, kHuge);
	const int n = static_cast<int>(kHuge / page_size());
	auto ids = reg_pages(c, h, n);
	auto before = pfns(h, n);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		_exit(0);
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	h[0] = 1;
	auto after = pfns(h, n);
	Ids drained = c.drain_ids();
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	printf("fork of a private hugetlb mapping: %zu of %d registrations invalidated, frame %s\n",
	       drained.size(), n, before[0] == after[0] ? "kept" : "replaced");
	munmap(h, kHuge);
	set_huge(old);
}


// --- paths that replace frames without unmapping: KSM, collapse, migration --

// A sysfs/procfs knob set for the test and put back afterwards.
class Knob {
public:
	Knob(std::string path, const std::string &value) : path_(std::move(path))
	{
		std::ifstream in(path_);
		if (!(in >> old_))
			return;
		ok_ = write(value);
	}
	~Knob()
	{
		if (ok_)
			write(old_);
	}
	Knob(const Knob &) = delete;
	Knob &operator=(const Knob &) = delete;
	bool ok() const { return ok_; }

private:
	bool write(const std::string &v) const
	{
		std::ofstream out(path_);
		out << v;
		return static_cast<bool>(out.flush());
	}
	std::string path_, old_;
	bool ok_ = false;
};

// Waits up to `seconds` for at least `want` of the pages to change frame.
std::vector<uint64_t> wait_for_replaced(const char *p, int n, const std::vector<uint64_t> &before,
					long want, int seconds)
{
	std::vector<uint64_t> after = pfns(p, n);
	for (int i = 0; i < seconds * 20 && pages_replaced(before, after) < want; i++) {
		usleep(50 * 1000);
		after = pfns(p, n);
	}
	return after;
}

// KSM merges identical pages: all but one of them get another frame
// (write-protected and shared), without any unmap. Page 0 is pinned as
// ibv_reg_mr pins: KSM must leave it alone, and a page that changed frame
// must have been invalidated.
TEST_F(Precision, KsmMergeInvalidatesEveryReplacedPage)
{
	Knob run("/sys/kernel/mm/ksm/run", "1"), scan("/sys/kernel/mm/ksm/pages_to_scan", "4096"),
		sleep_ms("/sys/kernel/mm/ksm/sleep_millisecs", "0");
	if (!run.ok() || !scan.ok() || !sleep_ms.ok())
		GTEST_SKIP() << "KSM is not available (no /sys/kernel/mm/ksm)";
	const int n = 32;
	Map m(n * page_size());
	ASSERT_NE(nullptr, m.get());
	memset(m.get(), 0x5a, m.size());
	PinReader pin;
	ASSERT_TRUE(pin.ok());
	ASSERT_EQ(0, pin.pin(m.get(), page_size())) << strerror(errno);
	auto ids = reg_pages(c, m.get(), n);
	auto before = pfns(m.get(), n);
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_MERGEABLE)) << strerror(errno);
	auto after = wait_for_replaced(m.get(), n, before, n - 2, 30);
	Ids drained = c.drain_ids();
	const long moved = pages_replaced(before, after);
	madvise(m.get(), m.size(), MADV_UNMERGEABLE);
	if (moved == 0)
		GTEST_SKIP() << "ksmd merged nothing in 30 s";
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	EXPECT_EQ(before[0], after[0]) << "KSM replaced a long-term pinned page";
	// What the pin sees is what the mapping holds.
	const uint64_t tag = 0x6b736d0000000001ULL;
	memcpy(m.get() + 128, &tag, sizeof(tag));
	uint64_t seen = 0;
	ASSERT_TRUE(pin.read_through_pin(128, &seen, sizeof(seen)));
	EXPECT_EQ(tag, seen);
	printf("KSM merge of %d identical pages (page 0 pinned): %ld replaced, %zu of %d "
	       "registrations invalidated\n",
	       n, moved, drained.size(), n);
}

// MADV_COLLAPSE copies 512 small pages into a new huge page: every frame
// changes, so every registration must be invalidated.
TEST_F(Precision, MadvCollapseInvalidatesEveryPage)
{
#ifndef MADV_COLLAPSE
	constexpr int kMadvCollapse = 25;
#else
	constexpr int kMadvCollapse = MADV_COLLAPSE;
#endif
	Map raw(2 * kHuge);
	ASSERT_NE(nullptr, raw.get());
	char *a = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw.get()) + kHuge - 1) &
					   ~(kHuge - 1));
	const int n = static_cast<int>(kHuge / page_size());
	ASSERT_EQ(0, madvise(a, kHuge, MADV_NOHUGEPAGE));
	memset(a, 0x44, kHuge);
	ASSERT_EQ(0, madvise(a, kHuge, MADV_HUGEPAGE));
	auto ids = reg_pages(c, a, n);
	auto before = pfns(a, n);
	if (madvise(a, kHuge, kMadvCollapse) != 0)
		GTEST_SKIP() << "MADV_COLLAPSE: " << strerror(errno);
	auto after = pfns(a, n);
	Ids drained = c.drain_ids();
	const long moved = pages_replaced(before, after);
	EXPECT_EQ(n, moved) << "a collapse copies every page";
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	printf("MADV_COLLAPSE of %d small pages: %ld replaced, %zu of %d registrations "
	       "invalidated, AnonHugePages now %ld kB\n",
	       n, moved, drained.size(), n, smaps_kb(a, "AnonHugePages"));
}

// Four touched pages, one registration each, page 3 pinned as ibv_reg_mr
// pins: the setup of the migration tests.
struct FourPagesLastPinned {
	explicit FourPagesLastPinned(const Ctx &c) : m(4 * page_size())
	{
		EXPECT_NE(nullptr, m.get());
		if (!m.get())
			return;
		m.touch();
		EXPECT_TRUE(pin.ok());
		EXPECT_EQ(0, pin.pin(m.get() + 3 * page_size(), page_size())) << strerror(errno);
		ids = reg_pages(c, m.get(), 4);
		before = pfns(m.get(), 4);
	}
	char *page(int i) const { return m.get() + i * page_size(); }
	Map m;
	PinReader pin;
	std::vector<uint64_t> ids, before;
};

// Migration on one node: MADV_SOFT_OFFLINE moves a page to a new frame
// (and retires the old one). A pinned page cannot be migrated.
TEST_F(Precision, SoftOfflineMigrationInvalidatesThePage)
{
#ifndef MADV_SOFT_OFFLINE
	constexpr int kSoftOffline = 101;
#else
	constexpr int kSoftOffline = MADV_SOFT_OFFLINE;
#endif
	FourPagesLastPinned f(c);
	if (HasFailure())
		return;
	const auto &ids = f.ids;
	const auto &before = f.before;
	if (madvise(f.page(1), page_size(), kSoftOffline) != 0)
		GTEST_SKIP() << "MADV_SOFT_OFFLINE: " << strerror(errno);
	// errno now, before anything else can change it.
	const int pinned_err = madvise(f.page(3), page_size(), kSoftOffline) == 0 ? 0 : errno;
	auto after = pfns(f.page(0), 4);
	Ids drained = c.drain_ids();
	EXPECT_NE(before[1], after[1]) << "soft offline did not migrate the page";
	EXPECT_TRUE(drained.count(ids[1])) << "the migrated page's registration is still clean";
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	EXPECT_EQ(before[3], after[3]) << "a long-term pinned page was migrated";
	printf("soft offline: page 1 migrated, %zu of 4 registrations invalidated; pinned page 3: "
	       "madvise %s, frame %s\n",
	       drained.size(), pinned_err == 0 ? "0" : strerror(pinned_err),
	       before[3] == after[3] ? "kept" : "replaced");
}

// move_pages(2) to another NUMA node (skipped on one node; the debug-kernel
// lane boots its guest with two). A long-term pinned page stays where it is.
TEST_F(Precision, MovePagesToAnotherNode)
{
	long nodes = 0;
	for (int i = 0; i < 64; i++)
		nodes += access(("/sys/devices/system/node/node" + std::to_string(i)).c_str(), F_OK) == 0;
	if (nodes < 2)
		GTEST_SKIP() << "one NUMA node: nothing to move to";
	FourPagesLastPinned f(c);
	if (HasFailure())
		return;
	const auto &ids = f.ids;
	const auto &before = f.before;
	void *pages[4];
	int to[4], status[4];
	for (int i = 0; i < 4; i++)
		pages[i] = f.page(i);
	// Where they are now (nodes == NULL: status gets each page's node).
	ASSERT_EQ(0, syscall(SYS_move_pages, 0, 4, pages, nullptr, status, 0)) << strerror(errno);
	for (int i = 0; i < 4; i++)
		to[i] = status[i] == 0 ? 1 : 0;
	ASSERT_GE(syscall(SYS_move_pages, 0, 4, pages, to, status, 2 /* MPOL_MF_MOVE */), 0)
		<< strerror(errno);
	auto after = pfns(f.page(0), 4);
	Ids drained = c.drain_ids();
	EXPECT_EQ(3, pages_replaced(before, after) - (before[3] != after[3]))
		<< "pages 0-2 should have moved";
	EXPECT_EQ(0, lost_invalidations(before, after, ids, drained));
	EXPECT_EQ(before[3], after[3]) << "a long-term pinned page was migrated";
	printf("move_pages to the other node: %ld of 4 pages moved (pinned page 3: status %d), "
	       "%zu of 4 registrations invalidated\n",
	       pages_replaced(before, after), status[3], drained.size());
}

long numa_nodes()
{
	long nodes = 0;
	for (int i = 0; i < 64; i++)
		nodes += access(("/sys/devices/system/node/node" + std::to_string(i)).c_str(), F_OK) == 0;
	return nodes;
}

// A tunable of NUMA balancing: /proc/sys/kernel/ (5.10) or debugfs (6.x),
// put back as it was when the test ends.
class Tunable {
public:
	Tunable(const std::string &name, const std::string &value)
	{
		for (std::string dir : {"/proc/sys/kernel/numa_balancing_",
					"/sys/kernel/debug/sched/numa_balancing/"}) {
			std::ifstream in(dir + name);
			if (in >> old_) {
				path_ = dir + name;
				break;
			}
		}
		if (!path_.empty())
			std::ofstream(path_) << value;
	}
	~Tunable()
	{
		if (!path_.empty())
			std::ofstream(path_) << old_;
	}

private:
	std::string path_, old_;
};

// NUMA balancing moves an anonymous THP that an unpinned registration
// watches: from 4.20 to 5.13 that migration sends no notifier of its own
// (only the hinting scan's PROTECTION_VMA before it), so a module that
// ignores PROTECTION_VMA loses it there. Needs two nodes (the 5.10 and
// debug-kernel lanes boot two) and a kernel that moves the page in time.
TEST_F(Precision, NumaBalancingMovesAnUnpinnedThp)
{
	if (numa_nodes() < 2)
		GTEST_SKIP() << "one NUMA node: nothing to balance";
	std::string was;
	if (!(std::ifstream("/proc/sys/kernel/numa_balancing") >> was))
		GTEST_SKIP() << "no /proc/sys/kernel/numa_balancing (CONFIG_NUMA_BALANCING off)";
	Tunable delay("scan_delay_ms", "0"), period_min("scan_period_min_ms", "10"),
		period_max("scan_period_max_ms", "100");
	const size_t ps = page_size();
	char *raw = static_cast<char *>(mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(MAP_FAILED, raw);
	char *a = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) &
					   ~(kHuge - 1));
	// Born on node 1, while every CPU of the guest is on node 0.
	unsigned long node1 = 1UL << 1;
	ASSERT_EQ(0, madvise(a, kHuge, MADV_HUGEPAGE));
	ASSERT_EQ(0, syscall(SYS_mbind, a, kHuge, 2 /* MPOL_BIND */, &node1, 64, 0))
		<< strerror(errno);
	memset(a, 0x22, kHuge);
	void *page = a;
	int status = -1;
	ASSERT_EQ(0, syscall(SYS_move_pages, 0, 1, &page, nullptr, &status, 0));
	if (smaps_kb(a, "AnonHugePages") < 2048 || status != 1) {
		munmap(raw, 2 * kHuge);
		GTEST_SKIP() << "no THP on node 1 (AnonHugePages " << smaps_kb(a, "AnonHugePages")
			     << " kB, node " << status << ")";
	}
	// Misplaced from now on: the default policy wants the CPU's node.
	ASSERT_EQ(0, syscall(SYS_mbind, a, kHuge, 0 /* MPOL_DEFAULT */, nullptr, 0, 0));
	const int64_t id = c.reg(a, kHuge);
	ASSERT_GT(id, 0);
	auto before = pfns(a, 1);

	std::ofstream("/proc/sys/kernel/numa_balancing") << "1";
	bool moved = false;
	const auto t0 = std::chrono::steady_clock::now();
	while (!moved && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
		for (size_t o = 0; o < kHuge; o += ps)
			*static_cast<volatile char *>(a + o) += 1;
		usleep(20000);
		ASSERT_EQ(0, syscall(SYS_move_pages, 0, 1, &page, nullptr, &status, 0));
		moved = status == 0;
	}
	std::ofstream("/proc/sys/kernel/numa_balancing") << was;
	auto after = pfns(a, 1);
	const long huge_after = smaps_kb(a, "AnonHugePages");
	Ids drained = c.drain_ids();
	munmap(raw, 2 * kHuge);
	if (!moved)
		GTEST_SKIP() << "NUMA balancing did not move the THP in 30 s";
	EXPECT_NE(before[0], after[0]) << "the page is on node 0 but its frame is the same";
	EXPECT_TRUE(drained.count(static_cast<uint64_t>(id)))
		<< "NUMA balancing moved the THP (AnonHugePages now " << huge_after
		<< " kB) and its registration is still clean: a lost invalidation";
	printf("NUMA balancing: the THP moved from node 1 to node 0 (AnonHugePages now %ld kB), "
	       "registration %s\n",
	       huge_after, drained.count(static_cast<uint64_t>(id)) ? "invalidated" : "CLEAN");
}

} // namespace

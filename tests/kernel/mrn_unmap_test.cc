// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko: every path that can replace pages invalidates exactly the
// registrations it overlaps; protection changes, fork and mlock do not; the
// seed's scenario; the REGISTER -> pin -> validate protocol.
#include <gtest/gtest.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "mrn_precision.h"

using mrn::Ctx;
using mrn::Map;
using mrn::page_size;

namespace {

using mrn::Ids;
using mrn::reg_pages;

Ids pick(const std::vector<uint64_t> &ids, int from, int to)
{
	Ids s;
	for (int i = from; i < to; i++)
		s.insert(ids[i]);
	return s;
}

// A DRAIN that does not allocate (for tests that must not call malloc).
uint32_t raw_drain(const Ctx &c, mrn_dirty_entry *out, uint32_t cap)
{
	mrn_drain d = Ctx::drain_arg(out, cap);
	if (ioctl(c.fd(), MRN_IOC_DRAIN, &d) != 0)
		return ~0u;
	return d.count;
}

class Unmap : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_TRUE(c.ok()); }
	Ctx c;
};

TEST_F(Unmap, MunmapWhole)
{
	Map a(4 * page_size()), other(4 * page_size());
	a.touch();
	other.touch();
	mrn::StatsDelta stats;
	int64_t ia = c.reg(a.get(), a.size(), 1);
	int64_t io = c.reg(other.get(), other.size(), 2);
	ASSERT_GT(ia, 0);
	ASSERT_GT(io, 0);
	ASSERT_EQ(0, munmap(a.get(), a.size()));
	a.release();
	EXPECT_EQ(1u, c.gen());
	EXPECT_EQ(Ids{static_cast<uint64_t>(ia)}, c.drain_ids());
	EXPECT_GE(stats["callbacks_unmap"], 1);
	EXPECT_EQ(1u, c.query().registrations);
}

// The paths that replace part of a mapping: each invalidates exactly the
// one-page registrations of the pages it replaces (pages [from, to) of
// `pages`), and nothing else.
struct PartialCase {
	const char *name;
	int pages;
	bool shared;                           // MAP_SHARED | MAP_ANONYMOUS (shmem)
	int (*replace)(char *base, size_t ps); // 0 on success
	int from, to;
	bool zaps = false; // reported as CLEAR (a zap), not UNMAP
};

const PartialCase kPartialCases[] = {
	{"MunmapPartial", 8, false, [](char *b, size_t ps) { return munmap(b + 2 * ps, 3 * ps); },
	 2, 5},
	{"MremapShrink", 8, false,
	 [](char *b, size_t ps) { return mremap(b, 8 * ps, 3 * ps, 0) == b ? 0 : -1; }, 3, 8},
	{"MadviseDontneed", 6, false,
	 [](char *b, size_t ps) { return madvise(b + 2 * ps, 2 * ps, MADV_DONTNEED); }, 2, 4, true},
	{"MadviseFree", 6, false,
	 [](char *b, size_t ps) { return madvise(b + ps, 3 * ps, MADV_FREE); }, 1, 4},
	{"MadviseRemoveOnShmem", 6, true,
	 [](char *b, size_t ps) { return madvise(b + 4 * ps, 2 * ps, MADV_REMOVE); }, 4, 6},
	{"MapFixedOverLiveRange", 8, false,
	 [](char *b, size_t ps) {
		 void *p = mmap(b + 2 * ps, 2 * ps, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		 return p == b + 2 * ps ? 0 : -1;
	 },
	 2, 4},
};

class PartialReplace : public Unmap, public ::testing::WithParamInterface<PartialCase> {};

TEST_P(PartialReplace, InvalidatesExactlyTheReplacedPages)
{
	const PartialCase &t = GetParam();
	const size_t ps = page_size();
	Map m(static_cast<size_t>(t.pages) * ps, PROT_READ | PROT_WRITE,
	      t.shared ? MAP_SHARED | MAP_ANONYMOUS : MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_NE(nullptr, m.get());
	m.touch();
	mrn::StatsDelta stats;
	auto ids = reg_pages(c, m.get(), t.pages);
	ASSERT_EQ(0, t.replace(m.get(), ps)) << strerror(errno);
	EXPECT_EQ(static_cast<uint64_t>(t.to - t.from), c.gen());
	EXPECT_EQ(pick(ids, t.from, t.to), c.drain_ids());
	if (t.zaps) {
		EXPECT_GE(stats["callbacks_clear"], t.to - t.from);
	}
}

INSTANTIATE_TEST_SUITE_P(Paths, PartialReplace, ::testing::ValuesIn(kPartialCases),
			 [](const ::testing::TestParamInfo<PartialCase> &i) {
				 return i.param.name;
			 });

TEST_F(Unmap, MunmapOnePageInTheMiddle)
{
	Map m(8 * page_size());
	m.touch();
	auto ids = reg_pages(c, m.get(), 8);
	int64_t span = c.reg(m.get() + 3 * page_size(), 3 * page_size(), 99); // pages 3-5
	int64_t whole = c.reg(m.get(), 8 * page_size(), 98);                  // all
	int64_t left = c.reg(m.get(), 4 * page_size(), 97);                   // pages 0-3
	ASSERT_GT(span, 0);
	ASSERT_GT(whole, 0);
	ASSERT_GT(left, 0);
	ASSERT_EQ(0, munmap(m.get() + 4 * page_size(), page_size()));
	Ids want = pick(ids, 4, 5);
	want.insert(static_cast<uint64_t>(span));
	want.insert(static_cast<uint64_t>(whole));
	EXPECT_EQ(want, c.drain_ids());
	EXPECT_EQ(3u, c.gen());
}

TEST_F(Unmap, MunmapOfUnpopulatedRangeStillCounts)
{
	Map m(4 * page_size());
	auto ids = reg_pages(c, m.get(), 4);
	ASSERT_EQ(0, munmap(m.get() + page_size(), page_size()));
	EXPECT_EQ(pick(ids, 1, 2), c.drain_ids());
}

TEST_F(Unmap, MremapMove)
{
	const size_t ps = page_size();
	Map src(8 * ps), dst(4 * ps), far(ps);
	src.touch();
	dst.touch();
	auto ids = reg_pages(c, src.get(), 8);
	int64_t idst = c.reg(dst.get(), dst.size(), 50);
	int64_t ifar = c.reg(far.get(), far.size(), 51);
	ASSERT_GT(idst, 0);
	ASSERT_GT(ifar, 0);
	// Move pages 2-5 of src over dst (which is replaced).
	void *r = mremap(src.get() + 2 * ps, 4 * ps, 4 * ps, MREMAP_MAYMOVE | MREMAP_FIXED,
			 dst.get());
	ASSERT_EQ(static_cast<void *>(dst.get()), r);
	Ids want = pick(ids, 2, 6);
	want.insert(static_cast<uint64_t>(idst));
	EXPECT_EQ(want, c.drain_ids());
	EXPECT_EQ(5u, c.gen());
}

TEST_F(Unmap, MremapGrowInPlaceReplacesNothing)
{
	const size_t ps = page_size();
	Map m(8 * ps);
	m.touch();
	ASSERT_EQ(0, munmap(m.get() + 4 * ps, 4 * ps));
	auto ids = reg_pages(c, m.get(), 4);
	ASSERT_EQ(static_cast<void *>(m.get()), mremap(m.get(), 4 * ps, 8 * ps, 0));
	EXPECT_EQ(0u, c.gen());
	EXPECT_TRUE(c.drain_ids().empty());
}

TEST_F(Unmap, BrkShrink)
{
	const intptr_t ps = static_cast<intptr_t>(page_size());
	// Page-align the break first, then grow it by 8 pages. Between the brk
	// calls nothing may allocate (malloc could move the break too).
	char *cur = static_cast<char *>(sbrk(0));
	intptr_t pad = (ps - reinterpret_cast<intptr_t>(cur) % ps) % ps;
	ASSERT_NE(reinterpret_cast<void *>(-1), sbrk(pad + 8 * ps));
	char *base = cur + pad;
	for (int i = 0; i < 8; i++)
		base[i * ps] = 1;
	int64_t low = c.reg(base, 4 * static_cast<size_t>(ps), 1);            // pages 0-3: stays
	int64_t high = c.reg(base + 5 * ps, 3 * static_cast<size_t>(ps), 2);  // pages 5-7: goes
	int64_t cross = c.reg(base + 3 * ps, 2 * static_cast<size_t>(ps), 3); // pages 3-4: goes
	ASSERT_NE(reinterpret_cast<void *>(-1), sbrk(-4 * ps));
	uint64_t gen_after = c.gen();
	mrn_dirty_entry e[8];
	uint32_t n = raw_drain(c, e, 8);
	ASSERT_NE(reinterpret_cast<void *>(-1), sbrk(-(pad + 4 * ps))); // restore the break
	ASSERT_GT(low, 0);
	ASSERT_GT(high, 0);
	ASSERT_GT(cross, 0);
	EXPECT_EQ(2u, gen_after);
	ASSERT_EQ(2u, n);
	Ids got{e[0].id, e[1].id};
	EXPECT_EQ((Ids{static_cast<uint64_t>(high), static_cast<uint64_t>(cross)}), got);
	// Restoring the break removed the rest.
	EXPECT_EQ(Ids{static_cast<uint64_t>(low)}, c.drain_ids());
}

TEST_F(Unmap, Shmdt)
{
	const size_t ps = page_size();
	int id = shmget(IPC_PRIVATE, 4 * ps, IPC_CREAT | 0600);
	ASSERT_GE(id, 0);
	char *p = static_cast<char *>(shmat(id, nullptr, 0));
	shmctl(id, IPC_RMID, nullptr);
	ASSERT_NE(reinterpret_cast<char *>(-1), p);
	for (size_t o = 0; o < 4 * ps; o += ps)
		p[o] = 1;
	Map other(ps);
	int64_t is = c.reg(p + 100, 2 * ps, 1);
	int64_t io = c.reg(other.get(), ps, 2);
	ASSERT_GT(is, 0);
	ASSERT_GT(io, 0);
	ASSERT_EQ(0, shmdt(p));
	EXPECT_EQ(1u, c.gen());
	EXPECT_EQ(Ids{static_cast<uint64_t>(is)}, c.drain_ids());
}

TEST_F(Unmap, ShmatRemapOverLiveRange)
{
	const size_t ps = page_size();
	Map m(4 * ps);
	m.touch();
	auto ids = reg_pages(c, m.get(), 4);
	int id = shmget(IPC_PRIVATE, 2 * ps, IPC_CREAT | 0600);
	ASSERT_GE(id, 0);
	void *p = shmat(id, m.get() + ps, SHM_REMAP);
	shmctl(id, IPC_RMID, nullptr);
	ASSERT_EQ(static_cast<void *>(m.get() + ps), p);
	EXPECT_EQ(pick(ids, 1, 3), c.drain_ids());
	shmdt(p);
}

TEST_F(Unmap, FtruncateOfSharedFileMapping)
{
	const size_t ps = page_size();
	mrn::FileMap f(6 * ps, MAP_SHARED);
	ASSERT_NE(nullptr, f.get());
	auto ids = reg_pages(c, f.get(), 6);
	ASSERT_EQ(0, ftruncate(f.fd(), static_cast<off_t>(4 * ps)));
	EXPECT_EQ(pick(ids, 4, 6), c.drain_ids());
	// Hole punching is the same kind of change.
	ASSERT_EQ(0, fallocate(f.fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			       static_cast<off_t>(ps)));
	EXPECT_EQ(pick(ids, 0, 1), c.drain_ids());
}

TEST_F(Unmap, CopyOnWriteBreakInParent)
{
	// After fork the parent's private pages are shared with the child; the
	// parent's first write replaces its page, which a pinned MR would miss.
	const size_t ps = page_size();
	Map m(2 * ps);
	m.touch();
	auto ids = reg_pages(c, m.get(), 2);
	int go[2];
	ASSERT_EQ(0, pipe(go));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		char b;
		close(go[1]);
		_exit(read(go[0], &b, 1) == 0 ? 0 : 1);
	}
	close(go[0]);
	EXPECT_EQ(0u, c.gen()); // fork itself: no invalidation
	uint64_t before = mrn::pfn_of(m.get());
	m.get()[0] = 2; // COW break on page 0 while the child shares it
	uint64_t after = mrn::pfn_of(m.get());
	close(go[1]);
	int st = 0;
	waitpid(pid, &st, 0);
	EXPECT_NE(before, after);
	EXPECT_EQ(pick(ids, 0, 1), c.drain_ids());
}

TEST_F(Unmap, CopyOnWriteOfPrivateFileMapping)
{
	const size_t ps = page_size();
	mrn::FileMap f(2 * ps, MAP_PRIVATE);
	ASSERT_NE(nullptr, f.get());
	auto ids = reg_pages(c, f.get(), 2);
	f.get()[ps] = 5; // page cache page -> private anonymous copy
	EXPECT_EQ(pick(ids, 1, 2), c.drain_ids());
}

// --- no false invalidations -------------------------------------------------

// mprotect itself replaces no page. The writes that follow may: Linux 5.10
// copies a private anonymous page on a write fault unless the fault holds
// the only reference to it (6.1 and 6.12 reuse it here), and then the
// registration really is stale. So the frames decide: exactly the replaced pages are
// reported, and on a kernel that replaces none, nothing is.
TEST_F(Unmap, MprotectBothWaysIsIgnored)
{
	Map m(4 * page_size());
	m.touch();
	std::vector<uint64_t> before;
	for (int i = 0; i < 4; i++)
		before.push_back(mrn::pfn_of(m.get() + i * page_size()));
	mrn::StatsDelta stats;
	auto ids = reg_pages(c, m.get(), 4);
	ASSERT_EQ(0, mprotect(m.get(), m.size(), PROT_READ));
	ASSERT_EQ(0, mprotect(m.get(), m.size(), PROT_READ | PROT_WRITE));
	ASSERT_EQ(0, mprotect(m.get() + page_size(), page_size(), PROT_NONE));
	ASSERT_EQ(0, mprotect(m.get() + page_size(), page_size(), PROT_READ | PROT_WRITE));
	m.touch();
	Ids replaced;
	for (int i = 0; i < 4; i++) {
		uint64_t now = mrn::pfn_of(m.get() + i * page_size());
		ASSERT_NE(0u, before[i]); // pagemap needs root
		ASSERT_NE(0u, now);
		if (now != before[i])
			replaced.insert(ids[i]);
	}
	std::printf("mprotect then write: %zu of 4 pages replaced by the kernel\n",
		    replaced.size());
	if (mrn::protection_may_migrate()) {
		// Before 5.14, on more than one node, the module cannot tell
		// mprotect from the NUMA hinting scan that precedes a THP
		// migration it is never told of: all four are invalidated.
		EXPECT_EQ(Ids(ids.begin(), ids.end()), c.drain_ids());
		EXPECT_EQ(0, stats["ignored"]);
		return;
	}
	EXPECT_EQ(replaced.size(), c.gen());
	EXPECT_EQ(replaced, c.drain_ids());
	// The mprotect events did reach the module and were ignored on purpose.
	EXPECT_GE(stats["callbacks_protection_vma"], 4);
	EXPECT_EQ(stats["callbacks_protection_vma"], stats["ignored"]);
	EXPECT_EQ(static_cast<long long>(replaced.size()), stats["invalidated"]);
}

void fork_and_wait(bool child_writes, char *p, size_t len)
{
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (child_writes)
			for (size_t o = 0; o < len; o += page_size())
				p[o] = 7;
		_exit(0);
	}
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st));
}

TEST_F(Unmap, ForkIsIgnored)
{
	Map m(4 * page_size());
	m.touch();
	mrn::StatsDelta stats;
	auto ids = reg_pages(c, m.get(), 4);
	fork_and_wait(false, m.get(), m.size());
	fork_and_wait(true, m.get(), m.size()); // the child's COW is its own
	EXPECT_EQ(0u, c.gen());
	EXPECT_TRUE(c.drain_ids().empty());
	EXPECT_GE(stats["callbacks_protection_page"], 2); // seen and ignored
	EXPECT_EQ(0, stats["invalidated"]);
	EXPECT_EQ(4u, c.query().registrations);
}

// The same with a real long-term pin (io_uring fixed buffer, as an MR):
// fork copies pinned pages for the child and leaves the parent's alone, so
// nothing is invalidated and the pin still sees what the parent writes.
// THP and hugetlb are not ignored: Precision.ForkWithPinnedThp and
// Precision.PrivateHugetlbFork measure them.
TEST_F(Unmap, ForkWithPinnedPagesIsIgnored)
{
	const size_t ps = page_size();
	Map m(4 * ps);
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_NOHUGEPAGE));
	m.touch();
	mrn::PinReader pin;
	if (!pin.ok() || pin.pin(m.get(), m.size()) != 0)
		GTEST_SKIP() << "io_uring fixed buffers unavailable";
	auto ids = reg_pages(c, m.get(), 4);
	fork_and_wait(false, m.get(), m.size());
	fork_and_wait(true, m.get(), m.size());
	const uint64_t tag = 0x666f726b2d746167ULL;
	for (int i = 0; i < 4; i++)
		memcpy(m.get() + i * ps + 8, &tag, sizeof(tag));
	EXPECT_EQ(0u, c.gen());
	EXPECT_TRUE(c.drain_ids().empty());
	for (int i = 0; i < 4; i++) {
		uint64_t seen = 0;
		ASSERT_TRUE(pin.read_through_pin(i * ps + 8, &seen, sizeof(seen)));
		EXPECT_EQ(tag, seen) << "page " << i << " is no longer the pinned one";
	}
}

// MREMAP_DONTUNMAP moves the pages away and leaves the old range mapped
// but empty: the old range's registrations must be invalidated.
TEST_F(Unmap, MremapDontunmapInvalidatesTheOldRange)
{
#ifndef MREMAP_DONTUNMAP
	GTEST_SKIP() << "no MREMAP_DONTUNMAP in these headers";
#else
	const size_t ps = page_size();
	Map src(4 * ps);
	src.touch();
	auto ids = reg_pages(c, src.get(), 4);
	// The new address is read by the kernel even without MREMAP_FIXED:
	// pass it (nullptr: anywhere) instead of leaving the variadic slot
	// undefined.
	void *dst = mremap(src.get(), src.size(), src.size(), MREMAP_MAYMOVE | MREMAP_DONTUNMAP,
			   nullptr);
	ASSERT_NE(MAP_FAILED, dst) << strerror(errno);
	EXPECT_EQ(Ids(ids.begin(), ids.end()), c.drain_ids());
	munmap(dst, src.size());
#endif
}

TEST_F(Unmap, ForkWithDontforkSendsNothing)
{
	Map m(4 * page_size());
	m.touch();
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_DONTFORK));
	mrn::StatsDelta stats;
	auto ids = reg_pages(c, m.get(), 4);
	fork_and_wait(false, m.get(), 0);
	EXPECT_EQ(0u, c.gen());
	// fork's write-protect of the parent's other pages reaches the
	// notifier and is ignored (counted without looking for registrations).
	EXPECT_EQ(0, stats.callbacks() - stats["ignored"]);
	// The range is still watched.
	ASSERT_EQ(0, madvise(m.get(), page_size(), MADV_DONTNEED));
	EXPECT_EQ(pick(ids, 0, 1), c.drain_ids());
}

TEST_F(Unmap, MlockMunlockIsIgnored)
{
	Map fresh(4 * page_size()), populated(4 * page_size());
	populated.touch();
	auto a = reg_pages(c, fresh.get(), 4);
	auto b = reg_pages(c, populated.get(), 4);
	ASSERT_EQ(0, mlock(fresh.get(), fresh.size()));
	ASSERT_EQ(0, mlock(populated.get() + page_size(), page_size()));
	ASSERT_EQ(0, munlock(fresh.get(), fresh.size()));
	ASSERT_EQ(0, munlock(populated.get() + page_size(), page_size()));
	fresh.touch();
	EXPECT_EQ(0u, c.gen());
	EXPECT_TRUE(c.drain_ids().empty());
}

// --- the seed's scenario and the protocol ----------------------------------

TEST_F(Unmap, SeedScenarioMunmapThenMapFixedSameAddress)
{
	const size_t len = 16 * page_size();
	Map m(len);
	m.touch();
	char *p = m.get();
	int64_t id = c.reg(p, len, 0x5EED);
	ASSERT_GT(id, 0);
	uint64_t g0 = c.gen();
	ASSERT_EQ(0, munmap(p, len));
	m.release();
	// Checked before the second mmap is even issued: the counter has moved
	// and the drain list names the registration.
	uint64_t g1 = c.gen();
	mrn_query q = c.query();
	void *again = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			   -1, 0);
	ASSERT_EQ(static_cast<void *>(p), again);
	EXPECT_EQ(g0 + 1, g1);
	EXPECT_EQ(1u, q.dirty);
	auto e = c.drain();
	ASSERT_EQ(1u, e.size());
	EXPECT_EQ(static_cast<uint64_t>(id), e[0].id);
	EXPECT_EQ(0x5EEDu, e[0].cookie);
	EXPECT_EQ(g1, c.gen()); // mapping into the hole replaced nothing
	munmap(p, len);
}

TEST_F(Unmap, ProtocolDetectsUnmapBetweenRegisterAndPin)
{
	// REGISTER, then pin, then check: an unmap landing between REGISTER and
	// the pin is caught, the stale pin is dropped and the retry is clean.
	const size_t len = 4 * page_size();
	Map m(len);
	m.touch();
	char *p = m.get();
	int64_t id = c.reg(p, len, 1);
	ASSERT_GT(id, 0);
	uint64_t last_gen = c.gen();
	// Another thread frees and reuses the range before the pin.
	std::thread t([&] {
		munmap(p, len);
		void *q = mmap(p, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (q == p)
			memset(p, 9, len);
	});
	t.join();
	uint64_t pinned = mrn::pfn_of(p); // "pin": the page the NIC would use
	ASSERT_NE(0u, pinned);
	ASSERT_NE(last_gen, c.gen());
	Ids dirty = c.drain_ids();
	ASSERT_EQ(1u, dirty.count(static_cast<uint64_t>(id))); // drop the pin, retry
	int64_t id2 = c.reg(p, len, 2);
	ASSERT_GT(id2, 0);
	uint64_t pinned2 = mrn::pfn_of(p);
	uint64_t g = 0;
	auto e = c.drain(16, &g);
	EXPECT_TRUE(e.empty());
	EXPECT_EQ(g, c.gen());
	EXPECT_EQ(pinned2, mrn::pfn_of(p));
	munmap(p, len);
}

TEST_F(Unmap, ProtocolHoldsUnderRacingRemaps)
{
	// Thread U keeps replacing the pages of a large mapping; the main thread
	// runs the protocol on its last page with a real long-term pin
	// (io_uring fixed buffer, FOLL_LONGTERM as ibv_reg_mr). Whenever the
	// check says "clean", the pinned page must still be the mapped one, or
	// a later DRAIN must name the registration. "The same page" is tested
	// by content, not by frame number (the allocator often hands the same
	// frame back): a per-round tag written through the mapping must be read
	// back through the pin. The watched page is zapped last, so a REGISTER
	// often lands while an unmap is in progress: without REGISTER's wait
	// for it, the pin would get the old page.
	mrn::PinReader pin;
	if (!pin.ok())
		GTEST_SKIP() << "io_uring unavailable: " << strerror(errno);
	const size_t ps = page_size();
	const size_t len = 1024 * ps;
	Map m(len);
	char *p = m.get();
	char *last = p + len - ps;
	auto remap = [&] {
		if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0) != p)
			abort();
		madvise(p, len, MADV_NOHUGEPAGE);
		for (size_t o = 0; o < len; o += ps)
			p[o] = 1;
	};
	remap();
	std::atomic<bool> stop{false}, pause_req{false}, paused{false};
	std::atomic<long> remaps{0};
	std::thread u([&] {
		while (!stop.load()) {
			if (pause_req.load()) {
				paused.store(true);
				while (pause_req.load() && !stop.load())
					std::this_thread::yield();
				paused.store(false);
				continue;
			}
			// Even rounds munmap + mmap; odd rounds MADV_DONTNEED, which zaps
			// under the read lock with the VMA in place (the pin can run
			// concurrently and see pages that are about to go).
			if (remaps.load() & 1) {
				madvise(p, len, MADV_DONTNEED);
				for (size_t o = 0; o < len; o += ps)
					p[o] = 1;
			} else {
				munmap(p, len);
				remap();
			}
			remaps++;
		}
	});
	long clean = 0, caught = 0, unmapped = 0, bad = 0, io_errors = 0;
	uint64_t round = 0;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
	while (std::chrono::steady_clock::now() < deadline) {
		round++;
		int64_t id = c.reg(last, ps, 0);
		ASSERT_GT(id, 0);
		const int prc = pin.pin(last, ps);
		Ids d = c.drain_ids();
		if (d.count(static_cast<uint64_t>(id))) {
			caught++;
			pin.unpin();
			continue;
		}
		if (prc != 0) { // nothing mapped at pin time: not a usable pin
			unmapped++;
			c.unreg(static_cast<uint64_t>(id));
			continue;
		}
		clean++;
		pause_req.store(true);
		while (!paused.load())
			std::this_thread::yield();
		// The tag goes in through the mapping and must come out through
		// the pin, unless a DRAIN now names the registration.
		const uint64_t tag = 0x6d726e0000000000ULL | round;
		memcpy(last + 64, &tag, sizeof(tag));
		uint64_t seen = 0;
		if (!pin.read_through_pin(64, &seen, sizeof(seen)))
			io_errors++;
		Ids later = c.drain_ids();
		if (!later.count(static_cast<uint64_t>(id))) {
			if (seen != tag)
				bad++;
			c.unreg(static_cast<uint64_t>(id));
		}
		pin.unpin();
		pause_req.store(false);
	}
	stop.store(true);
	pause_req.store(false);
	u.join();
	printf("protocol: %ld clean, %ld caught by the drain, %ld unmapped at pin, %ld stale pins "
	       "missed, %ld remaps\n",
	       clean, caught, unmapped, bad, remaps.load());
	EXPECT_EQ(0, io_errors);
	EXPECT_EQ(0, bad);
	EXPECT_GT(clean, 10);
}

// DRAIN says why: the core mm's reason for the change, and whether the
// mark was deferred beyond one callback's budget.
TEST_F(Unmap, DrainSaysWhy)
{
	const size_t ps = page_size();
	auto reason_of = [&](void (*change)(char *, size_t)) {
		Map m(2 * ps);
		m.touch();
		EXPECT_GT(c.reg(m.get(), ps), 0);
		change(m.get(), ps);
		auto e = c.drain();
		EXPECT_EQ(1u, e.size());
		if (e.size() != 1)
			return std::make_pair(~0u, ~0u);
		return std::make_pair(e[0].reason, e[0].flags);
	};
	using R = std::pair<uint32_t, uint32_t>;
	EXPECT_EQ(R(MRN_REASON_UNMAP, 0), reason_of([](char *p, size_t n) { munmap(p, n); }));
	EXPECT_EQ(R(MRN_REASON_CLEAR, 0),
		  reason_of([](char *p, size_t n) { madvise(p, n, MADV_DONTNEED); }));
	EXPECT_EQ(R(MRN_REASON_UNMAP, 0), reason_of([](char *p, size_t n) {
			  mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			       -1, 0);
		  }));

	// Beyond the budget: the first marks in the callback, the rest by DRAIN.
	Map m(ps);
	m.touch();
	const int n = 3 * static_cast<int>(mrn::kMarkBudget);
	for (int i = 0; i < n; i++)
		ASSERT_GT(c.reg(m.get(), ps, i), 0);
	ASSERT_EQ(0, madvise(m.get(), ps, MADV_DONTNEED));
	auto e = c.drain();
	ASSERT_EQ(static_cast<size_t>(n), e.size());
	long deferred = 0;
	for (const auto &d : e) {
		EXPECT_EQ(static_cast<uint32_t>(MRN_REASON_CLEAR), d.reason);
		deferred += (d.flags & MRN_ENTRY_DEFERRED) != 0;
	}
	EXPECT_EQ(n - mrn::kMarkBudget, deferred);
}

} // namespace

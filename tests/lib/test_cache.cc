// SPDX-License-Identifier: BSD-3-Clause
// The cache's rules, against a fake monitor that behaves like mrnotify.ko.
#include "cache_fixture.h"

#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mrn::test {
namespace {

TEST_F(CacheTest, MissThenHitRegistersOnce)
{
	make();
	Entry *a = get(1, 100);
	ASSERT_NE(nullptr, a);
	EXPECT_EQ(addr(1), a->start);
	EXPECT_EQ(addr(2), a->end);
	cache->put(a);
	Entry *b = get(1, 100);
	EXPECT_EQ(a, b);
	cache->put(b);
	EXPECT_EQ(1u, regs.registered);
	EXPECT_EQ(1u, stats().hits);
	EXPECT_EQ(1u, stats().misses);
}

TEST_F(CacheTest, SmallerRequestInsideIsAHit)
{
	make();
	Entry *big = get(10, 8 * page());
	cache->put(big);
	Entry *small = get(12, 100, 1, 17);
	EXPECT_EQ(big, small);
	cache->put(small);
	Entry *tail = get(17, page());
	EXPECT_EQ(big, tail);
	cache->put(tail);
	Entry *beyond = get(17, page() + 1); // one byte past the entry
	EXPECT_NE(big, beyond);
	cache->put(beyond);
	EXPECT_EQ(2u, regs.registered);
}

TEST_F(CacheTest, RequestStraddlingTwoEntriesMisses)
{
	make();
	Entry *a = get(0, page());
	Entry *b = get(1, page());
	Entry *c = get(0, 2 * page());
	EXPECT_NE(a, c);
	EXPECT_NE(b, c);
	EXPECT_TRUE(c->covers(addr(0), addr(2)));
	for (Entry *e : {a, b, c})
		cache->put(e);
}

TEST_F(CacheTest, AccessUpgradeReplacesWithUnion)
{
	make();
	Entry *ro = get(4, 2 * page(), 0x1);
	cache->put(ro);
	Entry *rw = get(5, 2 * page(), 0x2); // overlaps, more access
	EXPECT_NE(ro, rw);
	EXPECT_EQ(0x3u, rw->access);
	EXPECT_EQ(addr(4), rw->start); // union of both ranges
	EXPECT_EQ(addr(7), rw->end);
	// The old entry is gone: asking for the old access gets the new one.
	Entry *again = get(4, page(), 0x1);
	EXPECT_EQ(rw, again);
	cache->put(again);
	cache->put(rw);
	EXPECT_EQ(1u, stats().access_upgrades);
	EXPECT_EQ(1u, regs.live_count()); // the superseded one was deregistered
}

TEST_F(CacheTest, UpgradedEntryInUseStaysValidUntilPut)
{
	make();
	Entry *ro = get(4, page(), 0x1);
	const uint64_t serial = reg_of(ro).serial;
	Entry *rw = get(4, page(), 0x3);
	EXPECT_NE(ro, rw);
	EXPECT_EQ(2u, regs.live_count());
	EXPECT_EQ(serial, reg_of(ro).serial); // untouched while in use
	cache->put(ro);
	EXPECT_EQ(1u, regs.live_count());
	cache->put(rw);
}

TEST_F(CacheTest, UnmapInvalidatesIdleEntry)
{
	make();
	Entry *a = get(3, page());
	cache->put(a);
	mon->unmap(addr(3), addr(4));
	Entry *b = get(3, page());
	EXPECT_EQ(2u, regs.registered);
	EXPECT_EQ(1u, regs.deregistered);
	EXPECT_EQ(1u, stats().invalidations);
	cache->put(b);
}

TEST_F(CacheTest, UnmapElsewhereDoesNotInvalidate)
{
	make();
	Entry *a = get(3, page());
	cache->put(a);
	mon->unmap(addr(4), addr(5));
	Entry *b = get(3, page());
	EXPECT_EQ(a, b);
	cache->put(b);
	EXPECT_EQ(0u, stats().invalidations);
}

TEST_F(CacheTest, InvalidatedInUseEntryIsNotHandedOutAndDiesOnLastPut)
{
	make();
	Entry *a = get(3, page());
	Entry *a2 = get(3, page());
	EXPECT_EQ(a, a2);
	mon->unmap(addr(3), addr(4));
	Entry *b = get(3, page());
	EXPECT_NE(a, b);
	EXPECT_EQ(0u, regs.deregistered); // still in use
	EXPECT_EQ(1u, stats().in_use_detached);
	cache->put(a);
	EXPECT_EQ(0u, regs.deregistered);
	cache->put(a2);
	EXPECT_EQ(1u, regs.deregistered);
	cache->put(b);
}

// The race of the protocol: an unmap lands between watching and pinning.
TEST_F(CacheTest, UnmapDuringRegistrationIsCaughtAndRetried)
{
	make();
	int calls = 0;
	regs.on_register = [&](const FakeReg &r) {
		if (calls++ == 0)
			mon->unmap(r.addr, r.addr + r.len);
		return 0;
	};
	Entry *a = get(8, page());
	EXPECT_EQ(2, calls);
	EXPECT_EQ(1u, stats().retries);
	EXPECT_EQ(1u, regs.deregistered); // the stale first pin
	EXPECT_EQ(2u, reg_of(a).serial);
	cache->put(a);
	Entry *b = get(8, page());
	EXPECT_EQ(a, b);
	cache->put(b);
}

// Memory that changes under every try (on Linux also memory that does not:
// a mapping split or merged elsewhere in its 2 MiB block invalidates the
// whole block) is registered all the same, as without a cache: the caller
// gets the last registration, uncached, and it is deregistered at its put.
TEST_F(CacheTest, RegistrationThatAlwaysRacesIsHandedOutUncached)
{
	make();
	int calls = 0;
	regs.on_register = [&](const FakeReg &r) {
		calls++;
		mon->unmap(r.addr, r.addr + r.len);
		return 0;
	};
	Entry *e = nullptr;
	ASSERT_EQ(0, cache->get(at(8), page(), 1, &e));
	EXPECT_EQ(16, calls);
	EXPECT_EQ(1u, stats().uncached);
	EXPECT_EQ(0u, stats().entries);
	EXPECT_EQ(1u, regs.live_count()); // the 15 raced before it are gone
	cache->put(e);
	EXPECT_EQ(0u, regs.live_count());
	// Nothing of it was kept: the next get registers again.
	regs.on_register = nullptr;
	Entry *f = get(8, page());
	EXPECT_EQ(17u, regs.registered);
	cache->put(f);
}

TEST_F(CacheTest, LeavePinnedOffDeregistersOnLastPut)
{
	Options o;
	o.leave_pinned = false;
	make(o);
	Entry *a = get(2, page());
	Entry *b = get(2, page());
	EXPECT_EQ(a, b); // shared while in use
	cache->put(a);
	EXPECT_EQ(0u, regs.deregistered);
	cache->put(b);
	EXPECT_EQ(1u, regs.deregistered);
	Entry *c = get(2, page());
	cache->put(c);
	EXPECT_EQ(2u, regs.registered);
}

TEST_F(CacheTest, MonitorThatKeepsNothingIdleActsLikeLeavePinnedOff)
{
	Options o;
	o.keeps_idle = false;
	make(o);
	cache->put(get(2, page()));
	cache->put(get(2, page()));
	EXPECT_EQ(2u, regs.registered);
	EXPECT_EQ(2u, regs.deregistered);
}

TEST_F(CacheTest, EntryLimitEvictsLeastRecentlyUsed)
{
	Options o;
	o.max_entries = 3;
	make(o);
	Entry *a = get(0, page());
	Entry *b = get(2, page());
	Entry *c = get(4, page());
	cache->put(a);
	cache->put(b);
	cache->put(c);
	cache->put(get(0, page())); // a is now the most recent
	Entry *d = get(6, page());  // evicts b
	cache->put(d);
	EXPECT_EQ(1u, stats().evictions);
	const uint64_t before = regs.registered;
	cache->put(get(0, page()));
	cache->put(get(4, page()));
	EXPECT_EQ(before, regs.registered) << "a or c was evicted instead of b";
	cache->put(get(2, page()));
	EXPECT_EQ(before + 1, regs.registered);
}

TEST_F(CacheTest, EntriesInUseAreNeverEvicted)
{
	Options o;
	o.max_entries = 1;
	make(o);
	Entry *a = get(0, page());
	Entry *b = get(2, page()); // over the limit, but a is in use
	EXPECT_EQ(0u, regs.deregistered);
	cache->put(a);
	cache->put(b);
	Entry *c = get(4, page());
	cache->put(c);
	EXPECT_GE(regs.deregistered, 1u);
	EXPECT_LE(stats().entries, 1u);
}

// Eviction looks at a bounded stretch of the index from a clock hand; in a
// table that grew for many entries and then lost most of them, that
// stretch may hold no entry at all. Every idle entry left must still be
// found.
TEST_F(CacheTest, EvictionFindsTheFewEntriesOfASparseTable)
{
	make();
	constexpr size_t kMany = 4000, kLeft = 10;
	for (size_t i = 0; i < kMany; i++)
		cache->put(get(2 * i, page()));
	// All but kLeft invalidated: the table keeps its size.
	mon->unmap(addr(0), addr(2 * (kMany - kLeft)));
	Entry *x = get(2 * kMany, page()); // a miss drains the invalidations
	cache->put(x);
	ASSERT_EQ(kLeft + 1, stats().entries);
	for (size_t i = 0; i <= kLeft; i++)
		EXPECT_TRUE(cache->evict_one()) << "eviction " << i << " found nothing";
	EXPECT_FALSE(cache->evict_one());
	EXPECT_EQ(0u, stats().entries);
}

TEST_F(CacheTest, PinnedBytesLimit)
{
	Options o;
	o.max_pinned = 4 * page();
	make(o);
	cache->put(get(0, 2 * page()));
	cache->put(get(4, 2 * page()));
	EXPECT_EQ(4 * page(), stats().pinned_bytes);
	cache->put(get(8, 2 * page()));
	EXPECT_LE(stats().pinned_bytes, 4 * page());
	EXPECT_EQ(1u, stats().evictions);
}

TEST_F(CacheTest, OutOfResourcesEvictsAndRetries)
{
	make();
	cache->put(get(0, page()));
	cache->put(get(2, page()));
	// The "NIC" now holds at most two registrations.
	regs.on_register = [&](const FakeReg &) {
		std::lock_guard<std::mutex> g(regs.m);
		return regs.live.size() >= 2 ? -ENOMEM : 0;
	};
	Entry *c = get(4, page());
	ASSERT_NE(nullptr, c);
	EXPECT_GE(stats().retries, 1u);
	EXPECT_EQ(1u, stats().evictions);
	// Nothing idle left to evict: the failure reaches the caller.
	Entry *d = get(6, page());
	Entry *e = nullptr;
	EXPECT_EQ(-ENOMEM, cache->get(at(8), page(), 1, &e));
	cache->put(c);
	cache->put(d);
}

TEST_F(CacheTest, RegisterFailureLeavesNothingBehind)
{
	make();
	regs.on_register = [](const FakeReg &) { return -EFAULT; };
	Entry *e = nullptr;
	EXPECT_EQ(-EFAULT, cache->get(at(1), page(), 1, &e));
	EXPECT_EQ(0u, mon->watched());
	EXPECT_EQ(1u, stats().register_failures);
	EXPECT_EQ(0u, stats().entries);
}

TEST_F(CacheTest, BadRangesAreRejected)
{
	make();
	Entry *e = nullptr;
	EXPECT_EQ(-EINVAL, cache->get(at(1), 0, 1, &e));
	EXPECT_EQ(-EINVAL, cache->get(reinterpret_cast<void *>(UINTPTR_MAX - 10), 100, 1, &e));
	EXPECT_EQ(-EINVAL, cache->get(reinterpret_cast<void *>(UINTPTR_MAX - 10), 5, 1, &e));
	EXPECT_EQ(0u, regs.registered);
}

TEST_F(CacheTest, RangeMonitorInvalidatesOverlaps)
{
	Options o;
	o.range_mode = true;
	make(o);
	cache->put(get(0, 4 * page()));
	cache->put(get(8, page()));
	mon->unmap(addr(3), addr(3) + 1); // the last page of the first entry
	cache->put(get(8, page()));
	EXPECT_EQ(1u, stats().invalidations);
	cache->put(get(0, page()));
	EXPECT_EQ(3u, regs.registered);
}

// After a drain the inline lookup gives way to the writer's, which must
// still find the entry a hit needs (in the same search that plans a miss),
// not register the range again.
TEST_F(CacheTest, HitAfterADrainRegistersNothing)
{
	Options o;
	o.range_mode = true;
	make(o);
	Entry *a = get(0, 4 * page());
	cache->put(a);
	const uint64_t hits = stats().hits;
	mon->unmap(addr(9), addr(10)); // elsewhere: the counter moves, no entry dies
	Entry *b = get(1, page());
	EXPECT_EQ(a, b);
	EXPECT_EQ(1u, regs.registered);
	EXPECT_EQ(hits + 1, stats().hits);
	EXPECT_EQ(0u, stats().invalidations);
	cache->put(b);
}

TEST_F(CacheTest, CallerInvalidation)
{
	make();
	cache->put(get(0, page()));
	cache->put(get(4, page()));
	EXPECT_EQ(1, cache->invalidate(at(0), 10));
	EXPECT_EQ(1u, regs.deregistered);
	EXPECT_EQ(-EINVAL, cache->invalidate(at(0), 0));
}

TEST_F(CacheTest, FlushAndEvictOne)
{
	make();
	cache->put(get(0, page()));
	cache->put(get(2, page()));
	Entry *busy = get(4, page());
	EXPECT_TRUE(cache->evict_one());
	EXPECT_EQ(1, cache->flush());
	EXPECT_FALSE(cache->evict_one());
	EXPECT_EQ(2u, regs.deregistered);
	cache->put(busy);
}

TEST_F(CacheTest, FindDoesNotRegister)
{
	make();
	Entry *e = nullptr;
	EXPECT_EQ(-ENOENT, cache->find(at(0), 10, &e));
	cache->put(get(0, page()));
	ASSERT_EQ(0, cache->find(at(0), 10, &e));
	cache->put(e);
	EXPECT_EQ(1u, regs.registered);
}

TEST_F(CacheTest, ManyEntriesAndGrowth)
{
	make();
	for (size_t i = 0; i < 5000; i += 2)
		cache->put(get(i, page()));
	for (size_t i = 0; i < 5000; i += 2) {
		Entry *e = get(i, 1);
		ASSERT_EQ(addr(i), e->start);
		cache->put(e);
	}
	EXPECT_EQ(2500u, regs.registered);
	EXPECT_EQ(2500u, stats().hits);
}

// --- fork ------------------------------------------------------------------------

// True when the page at p is in a VMA with the "dc" (do not copy on fork) flag.
bool dontfork(const void *p)
{
	std::ifstream smaps("/proc/self/smaps");
	std::string line;
	const uintptr_t a = reinterpret_cast<uintptr_t>(p);
	bool inside = false;
	while (std::getline(smaps, line)) {
		uintptr_t lo, hi;
		char dash;
		std::istringstream ls(line);
		if (line.find('-') != std::string::npos && (ls >> std::hex >> lo >> dash >> hi) &&
		    dash == '-') {
			inside = lo <= a && a < hi;
			continue;
		}
		if (inside && line.rfind("VmFlags:", 0) == 0)
			return line.find(" dc") != std::string::npos;
	}
	return false;
}

TEST_F(CacheTest, DontforkIsCountedPerPage)
{
	make();
	Entry *a = get(0, 4 * page()); // pages 0-3, held
	Entry *b = get(2, 4 * page()); // merges: pages 0-5; a is detached, in use
	EXPECT_EQ(addr(0), b->start);
	EXPECT_TRUE(dontfork(at(0)));
	EXPECT_TRUE(dontfork(at(5)));
	cache->put(a); // a dies: b still covers its pages
	EXPECT_TRUE(dontfork(at(0))) << "dropping a undid b's advice";
	EXPECT_TRUE(dontfork(at(3)));
	cache->put(b);
	Entry *c = get(8, 2 * page()); // held across the flush
	cache->flush();
	EXPECT_FALSE(dontfork(at(0)));
	EXPECT_FALSE(dontfork(at(5)));
	EXPECT_TRUE(dontfork(at(8)));
	cache->put(c);
}

TEST_F(CacheTest, FailedRegistrationUndoesItsForkAdvice)
{
	make();
	bool advised_while_registering = false;
	regs.on_register = [&](const FakeReg &r) {
		advised_while_registering = dontfork(reinterpret_cast<void *>(r.addr));
		return -EFAULT;
	};
	Entry *e = nullptr;
	EXPECT_EQ(-EFAULT, cache->get(at(30), page(), 1, &e));
	EXPECT_TRUE(advised_while_registering) << "advice must come before the pin";
	EXPECT_FALSE(dontfork(at(30)));
}

// Merging (#10): a window slid page by page over a buffer used to leave one
// entry per position, pinning each page up to 16 times, and a hit on the
// newest window walked every older overlapping entry. Now each miss merges
// what it overlaps.
TEST_F(CacheTest, SlidingWindowMergesIntoOneEntry)
{
	make();
	const size_t kWindow = 16, kSteps = 64;
	for (size_t i = 0; i < kSteps; i++)
		cache->put(get(i, kWindow * page()));
	const mrn_stats s = stats();
	const size_t touched = (kSteps - 1 + kWindow) * page();
	EXPECT_LE(s.pinned_bytes, 2 * touched) << "pinned " << s.pinned_bytes / page() << " pages";
	EXPECT_EQ(1u, s.entries);
	EXPECT_EQ(kSteps - 1, s.merges);
	// Every position is now a hit.
	const uint64_t misses = s.misses;
	for (size_t i = 0; i < kSteps; i++)
		cache->put(get(i, kWindow * page()));
	EXPECT_EQ(misses, stats().misses);
}

// A miss searches the index for entries its range overlaps once, before
// registering, and skips the search for entries its new one supersedes when
// nothing was inserted meanwhile. Here something is: an entry inside the
// range, registered by a call made from the register function.
TEST_F(CacheTest, EntryInsertedDuringTheRegistrationOfOneCoveringItIsSuperseded)
{
	make();
	Entry *inner = nullptr;
	regs.on_register = [&](const FakeReg &r) {
		if (r.len == 4 * page() && !inner)
			inner = get(21, page()); // while pages 20-23 register
		return 0;
	};
	Entry *outer = get(20, 4 * page());
	regs.on_register = nullptr;
	ASSERT_NE(nullptr, inner);
	ASSERT_NE(inner, outer);
	EXPECT_EQ(1u, stats().entries) << "the inner entry was left in the index";
	EXPECT_EQ(1u, stats().in_use_detached);
	Entry *again = get(21, page());
	EXPECT_EQ(outer, again);
	cache->put(inner); // out of the index: its last put deregisters it
	EXPECT_EQ(1u, regs.deregistered);
	cache->put(again);
	cache->put(outer);
}

TEST_F(CacheTest, FailedUnionRetriesTheRequestAlone)
{
	make();
	cache->put(get(0, 4 * page(), 0x1)); // pages 0-3, read only
	// The union (pages 0-5) cannot be registered, the request (2-5) can.
	regs.on_register = [&](const FakeReg &r) { return r.len > 4 * page() ? -EFAULT : 0; };
	Entry *e = get(2, 4 * page(), 0x2);
	ASSERT_NE(nullptr, e);
	EXPECT_EQ(addr(2), e->start);
	EXPECT_EQ(addr(6), e->end);
	EXPECT_EQ(1u, stats().register_failures);
	cache->put(e);
}

// A drain that fails must not lose an invalidation, also of an entry that is
// being registered at that moment (#10).
TEST_F(CacheTest, FailedDrainInvalidatesTheEntryBeingRegistered)
{
	make();
	bool once = true;
	regs.on_register = [&](const FakeReg &r) {
		if (once) {
			// The pages change while they are being pinned, and the
			// next drain fails.
			once = false;
			mon->unmap(r.addr, r.addr + r.len);
			mon->fail_drain = -EIO;
		}
		return 0;
	};
	Entry *e = get(3, page());
	ASSERT_NE(nullptr, e);
	EXPECT_EQ(2u, regs.registered) << "the registration that raced the unmap was kept";
	EXPECT_EQ(2u, reg_of(e).serial);
	EXPECT_EQ(1u, stats().drain_failures);
	mon->fail_drain = 0;
	cache->put(e);
}

// Bounded misses (#10): at the entry limit with every entry in use, a miss
// registers uncached instead of scanning the cache or growing past it.
TEST_F(CacheTest, AtTheLimitWithEverythingInUseMissesAreUncached)
{
	Options o;
	o.max_entries = 100;
	make(o);
	std::vector<Entry *> held;
	for (size_t i = 0; i < 100; i++)
		held.push_back(get(2 * i, page()));
	Entry *extra = get(300, page());
	ASSERT_NE(nullptr, extra);
	EXPECT_EQ(100u, stats().entries);
	EXPECT_EQ(1u, stats().uncached);
	const uint64_t before = regs.deregistered;
	cache->put(extra); // not kept
	EXPECT_EQ(before + 1, regs.deregistered);
	for (Entry *x : held)
		cache->put(x);
	// Now there is room to take back: the next miss evicts one.
	cache->put(get(302, page()));
	EXPECT_EQ(1u, stats().evictions);
	EXPECT_EQ(1u, stats().uncached);
}

// The kernel's cap on registrations (ENOSPC from REGISTER) leads to
// evicting and retrying, then to an uncached registration (#10).
TEST_F(CacheTest, KernelOutOfRoomEvictsThenRegistersUncached)
{
	make();
	mon->max_tracked = 2;
	cache->put(get(0, page()));
	cache->put(get(2, page()));
	Entry *c = get(4, page()); // evicts an idle entry to make room
	ASSERT_NE(nullptr, c);
	EXPECT_EQ(1u, stats().evictions);
	EXPECT_EQ(0u, stats().uncached);
	Entry *d = get(6, page()); // evicts the other one
	Entry *e = get(8, page()); // nothing idle: uncached
	ASSERT_NE(nullptr, e);
	EXPECT_EQ(1u, stats().uncached);
	for (Entry *x : {c, d, e})
		cache->put(x);
}

TEST_F(CacheTest, ForkPolicyNoneLeavesPagesForkable)
{
	Options o;
	o.fork = MRN_FORK_NONE;
	make(o);
	Entry *a = get(0, page());
	EXPECT_FALSE(dontfork(at(0)));
	cache->put(a);
}

TEST_F(CacheTest, ForkedChildStartsEmptyAndNeverDeregistersParentEntries)
{
	make();
	// Memory outside the arena's DONTFORK pages, for the child's own use.
	cache->put(get(0, page()));
	Entry *held = get(2, page());
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		const uint64_t dereg_before = regs.deregistered;
		const uint64_t reg_before = regs.registered;
		int bad = 0;
		cache->put(held); // the parent's: must not be deregistered here
		bad |= regs.deregistered != dereg_before;
		mrn_stats s{};
		cache->stats(&s);
		bad |= (s.entries != 0) << 1;
		Entry *e = nullptr;
		// Page 40 is not DONTFORK: it exists in the child.
		bad |= (cache->get(at(40), page(), 1, &e) != 0) << 2;
		bad |= (regs.registered != reg_before + 1) << 3;
		bad |= (opened != 2) << 4; // the monitor was reopened
		cache->put(e);
		cache->flush();
		bad |= (regs.deregistered != dereg_before + 1) << 5;
		_exit(bad);
	}
	int status = 0;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status)) << "child check bits failed";
	// The parent is undisturbed.
	Entry *again = get(0, page());
	EXPECT_EQ(1u, stats().hits);
	cache->put(again);
	cache->put(held);
}

// An entry's states move one way: Pending -> Indexed -> Detached, or
// Pending -> Detached (Entry::move_to asserts it in --enable-debug builds,
// as the sanitizer lanes build).
TEST(EntryState, MovesOneWayOnly)
{
	EXPECT_TRUE(Entry::can_move(Entry::kPending, Entry::kIndexed));
	EXPECT_TRUE(Entry::can_move(Entry::kPending, Entry::kDetached));
	EXPECT_TRUE(Entry::can_move(Entry::kIndexed, Entry::kDetached));
	EXPECT_FALSE(Entry::can_move(Entry::kDetached, Entry::kIndexed)) << "a freed entry is never found again";
	EXPECT_FALSE(Entry::can_move(Entry::kIndexed, Entry::kPending));
	EXPECT_FALSE(Entry::can_move(Entry::kDetached, Entry::kDetached)) << "detached twice: two frees";
	EXPECT_FALSE(Entry::can_move(Entry::kIndexed, Entry::kIndexed)) << "indexed twice";
#ifdef MRN_DEBUG
	Entry e{};
	e.state.store(Entry::kDetached);
	EXPECT_DEATH(e.move_to(Entry::kIndexed), "assertion failed");
#endif
}

} // namespace
} // namespace mrn::test

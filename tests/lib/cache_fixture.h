// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_TESTS_CACHE_FIXTURE_H
#define MRN_TESTS_CACHE_FIXTURE_H

#include "fake_monitor.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>

namespace mrn::test {

inline size_t page()
{
	return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

class CacheTest : public ::testing::Test {
protected:
	static constexpr size_t kArena = 64 << 20;

	void SetUp() override
	{
		void *p = mmap(nullptr, kArena, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		ASSERT_NE(MAP_FAILED, p);
		arena = static_cast<char *>(p);
	}
	void TearDown() override
	{
		cache.reset();
		EXPECT_TRUE(regs.dereg_errors.empty()) << "a registration was deregistered twice";
		EXPECT_EQ(0u, regs.live_count()) << "the cache leaked registrations";
		munmap(arena, kArena);
	}

	struct Options {
		bool leave_pinned = true;
		uint64_t max_entries = 0;
		uint64_t max_pinned = 0;
		bool range_mode = false;
		bool keeps_idle = true;
		mrn_fork_policy_t fork = MRN_FORK_DONTFORK;
	};

	void make(Options o)
	{
		mrn_config c{};
		c.size = sizeof(c);
		c.name = "test";
		c.reg = &FakeRegistrar::reg;
		c.dereg = &FakeRegistrar::dereg;
		c.context = &regs;
		c.payload_size = sizeof(FakeReg);
		c.leave_pinned = o.leave_pinned;
		c.max_entries = o.max_entries;
		c.max_pinned_bytes = o.max_pinned;
		c.fork_policy = o.fork;
		opened = 0;
		ASSERT_EQ(0, Cache::create(
				     c,
				     [this, o](std::unique_ptr<Monitor> *m, std::string *why) {
					     auto f = std::make_unique<FakeMonitor>(o.range_mode,
										    o.keeps_idle);
					     mon = f.get();
					     *m = std::move(f);
					     *why = "fake";
					     opened++;
					     return 0;
				     },
				     &cache));
	}
	void make() { make(Options{}); }

	void *at(size_t page_index, size_t offset = 0)
	{
		return arena + page_index * page() + offset;
	}
	uintptr_t addr(size_t page_index) { return reinterpret_cast<uintptr_t>(at(page_index)); }

	Entry *get(size_t pg, size_t len, uint32_t access = 1, size_t off = 0)
	{
		Entry *e = nullptr;
		EXPECT_EQ(0, cache->get(at(pg, off), len, access, &e));
		return e;
	}
	static const FakeReg &reg_of(Entry *e) { return *static_cast<FakeReg *>(e->payload()); }
	mrn_stats stats()
	{
		mrn_stats s{};
		cache->stats(&s);
		return s;
	}

	FakeRegistrar regs;
	FakeMonitor *mon = nullptr;
	int opened = 0;
	std::unique_ptr<Cache> cache;
	char *arena = nullptr;
};

} // namespace mrn::test

#endif

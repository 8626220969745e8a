// SPDX-License-Identifier: BSD-3-Clause
//
// Fork policies (#10): registrations are never inherited, without breaking
// the application. `auto` leaves pages inheritable where the kernel keeps
// pinned pages with the parent; `dontfork` is bounded by vm.max_map_count.
#include "cache_fixture.h"
#include "mappings_left.h"

#include <sys/wait.h>

#include <csignal>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace mrn::test {
namespace {

constexpr int kChildFaulted = 99;

void exit_on_fault(int)
{
	_exit(kChildFaulted);
}

// How a forked child fares reading memory that shares a page with a
// registered buffer: 0 when it reads it, kChildFaulted when the read faults
// (a handler of our own, so that sanitizers' handlers do not change it).
int child_reads(const volatile char *p)
{
	const pid_t pid = fork();
	if (pid == 0) {
		struct sigaction sa = {};
		sa.sa_handler = exit_on_fault;
		sigaction(SIGSEGV, &sa, nullptr);
		_exit(*p == 42 ? 0 : 1);
	}
	int status = 0;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

class ForkPolicyTest : public CacheTest {};

TEST_F(ForkPolicyTest, AutoLeavesNeighboursReadableInTheChild)
{
	if (resolve_fork_policy(MRN_FORK_AUTO) != MRN_FORK_NONE)
		GTEST_SKIP() << "this kernel predates 5.13: auto means dontfork here";
	Options o;
	o.fork = MRN_FORK_AUTO;
	make(o);
	char *buf = static_cast<char *>(at(10));
	buf[1024] = 42; // an unrelated object on the buffer's page
	Entry *e = get(10, 64);
	EXPECT_EQ(0, child_reads(buf + 1024));
	cache->put(e);
}

// The negative control: what `dontfork` (the old default) does to the same
// child. Documented behaviour of MADV_DONTFORK, as with ibv_fork_init().
TEST_F(ForkPolicyTest, DontforkHidesTheWholePageFromTheChild)
{
	Options o;
	o.fork = MRN_FORK_DONTFORK;
	make(o);
	char *buf = static_cast<char *>(at(10));
	buf[1024] = 42;
	Entry *e = get(10, 64);
	EXPECT_EQ(kChildFaulted, child_reads(buf + 1024));
	cache->put(e);
}

// 40,000 one-page registrations, each advised DONTFORK, used to split the
// process into about 65,000 mappings: then mmap and malloc failed, and
// destroying the cache called std::terminate.
TEST_F(ForkPolicyTest, DontforkLeavesMappingsForTheApplication)
{
	Options o;
	o.fork = MRN_FORK_DONTFORK;
	make(o);
	const size_t kRegs = 40000;
	const size_t len = 2 * kRegs * page();
	char *mem = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
	ASSERT_NE(MAP_FAILED, mem);
	for (size_t i = 0; i < kRegs; i++) {
		Entry *e = nullptr;
		ASSERT_EQ(0, cache->get(mem + 2 * i * page(), page(), 1, &e)) << i;
		cache->put(e);
	}
	const size_t maps = mapping_count();
	RecordProperty("mappings", std::to_string(maps));
	const mrn_stats s = stats();
	EXPECT_GT(s.uncached, 0u) << "every registration was advised";
	EXPECT_GT(s.fork_advice_failures, 0u);
	std::vector<void *> got;
	size_t failed = 0;
	for (int i = 0; i < 200; i++) {
		// Alternate protections: neighbours that differ cannot merge,
		// so each mmap needs a mapping of its own.
		void *p = mmap(nullptr, 1 << 20, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			failed++;
		else
			got.push_back(p);
	}
	EXPECT_EQ(0u, failed) << "of 200 mmaps, with " << maps << " mappings";
	void *m = malloc(64 << 20);
	EXPECT_NE(nullptr, m);
	free(m);
	for (void *p : got)
		munmap(p, 1 << 20);
	cache.reset(); // must not terminate
	EXPECT_LT(mapping_count(), maps);
	munmap(mem, len);
}

} // namespace
} // namespace mrn::test

// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko in a memory cgroup at its limit: a registration's kernel memory
// is charged to the caller's cgroup, REGISTER fails with ENOMEM (not the OOM
// killer), and nothing registered before is lost. A process with a
// context's cap of registrations over one page that the OOM killer ends
// holds no lock long: every callback marks within its budget. Run as root.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "mrn_test_util.h"

using mrn::Ctx;
using mrn::Map;
using mrn::page_size;

namespace {

bool write_file(const std::string &path, const std::string &value)
{
	std::ofstream out(path);
	out << value;
	return static_cast<bool>(out.flush());
}

// A child cgroup with the memory controller: on the mounted cgroup2
// hierarchy, or on one mounted here for the test (the guest has none).
class MemCgroup {
public:
	MemCgroup()
	{
		std::string root = mounted_root();
		if (root.empty()) {
			char tmpl[] = "/tmp/mrn-cgroup.XXXXXX";
			if (!mkdtemp(tmpl)) {
				why_ = "mkdtemp: " + std::string(strerror(errno));
				return;
			}
			mnt_ = tmpl;
			if (mount("cgroup2", tmpl, "cgroup2", 0, nullptr) != 0) {
				why_ = "mount cgroup2: " + std::string(strerror(errno));
				rmdir(tmpl);
				mnt_.clear();
				return;
			}
			root = mnt_;
		}
		if (!write_file(root + "/cgroup.subtree_control", "+memory")) {
			why_ = "no memory controller in " + root;
			return;
		}
		dir_ = root + "/mrn-memcg-test." + std::to_string(getpid());
		if (mkdir(dir_.c_str(), 0755) != 0) {
			why_ = "mkdir " + dir_ + ": " + strerror(errno);
			dir_.clear();
		}
	}
	~MemCgroup()
	{
		if (!dir_.empty())
			rmdir(dir_.c_str());
		if (!mnt_.empty()) {
			umount2(mnt_.c_str(), MNT_DETACH);
			rmdir(mnt_.c_str());
		}
	}
	MemCgroup(const MemCgroup &) = delete;
	MemCgroup &operator=(const MemCgroup &) = delete;

	bool ok() const { return !dir_.empty(); }
	const std::string &why() const { return why_; }
	bool set(const std::string &file, const std::string &value) const
	{
		return write_file(dir_ + "/" + file, value);
	}
	bool enter() const { return set("cgroup.procs", "0"); }

private:
	static std::string mounted_root()
	{
		std::ifstream mounts("/proc/self/mounts");
		std::string dev, dir, type, rest;
		while (mounts >> dev >> dir >> type && std::getline(mounts, rest))
			if (type == "cgroup2")
				return dir;
		return {};
	}
	std::string mnt_, dir_, why_;
};

struct Outcome {
	long registered = 0; // before the first failure
	int error = 0;       // errno of the first failure
	long drained = 0;    // after the one page was unmapped
	uint64_t generation = 0;
	int step = 0; // 0: done; otherwise the step that failed
};

// Locks the process's code (every executable file mapping) in memory,
// charged where it is now. In a cgroup at its limit, REGISTER's allocation
// reclaims the cgroup's clean file pages first: the test's own code, which
// the next instruction then faults in again, and a fault cannot fail with
// ENOMEM: the OOM killer ends the process (seen once in the Debian 13
// guest: killed right after a REGISTER returned, at 165,093).
void lock_code()
{
	std::ifstream maps("/proc/self/maps");
	std::string line;
	while (std::getline(maps, line)) {
		unsigned long start, end;
		char perms[5] = {};
		if (sscanf(line.c_str(), "%lx-%lx %4s", &start, &end, perms) == 3 &&
		    perms[2] == 'x' && line.find('/') != std::string::npos)
			mlock(reinterpret_cast<void *>(start), end - start);
	}
}

// In the cgroup: register one page until REGISTER fails, then unmap it; every
// registration must come out of DRAIN. Returns 0, or the step that failed.
int fill_and_drain(const MemCgroup &cg, Outcome *o)
{
	lock_code();
	if (!cg.enter())
		return 1;
	Ctx c;
	Map m(page_size());
	if (!c.ok() || !m.get())
		return 2;
	m.touch();
	// What the drain below needs from user memory is written now, before
	// the cgroup is full: at the limit a page fault for a new page (a heap
	// page, or one still shared copy-on-write with the parent) cannot fail
	// with ENOMEM and wakes the OOM killer instead (the likely cause of one
	// run whose child was killed). The batch is written whole, and one
	// empty drain writes drain_once's own buffer, which later drains get
	// back from malloc.
	std::vector<mrn_dirty_entry> batch(256);
	batch.clear();
	bool more = true;
	if (c.drain_once(&batch, 256, &more) != 0)
		return 3;
	batch.clear();
	for (long i = 0; i < (4L << 20); i++) {
		int64_t id = c.reg(m.get(), m.size(), static_cast<uint64_t>(i));
		if (id < 0) {
			o->error = static_cast<int>(-id);
			break;
		}
		o->registered++;
	}
	if (madvise(m.get(), m.size(), MADV_DONTNEED) != 0)
		return 4;
	o->generation = c.gen();
	// Small batches, each freed before the next: a cgroup at its limit must
	// still be able to drain.
	more = true;
	while (more) {
		batch.clear();
		if (c.drain_once(&batch, 256, &more) != 0)
			return 5;
		o->drained += static_cast<long>(batch.size());
	}
	return 0;
}

TEST(Memcg, RegisterAtTheLimitIsENOMEMAndLosesNothing)
{
	MemCgroup cg;
	if (!cg.ok())
		GTEST_SKIP() << cg.why();
	ASSERT_TRUE(cg.set("memory.max", std::to_string(16 << 20)));
	// The cgroup's limit must come first: the per-user cap's default, 1%
	// of RAM, is about as much in the 2 GiB guest.
	mrn::ScopedParam user_cap("max_user_registrations", "4194304");
	ASSERT_TRUE(user_cap.ok());
	int sv[2];
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		Outcome o;
		o.step = fill_and_drain(cg, &o);
		_exit(write(sv[1], &o, sizeof(o)) == sizeof(o) ? 0 : 3);
	}
	close(sv[1]);
	Outcome o;
	ssize_t got = read(sv[0], &o, sizeof(o));
	close(sv[0]);
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_FALSE(WIFSIGNALED(st)) << "the child was killed by signal " << WTERMSIG(st)
				      << " (the OOM killer, instead of ENOMEM?)";
	ASSERT_EQ(static_cast<ssize_t>(sizeof(o)), got);
	ASSERT_EQ(0, o.step) << "the child failed at step " << o.step;
	EXPECT_EQ(ENOMEM, o.error) << "REGISTER at the cgroup's limit: " << strerror(o.error);
	EXPECT_GT(o.registered, 1000);
	EXPECT_EQ(o.registered, o.drained) << "registrations lost at the limit";
	EXPECT_GE(o.generation, 1u);
	printf("memory cgroup of 16 MiB: %ld registrations, then %s; %ld drained after the unmap\n",
	       o.registered, strerror(o.error), o.drained);
}

// The OOM killer ends a process that holds a context's cap (2^20) of
// registrations over one private page: the notifier callbacks of its end
// (the exit's release; the OOM reaper's non-blocking unmap, when it gets
// there first) mark within their budget and give the lock up between
// batches. Before #47 one callback marked all 2^20 with the lock held,
// without rescheduling in the reaper: an estimated 6-20 s on a big node,
// and in the debug-kernel guest (soft-lockup and RCU-stall detectors on,
// panicking) a reported stall would end the run.
TEST(Memcg, OomKillOfACapOfRegistrationsHoldsTheLockBriefly)
{
	MemCgroup cg;
	if (!cg.ok())
		GTEST_SKIP() << cg.why();
	ASSERT_TRUE(cg.set("memory.max", std::to_string(256 << 20)));
	cg.set("memory.swap.max", "0"); // absent without swap accounting
	mrn::ScopedParam user_cap("max_user_registrations", "4194304");
	ASSERT_TRUE(user_cap.ok());
	ASSERT_TRUE(mrn::reset_callback_maxima()) << "no max_callback_* files in debugfs";
	const long k = (1L << 20) - 1;
	mrn::Child victim([&](int up, int down) {
		if (!cg.enter())
			return 10;
		Ctx c;
		Map m(page_size());
		if (!c.ok() || !m.get())
			return 11;
		m.touch();
		for (long i = 0; i < k; i++)
			if (c.reg(m.get(), m.size(), static_cast<uint64_t>(i)) <= 0)
				return 12;
		char b = 1;
		if (write(up, &b, 1) != 1 || read(down, &b, 1) != 1)
			return 13;
		// Grow until the cgroup's OOM killer ends this process.
		for (;;) {
			void *p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				return 14;
			memset(p, 1, 1 << 20);
		}
	});
	char b = 1;
	ASSERT_TRUE(victim.get(&b, 1)) << "the victim could not register " << k << " ranges";
	auto s0 = mrn::global_stats();
	ASSERT_TRUE(victim.put(&b, 1));
	const int st = victim.wait();
	ASSERT_NE(-1, st);
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		<< "the victim was not killed by the OOM killer (status " << st << ")";
	auto s1 = mrn::global_stats();
	EXPECT_EQ(k, s1["invalidated"] - s0["invalidated"]) << "every registration marked once";
	EXPECT_LE(s1["max_callback_marks"], mrn::kMarkBudget);
	printf("OOM kill of a process with %ld registrations over one page: at most %lld marks "
	       "at once, the longest hold of the lock %lld ns\n",
	       k, s1["max_callback_marks"], s1["max_callback_hold_ns"]);
}

} // namespace

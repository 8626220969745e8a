// SPDX-License-Identifier: BSD-3-Clause
// mrn_watch_*: the kernel monitor without a cache, as the UCX glue uses it.
// Runs in the guest with mrnotify.ko loaded.
#include "mrnotify.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

struct Reported {
	uint64_t cookie;
	void *addr;
	size_t len;
};

void collect(void *arg, uint64_t cookie, void *addr, size_t len)
{
	static_cast<std::vector<Reported> *>(arg)->push_back({cookie, addr, len});
}

// The process's descriptors open on the device.
int device_fds()
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (const dirent *e = readdir(d)) {
		char target[PATH_MAX];
		const ssize_t len = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
		if (len > 0 && std::strncmp(target, "/dev/mrnotify", size_t(len)) == 0)
			n++;
	}
	closedir(d);
	return n;
}

char *map_page()
{
	void *p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

class Watch : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_EQ(0, mrn_watch_open(MRN_MONITOR_KERNEL, &w)); }
	void TearDown() override { mrn_watch_close(w); }
	uint64_t gen() const { return __atomic_load_n(mrn_watch_generation(w), __ATOMIC_ACQUIRE); }
	mrn_watch_t *w = nullptr;
};

TEST_F(Watch, UnmapIsReportedOnceWithItsCookieAndRange)
{
	char *p = static_cast<char *>(mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(MAP_FAILED, p);
	uint64_t a = 0, b = 0, seen = gen();
	ASSERT_EQ(0, mrn_watch_add(w, p + 10, kPage, 111, &a));
	ASSERT_EQ(0, mrn_watch_add(w, p + 3 * kPage, kPage, 222, &b));
	ASSERT_EQ(0, munmap(p, 2 * kPage));
	EXPECT_NE(seen, gen()) << "the generation did not move before munmap returned";
	std::vector<Reported> r;
	EXPECT_EQ(1, mrn_watch_drain(w, collect, &r, &seen));
	ASSERT_EQ(1u, r.size());
	EXPECT_EQ(111u, r[0].cookie);
	EXPECT_EQ(p + 10, r[0].addr);
	EXPECT_EQ(kPage, r[0].len);
	EXPECT_EQ(seen, gen());
	r.clear();
	EXPECT_EQ(0, mrn_watch_drain(w, collect, &r, &seen));
	EXPECT_TRUE(r.empty());
	EXPECT_EQ(-ENOENT, mrn_watch_remove(w, a)) << "a drained watch is gone";
	EXPECT_EQ(0, mrn_watch_remove(w, b));
	munmap(p + 2 * kPage, 2 * kPage);
}

TEST_F(Watch, RemoveOfAnInvalidatedWatchSaysSo)
{
	char *p = static_cast<char *>(
		mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	uint64_t id = 0;
	ASSERT_EQ(0, mrn_watch_add(w, p, kPage, 7, &id));
	ASSERT_EQ(0, madvise(p, kPage, MADV_DONTNEED));
	EXPECT_EQ(1, mrn_watch_remove(w, id));
	std::vector<Reported> r;
	uint64_t g = 0;
	EXPECT_EQ(0, mrn_watch_drain(w, collect, &r, &g));
	munmap(p, kPage);
}

TEST_F(Watch, BadArguments)
{
	uint64_t id;
	EXPECT_EQ(-EINVAL, mrn_watch_add(w, nullptr, 0, 1, &id));
	EXPECT_EQ(-EINVAL, mrn_watch_add(w, reinterpret_cast<void *>(UINTPTR_MAX - 5), 10, 1, &id));
	mrn_watch_t *other = nullptr;
	EXPECT_EQ(-EINVAL, mrn_watch_open(MRN_MONITOR_UFFD, &other));
}

// The UCX plugin's fork story: the child lets go of the parent's watch
// (closing its copy of the descriptor, not leaking it), opens its own, and
// the parent's watches are untouched.
TEST_F(Watch, AForkedChildAbandonsTheParentsWatch)
{
	char *parents = map_page();
	ASSERT_NE(nullptr, parents);
	uint64_t id = 0, seen = gen();
	ASSERT_EQ(0, mrn_watch_add(w, parents, kPage, 5, &id));
	const int before = device_fds();
	ASSERT_GE(before, 1);
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		// 1: the parent's descriptor was not closed; 2: the child's
		// own watch does not work; 3: it reported the wrong range.
		mrn_watch_abandon(w);
		if (device_fds() != before - 1)
			_exit(1);
		mrn_watch_t *own = nullptr;
		char *p = map_page();
		uint64_t oid = 0, g = 0;
		if (!p || mrn_watch_open(MRN_MONITOR_KERNEL, &own) != 0 ||
		    mrn_watch_add(own, p, kPage, 9, &oid) != 0 || munmap(p, kPage) != 0)
			_exit(2);
		std::vector<Reported> r;
		if (mrn_watch_drain(own, collect, &r, &g) != 1 || r[0].cookie != 9 || r[0].addr != p)
			_exit(3);
		mrn_watch_close(own);
		_exit(0);
	}
	int status = 0;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status)) << "1: the parent's descriptor stayed open in the child, "
					     "2: the child's own watch failed, 3: it reported wrong";
	// The parent's watch still reports its own range, and nothing of the
	// child's.
	std::vector<Reported> r;
	ASSERT_EQ(0, munmap(parents, kPage));
	EXPECT_EQ(1, mrn_watch_drain(w, collect, &r, &seen));
	ASSERT_EQ(1u, r.size());
	EXPECT_EQ(5u, r[0].cookie);
	EXPECT_EQ(parents, r[0].addr);
}

} // namespace

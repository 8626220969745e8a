// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko across processes: fork, SCM_RIGHTS, exit, and the last close
// happening in another process. Run as root (reads the module-wide stats).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "mrn_test_util.h"

using mrn::Ctx;
using mrn::Map;
using mrn::page_size;

namespace {

// In a child: count failed checks and report them through the exit status.
struct ChildChecks {
	int failed = 0;
	void check(bool ok, const char *what)
	{
		if (!ok) {
			failed++;
			fprintf(stderr, "child check failed: %s (errno %d)\n", what, errno);
		}
	}
	[[noreturn]] void exit_now() { _exit(failed > 100 ? 100 : failed); }
};

int wait_exit(pid_t pid)
{
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 200;
}

bool send_fd(int sock, int fd, const void *data, size_t len)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	memset(cbuf, 0, sizeof(cbuf));
	iovec iov{const_cast<void *>(data), len};
	msghdr msg{};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof(cbuf);
	cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == static_cast<ssize_t>(len);
}

int recv_fd(int sock, void *data, size_t len)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	iovec iov{data, len};
	msghdr msg{};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof(cbuf);
	if (recvmsg(sock, &msg, 0) != static_cast<ssize_t>(len))
		return -1;
	cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

// Every operation on a context from a foreign address space must be EIO.
void check_foreign(ChildChecks &k, int fd, uint64_t some_id, void *addr)
{
	mrn_register r{};
	r.size = sizeof(r);
	r.addr = reinterpret_cast<uintptr_t>(addr);
	r.length = page_size();
	errno = 0;
	k.check(ioctl(fd, MRN_IOC_REGISTER, &r) == -1 && errno == EIO, "REGISTER is EIO");
	mrn_unregister u{};
	u.size = sizeof(u);
	u.id = some_id;
	errno = 0;
	k.check(ioctl(fd, MRN_IOC_UNREGISTER, &u) == -1 && errno == EIO, "UNREGISTER is EIO");
	mrn_dirty_entry e[4];
	mrn_drain d = Ctx::drain_arg(e, 4);
	errno = 0;
	k.check(ioctl(fd, MRN_IOC_DRAIN, &d) == -1 && errno == EIO, "DRAIN is EIO");
	mrn_query q{};
	q.size = sizeof(q);
	errno = 0;
	k.check(ioctl(fd, MRN_IOC_QUERY, &q) == -1 && errno == EIO, "QUERY is EIO");
	errno = 0;
	k.check(mmap(nullptr, page_size(), PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED &&
			errno == EIO,
		"mmap is EIO");
	// Even malformed requests fail with EIO first: nothing is looked at.
	errno = 0;
	k.check(ioctl(fd, MRN_IOC_QUERY, nullptr) == -1 && errno == EIO, "bad pointer is EIO");
}

bool is_mapped(const void *addr)
{
	unsigned char v;
	void *page = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(addr) &
					      ~(page_size() - 1));
	return mincore(page, page_size(), &v) == 0;
}

TEST(Fork, ChildGetsEIOAndParentIsUndisturbed)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	const size_t ps = page_size();
	Map m(4 * ps);
	m.touch();
	int64_t clean = c.reg(m.get(), ps, 1);
	int64_t dirty = c.reg(m.get() + ps, ps, 2);
	int64_t other = c.reg(m.get() + 2 * ps, ps, 3);
	ASSERT_GT(clean, 0);
	ASSERT_GT(dirty, 0);
	ASSERT_GT(other, 0);
	ASSERT_EQ(0, madvise(m.get() + ps, ps, MADV_DONTNEED));
	ASSERT_EQ(1u, c.gen());

	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		ChildChecks k;
		check_foreign(k, c.fd(), static_cast<uint64_t>(clean), m.get());
		k.check(!is_mapped(c.status()), "status page is not inherited");
		// The child's own unmaps do not reach the parent's context.
		k.check(munmap(m.get() + 2 * ps, ps) == 0, "child munmap");
		// The child may open its own context.
		Ctx mine;
		k.check(mine.ok(), "child opens its own context");
		int64_t id = mine.reg(m.get(), ps, 9);
		k.check(id > 0, "child registers");
		k.check(madvise(m.get(), ps, MADV_DONTNEED) == 0, "child madvise");
		mrn_dirty_entry e[2];
		mrn_drain d = Ctx::drain_arg(e, 2);
		k.check(ioctl(mine.fd(), MRN_IOC_DRAIN, &d) == 0 && d.count == 1 &&
				e[0].cookie == 9,
			"child drains its own");
		k.check(close(c.fd()) == 0, "child closes the inherited fd");
		k.exit_now();
	}
	EXPECT_EQ(0, wait_exit(pid));
	// Nothing the child did changed the parent's context.
	EXPECT_EQ(1u, c.gen());
	mrn_query q = c.query();
	EXPECT_EQ(3u, q.registrations);
	EXPECT_EQ(1u, q.dirty);
	EXPECT_EQ(std::set<uint64_t>{static_cast<uint64_t>(dirty)}, c.drain_ids());
	EXPECT_EQ(0, c.unreg(static_cast<uint64_t>(clean)));
	// Still watching: the parent's own munmap is seen.
	ASSERT_EQ(0, munmap(m.get() + 2 * ps, ps));
	EXPECT_EQ(std::set<uint64_t>{static_cast<uint64_t>(other)}, c.drain_ids());
}

TEST(Fork, StatusPageIsNotInherited)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	ASSERT_TRUE(is_mapped(c.status()));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		_exit(is_mapped(c.status()) ? 1 : 0);
	EXPECT_EQ(0, wait_exit(pid));
}

TEST(ScmRights, ReceiverIsRefusedAndOwnerUndisturbed)
{
	int sv[2];
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		// An unrelated address space that never had the context.
		ChildChecks k;
		close(sv[0]);
		uint64_t id = 0;
		int fd = recv_fd(sv[1], &id, sizeof(id));
		k.check(fd >= 0, "received the fd");
		Map mine(page_size());
		check_foreign(k, fd, id, mine.get());
		k.check(close(fd) == 0, "close");
		char ack = 1;
		k.check(write(sv[1], &ack, 1) == 1, "ack");
		k.exit_now();
	}
	close(sv[1]);
	Ctx c;
	ASSERT_TRUE(c.ok());
	Map m(2 * page_size());
	m.touch();
	int64_t id = c.reg(m.get(), m.size(), 5);
	ASSERT_GT(id, 0);
	uint64_t uid = static_cast<uint64_t>(id);
	ASSERT_TRUE(send_fd(sv[0], c.fd(), &uid, sizeof(uid)));
	char ack = 0;
	EXPECT_EQ(1, read(sv[0], &ack, 1));
	EXPECT_EQ(0, wait_exit(pid));
	close(sv[0]);
	EXPECT_EQ(0u, c.gen());
	EXPECT_EQ(1u, c.query().registrations);
	ASSERT_EQ(0, munmap(m.get(), m.size()));
	m.release();
	EXPECT_EQ(std::set<uint64_t>{uid}, c.drain_ids());
}

TEST(Exit, OwnerExitInvalidatesAndReleasesEverything)
{
	auto before = mrn::global_stats();
	ASSERT_TRUE(before.count("contexts"));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		ChildChecks k;
		Ctx c;
		k.check(c.ok(), "open");
		Map m(4 * page_size());
		m.touch();
		for (int i = 0; i < 3; i++)
			k.check(c.reg(m.get() + i * page_size(), page_size(), i) > 0, "register");
		k.exit_now(); // exit with the context open and the ranges mapped
	}
	EXPECT_EQ(0, wait_exit(pid));
	auto after = mrn::global_stats();
	EXPECT_EQ(3, after["callbacks_release"] - before["callbacks_release"]);
	EXPECT_EQ(3, after["invalidated"] - before["invalidated"]);
	EXPECT_EQ(before["contexts"], after["contexts"]);
	EXPECT_EQ(before["registrations"], after["registrations"]);
}

// The image exec'd by the next test: MRN_TEST_EXEC_FD names a context fd
// inherited across execve (opened without O_CLOEXEC). Every ioctl and mmap
// must be EIO: the exec'd process has a new address space.
const int exec_check = [] {
	const char *e = getenv("MRN_TEST_EXEC_FD");
	if (!e)
		return 0;
	const int fd = atoi(e);
	mrn_query q{};
	q.size = sizeof(q);
	errno = 0;
	bool ok = ioctl(fd, MRN_IOC_QUERY, &q) == -1 && errno == EIO;
	mrn_drain d = Ctx::drain_arg(nullptr, 0);
	errno = 0;
	ok = ok && ioctl(fd, MRN_IOC_DRAIN, &d) == -1 && errno == EIO;
	errno = 0;
	ok = ok && mmap(nullptr, page_size(), PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED &&
	     errno == EIO;
	_exit(ok ? 0 : 3);
}();

TEST(Exec, InheritedContextIsEIOAfterExecAndReleasedAtExit)
{
	auto before = mrn::global_stats();
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		int fd = open(MRN_DEVICE_PATH, O_RDWR); // no O_CLOEXEC on purpose
		Map m(page_size());
		m.touch();
		mrn_register r{};
		r.size = sizeof(r);
		r.addr = reinterpret_cast<uintptr_t>(m.get());
		r.length = page_size();
		if (fd < 0 || ioctl(fd, MRN_IOC_REGISTER, &r) != 0)
			_exit(4);
		setenv("MRN_TEST_EXEC_FD", std::to_string(fd).c_str(), 1);
		execl("/proc/self/exe", "mrn_process_test", static_cast<char *>(nullptr));
		_exit(5);
	}
	EXPECT_EQ(0, wait_exit(pid)) << "3: not EIO after exec; 4: set-up; 5: exec";
	auto after = mrn::global_stats();
	// exec tore the old address space down: its registration was invalidated.
	EXPECT_EQ(1, after["callbacks_release"] - before["callbacks_release"]);
	EXPECT_EQ(before["contexts"], after["contexts"]);
	EXPECT_EQ(before["registrations"], after["registrations"]);
}

TEST(Exit, PassedContextOutlivesItsOwnerAndReleasesSafelyElsewhere)
{
	// The child registers, hands its context to the parent and exits. The
	// parent cannot use it (EIO) but holds the last reference; closing it
	// there must free everything without touching the parent's memory (the
	// parent maps its own page at the child's status page address first).
	int sv[2];
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	auto before = mrn::global_stats();
	// An address kept free for the parent's own page: reserved here, so
	// the child's status page can go there and the parent can map it later
	// (MAP_FIXED_NOREPLACE then cannot fail, and the check is never skipped).
	void *resv = mmap(nullptr, page_size(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, resv);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		ChildChecks k;
		close(sv[0]);
		Ctx c;
		k.check(c.ok(), "open");
		Map m(4 * page_size());
		m.touch();
		for (int i = 0; i < 3; i++)
			k.check(c.reg(m.get() + i * page_size(), page_size(), i) > 0, "register");
		k.check(munmap(resv, page_size()) == 0, "free the reserved address");
		k.check(mmap(resv, page_size(), PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, c.fd(),
			     0) == resv,
			"status page mapped at the reserved address");
		uint64_t where = reinterpret_cast<uintptr_t>(resv);
		k.check(send_fd(sv[1], c.fd(), &where, sizeof(where)), "send");
		char b;
		k.check(read(sv[1], &b, 1) == 1, "wait for the parent");
		k.exit_now();
	}
	close(sv[1]);
	uint64_t where = 0;
	int fd = recv_fd(sv[0], &where, sizeof(where));
	ASSERT_GE(fd, 0);
	char go = 1;
	ASSERT_EQ(1, write(sv[0], &go, 1));
	EXPECT_EQ(0, wait_exit(pid));
	close(sv[0]);

	auto mid = mrn::global_stats();
	EXPECT_EQ(3, mid["callbacks_release"] - before["callbacks_release"]);
	EXPECT_EQ(before["contexts"] + 1, mid["contexts"]);
	EXPECT_EQ(before["registrations"] + 3, mid["registrations"]);
	ChildChecks k;
	check_foreign(k, fd, 1, nullptr);
	EXPECT_EQ(0, k.failed);

	ASSERT_EQ(reinterpret_cast<uintptr_t>(resv), where);
	ASSERT_EQ(0, munmap(resv, page_size()));
	void *mine = mmap(resv, page_size(), PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	ASSERT_EQ(resv, mine) << "the parent's page at the child's status address";
	memset(mine, 0x5A, page_size());
	ASSERT_EQ(0, close(fd));
	auto after = mrn::global_stats();
	EXPECT_EQ(before["contexts"], after["contexts"]);
	EXPECT_EQ(before["registrations"], after["registrations"]);
	EXPECT_TRUE(is_mapped(mine));
	EXPECT_EQ(0x5A, static_cast<unsigned char *>(mine)[page_size() - 1]);
	munmap(mine, page_size());
}

TEST(Exit, LastCloseInChildRemovesParentNotifiersOnly)
{
	// The parent drops its fd; the child that inherited it closes last. The
	// release runs in the child, detaches the parent's notifiers, and leaves
	// the child's own memory at the parent's status page address alone.
	auto before = mrn::global_stats();
	const size_t ps = page_size();
	Map m(4 * ps);
	m.touch();
	int to_child[2], to_parent[2];
	ASSERT_EQ(0, pipe(to_child));
	ASSERT_EQ(0, pipe(to_parent));
	auto *c = new Ctx();
	ASSERT_TRUE(c->ok());
	for (int i = 0; i < 4; i++)
		ASSERT_GT(c->reg(m.get() + i * ps, ps, i), 0);
	void *status_addr = const_cast<mrn_status *>(c->status());
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		ChildChecks k;
		close(to_child[1]);
		close(to_parent[0]);
		char b;
		k.check(read(to_child[0], &b, 1) == 1, "wait until the parent closed");
		void *p = mmap(status_addr, ps, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		k.check(p == status_addr, "child maps the parent's status address");
		if (p != MAP_FAILED)
			memset(p, 0x77, ps);
		k.check(close(c->fd()) == 0, "last close, in the child");
		k.check(p != MAP_FAILED && is_mapped(p) &&
				static_cast<unsigned char *>(p)[10] == 0x77,
			"child memory untouched by the release");
		k.check(write(to_parent[1], &b, 1) == 1, "tell the parent");
		k.exit_now();
	}
	close(to_child[0]);
	close(to_parent[1]);
	int ctx_fd = c->fd();
	c->close_fd();
	delete c;
	EXPECT_EQ(-1, fcntl(ctx_fd, F_GETFD));
	// The context is still alive (the child holds it) and still watches.
	ASSERT_EQ(0, madvise(m.get(), ps, MADV_DONTNEED));
	auto mid = mrn::global_stats();
	EXPECT_EQ(before["contexts"] + 1, mid["contexts"]);
	EXPECT_EQ(1, mid["invalidated"] - before["invalidated"]);
	char b = 1;
	ASSERT_EQ(1, write(to_child[1], &b, 1));
	EXPECT_EQ(1, read(to_parent[0], &b, 1));
	EXPECT_EQ(0, wait_exit(pid));
	auto after = mrn::global_stats();
	EXPECT_EQ(before["contexts"], after["contexts"]);
	EXPECT_EQ(before["registrations"], after["registrations"]);
	// The parent's memory is intact and its unmaps no longer reach anything.
	EXPECT_EQ(1, m.get()[ps]);
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_DONTNEED));
	EXPECT_EQ(after["invalidated"], mrn::global_stats()["invalidated"]);
}

} // namespace

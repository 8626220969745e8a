// SPDX-License-Identifier: GPL-2.0
// Helpers shared by the mrnotify.ko guest tests (GoogleTest). They run as
// root inside the qemu guest with the module loaded.
#ifndef MRN_TEST_UTIL_H
#define MRN_TEST_UTIL_H

#include <gtest/gtest.h>
#include <linux/io_uring.h>
#include <linux/mrnotify.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace mrn {

inline size_t page_size()
{
	return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// One context: the fd plus its status page.
class Ctx {
public:
	explicit Ctx(bool map_status = true)
	{
		fd_ = open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
		if (fd_ >= 0 && map_status) {
			void *p = mmap(nullptr, page_size(), PROT_READ, MAP_SHARED, fd_, 0);
			if (p != MAP_FAILED)
				status_ = static_cast<const mrn_status *>(p);
		}
	}
	~Ctx() { close_fd(); }
	Ctx(const Ctx &) = delete;
	Ctx &operator=(const Ctx &) = delete;

	void close_fd()
	{
		if (status_)
			munmap(const_cast<mrn_status *>(status_), page_size());
		status_ = nullptr;
		if (fd_ >= 0)
			close(fd_);
		fd_ = -1;
	}
	int fd() const { return fd_; }
	bool ok() const { return fd_ >= 0 && status_ != nullptr; }
	const mrn_status *status() const { return status_; }

	uint64_t gen() const { return __atomic_load_n(&status_->generation, __ATOMIC_ACQUIRE); }

	// Returns the id (> 0) or -errno.
	int64_t reg(const void *addr, size_t len, uint64_t cookie = 0) const
	{
		return reg_raw(reinterpret_cast<uintptr_t>(addr), len, cookie);
	}
	int64_t reg_raw(uint64_t addr, uint64_t len, uint64_t cookie = 0) const
	{
		mrn_register r;
		memset(&r, 0, sizeof(r));
		r.size = sizeof(r);
		r.addr = addr;
		r.length = len;
		r.cookie = cookie;
		if (ioctl(fd_, MRN_IOC_REGISTER, &r) != 0)
			return -errno;
		return static_cast<int64_t>(r.id);
	}
	// Returns 0, MRN_UNREGISTER_WAS_DIRTY or -errno.
	int unreg(uint64_t id) const
	{
		mrn_unregister u;
		memset(&u, 0, sizeof(u));
		u.size = sizeof(u);
		u.id = id;
		int rc = ioctl(fd_, MRN_IOC_UNREGISTER, &u);
		return rc < 0 ? -errno : rc;
	}
	// The DRAIN argument for capacity entries at `entries` (no allocation).
	static mrn_drain drain_arg(const void *entries, uint32_t capacity)
	{
		mrn_drain d;
		memset(&d, 0, sizeof(d));
		d.size = sizeof(d);
		d.entries = reinterpret_cast<uintptr_t>(entries);
		d.capacity = capacity;
		d.entry_size = sizeof(mrn_dirty_entry);
		return d;
	}
	// One DRAIN call; returns 0 or -errno.
	int drain_once(std::vector<mrn_dirty_entry> *out, uint32_t capacity, bool *more = nullptr,
		       uint64_t *generation = nullptr) const
	{
		std::vector<mrn_dirty_entry> buf(capacity ? capacity : 1);
		mrn_drain d = drain_arg(buf.data(), capacity);
		if (ioctl(fd_, MRN_IOC_DRAIN, &d) != 0)
			return -errno;
		for (uint32_t i = 0; i < d.count; i++)
			out->push_back(buf[i]);
		if (more)
			*more = d.out_flags & MRN_DRAIN_MORE;
		if (generation)
			*generation = d.generation;
		return 0;
	}
	// Drains until MORE is clear; returns every entry.
	std::vector<mrn_dirty_entry> drain(uint32_t batch = 256,
					   uint64_t *generation = nullptr) const
	{
		std::vector<mrn_dirty_entry> all;
		bool more = true;
		while (more) {
			if (drain_once(&all, batch, &more, generation) != 0)
				break;
		}
		return all;
	}
	std::set<uint64_t> drain_ids() const
	{
		std::set<uint64_t> ids;
		for (const auto &e : drain())
			ids.insert(e.id);
		return ids;
	}
	mrn_query query() const
	{
		mrn_query q;
		memset(&q, 0, sizeof(q));
		q.size = sizeof(q);
		if (ioctl(fd_, MRN_IOC_QUERY, &q) != 0)
			memset(&q, 0xff, sizeof(q));
		return q;
	}

private:
	int fd_ = -1;
	const mrn_status *status_ = nullptr;
};

// Anonymous private mapping, unmapped by the destructor unless released.
class Map {
public:
	explicit Map(size_t len, int prot = PROT_READ | PROT_WRITE,
		     int flags = MAP_PRIVATE | MAP_ANONYMOUS)
	    : len_(len)
	{
		void *p = mmap(nullptr, len, prot, flags, -1, 0);
		p_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
	}
	~Map()
	{
		if (p_)
			munmap(p_, len_);
	}
	Map(const Map &) = delete;
	Map &operator=(const Map &) = delete;
	char *get() const { return p_; }
	size_t size() const { return len_; }
	void touch() const
	{
		for (size_t o = 0; o < len_; o += page_size())
			p_[o] = 1;
	}
	void release() { p_ = nullptr; }

private:
	size_t len_;
	char *p_;
};

// A mapping of an unlinked temporary file of len bytes, every page touched
// (read, so that a private mapping still maps the page cache).
class FileMap {
public:
	FileMap(size_t len, int flags) : len_(len)
	{
		char path[] = "/tmp/mrn-file-XXXXXX";
		fd_ = mkstemp(path);
		if (fd_ < 0)
			return;
		unlink(path);
		if (ftruncate(fd_, static_cast<off_t>(len)) != 0)
			return;
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, fd_, 0);
		if (p == MAP_FAILED)
			return;
		p_ = static_cast<char *>(p);
		for (size_t o = 0; o < len; o += page_size()) {
			volatile char sink = p_[o];
			(void)sink;
		}
	}
	~FileMap()
	{
		if (p_)
			munmap(p_, len_);
		if (fd_ >= 0)
			close(fd_);
	}
	FileMap(const FileMap &) = delete;
	FileMap &operator=(const FileMap &) = delete;
	char *get() const { return p_; }
	int fd() const { return fd_; }

private:
	size_t len_;
	int fd_ = -1;
	char *p_ = nullptr;
};

// The highest user address + 1 (TASK_SIZE): 47-bit unless the CPU and
// kernel use 5-level paging (qemu's -cpu max has LA57), probed with a
// mapping above the 47-bit line.
inline uint64_t task_size()
{
	const uint64_t ps = page_size();
	void *want = reinterpret_cast<void *>(1ULL << 47);
	void *p = mmap(want, ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
		       0);
	if (p == MAP_FAILED)
		return (1ULL << 47) - ps;
	munmap(p, ps);
	return p == want ? (1ULL << 56) - ps : (1ULL << 47) - ps;
}

// Whether the module treats PROTECTION_VMA on anonymous memory as
// invalidating: Linux before 5.14 with more than one NUMA node (see
// mrn_protection_may_migrate() in kernel/mrnotify_compat.h).
inline bool protection_may_migrate()
{
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return false;
	if (major > 5 || (major == 5 && minor >= 14))
		return false;
	return access("/sys/devices/system/node/node1", F_OK) == 0;
}

// A forked child that talks with its parent over two pipes: it runs
// fn(up, down) and exits with what that returns; the parent reads what it
// writes to up (get) and writes what it reads from down (put). Killed and
// reaped when the parent lets go of it.
class Child {
public:
	template <class Fn> explicit Child(Fn fn)
	{
		int up[2], down[2];
		if (pipe(up))
			return;
		if (pipe(down)) {
			close(up[0]);
			close(up[1]);
			return;
		}
		pid_ = fork();
		if (pid_ == 0) {
			close(up[0]);
			close(down[1]);
			_exit(fn(up[1], down[0]));
		}
		close(up[1]);
		close(down[0]);
		from_ = up[0];
		to_ = down[1];
	}
	~Child()
	{
		if (pid_ > 0) {
			kill(pid_, SIGKILL);
			waitpid(pid_, nullptr, 0);
		}
		close(from_);
		close(to_);
	}
	Child(const Child &) = delete;
	Child &operator=(const Child &) = delete;

	pid_t pid() const { return pid_; }
	// Waits for the child to end; its wait status, or -1.
	int wait()
	{
		int st = 0;
		if (pid_ <= 0 || waitpid(pid_, &st, 0) != pid_)
			return -1;
		pid_ = -1;
		return st;
	}
	bool get(void *p, size_t n) { return pid_ > 0 && read(from_, p, n) == static_cast<ssize_t>(n); }
	bool put(const void *p, size_t n)
	{
		return pid_ > 0 && write(to_, p, n) == static_cast<ssize_t>(n);
	}

private:
	pid_t pid_ = -1;
	int from_ = -1, to_ = -1;
};

// Module parameters, /sys/module/mrnotify/parameters/ (root).
inline std::string read_param(const char *name = "max_registrations")
{
	std::ifstream f(std::string("/sys/module/mrnotify/parameters/") + name);
	std::string s;
	f >> s;
	return s;
}

inline bool write_param(const std::string &v, const char *name = "max_registrations")
{
	int fd = open((std::string("/sys/module/mrnotify/parameters/") + name).c_str(),
		      O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
	close(fd);
	return ok;
}

// Sets a module parameter for the scope, restoring the old value.
class ScopedParam {
public:
	ScopedParam(const char *name, const std::string &v) : name_(name), old_(read_param(name))
	{
		ok_ = !old_.empty() && write_param(v, name);
	}
	~ScopedParam()
	{
		if (ok_)
			write_param(old_, name_);
	}
	bool ok() const { return ok_; }

private:
	const char *name_;
	std::string old_;
	bool ok_ = false;
};

// Module-wide counters, one value per file in /sys/kernel/debug/mrnotify/
// (root; the guest mounts debugfs). Kernel internals, not ABI: tests take
// differences over a stretch in which only they use the module.
inline std::map<std::string, long long> global_stats()
{
	static const char *const names[] = {"callbacks_unmap",
					    "callbacks_clear",
					    "callbacks_protection_vma",
					    "callbacks_protection_page",
					    "callbacks_soft_dirty",
					    "callbacks_release",
					    "callbacks_migrate",
					    "callbacks_exclusive",
					    "callbacks_other",
					    "invalidated",
					    "marked_at_end",
					    "deferred",
					    "deferred_merged",
					    "ignored",
					    "drained",
					    "unregistered_dirty",
					    "user_limit_hits",
					    "notifiers_registered",
					    "contexts",
					    "registrations",
					    "max_callback_hold_ns",
					    "max_callback_marks"};
	std::map<std::string, long long> m;
	for (const char *n : names) {
		std::ifstream f(std::string("/sys/kernel/debug/mrnotify/") + n);
		long long v = -1;
		if (f >> v)
			m[n] = v;
	}
	return m;
}

// Start a measurement of the per-callback maxima (max_callback_hold_ns,
// max_callback_marks): debugfs takes 0 as a reset.
inline bool reset_callback_maxima()
{
	for (const char *n : {"max_callback_hold_ns", "max_callback_marks"}) {
		std::ofstream f(std::string("/sys/kernel/debug/mrnotify/") + n);
		if (!(f << "0") || !f.flush())
			return false;
	}
	return true;
}

// With a cap reached (of this user's or this process's contexts): one more
// open() fails with EMFILE, and after one context is closed it works.
inline void expect_one_more_open_is_emfile(std::vector<std::unique_ptr<Ctx>> *ctxs)
{
	errno = 0;
	int fd = open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	EXPECT_EQ(-1, fd);
	EXPECT_EQ(EMFILE, errno);
	if (fd >= 0)
		close(fd);
	ctxs->pop_back();
	Ctx again;
	EXPECT_TRUE(again.ok());
}

// MRN_MARK_BUDGET in kernel/mrn_internal.h: the most registrations one
// notifier callback marks.
constexpr long long kMarkBudget = 16;

// Counter changes since construction.
class StatsDelta {
public:
	StatsDelta() : before_(global_stats()) {}
	long long operator[](const std::string &key) const
	{
		auto now = global_stats();
		return now.at(key) - before_.at(key);
	}
	long long callbacks() const
	{
		long long sum = 0;
		for (const auto &kv : global_stats())
			if (kv.first.compare(0, 10, "callbacks_") == 0)
				sum += kv.second - before_.at(kv.first);
		return sum;
	}

private:
	std::map<std::string, long long> before_;
};

// An ioctl whose command encodes `size` (the kernel wants it equal to the
// argument's size field).
inline int ioctl_sized(int fd, unsigned nr, unsigned size, void *arg)
{
	return ioctl(fd, _IOC(_IOC_READ | _IOC_WRITE, MRN_IOC_MAGIC, nr, size), arg);
}

// Physical frame behind addr from /proc/self/pagemap (root), 0 if none.
inline uint64_t pfn_of(const void *addr)
{
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	uint64_t e = 0;
	off_t off = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) / page_size() * 8);
	ssize_t n = pread(fd, &e, sizeof(e), off);
	close(fd);
	if (n != sizeof(e) || !(e & (1ULL << 63)))
		return 0;
	return e & ((1ULL << 55) - 1);
}

// A real long-term pin (FOLL_PIN | FOLL_LONGTERM, as ibv_reg_mr takes):
// io_uring fixed buffers. ok() is false where io_uring is unavailable.
class LongTermPin {
public:
	LongTermPin(void *addr, size_t len)
	{
		io_uring_params params;
		memset(&params, 0, sizeof(params));
		fd_ = static_cast<int>(syscall(__NR_io_uring_setup, 1, &params));
		if (fd_ < 0)
			return;
		iovec iov{addr, len};
		ok_ = syscall(__NR_io_uring_register, fd_, IORING_REGISTER_BUFFERS, &iov, 1) == 0;
	}
	~LongTermPin()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	LongTermPin(const LongTermPin &) = delete;
	LongTermPin &operator=(const LongTermPin &) = delete;
	bool ok() const { return ok_; }

private:
	int fd_ = -1;
	bool ok_ = false;
};

// A minimal io_uring (no liburing) with one fixed buffer: pin() takes a
// long-term pin of [addr, addr + len) as ibv_reg_mr does, and
// read_through_pin() reads the pinned pages (not whatever is mapped at addr
// now) by writing them to a memfd with IORING_OP_WRITE_FIXED.
class PinReader {
public:
	PinReader()
	{
		io_uring_params p;
		memset(&p, 0, sizeof(p));
		fd_ = static_cast<int>(syscall(__NR_io_uring_setup, 4, &p));
		if (fd_ < 0)
			return;
		sq_len_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
		cq_len_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
		if (!(p.features & IORING_FEAT_SINGLE_MMAP))
			return;
		sq_len_ = cq_len_ = sq_len_ > cq_len_ ? sq_len_ : cq_len_;
		void *ring = mmap(nullptr, sq_len_, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQ_RING);
		sqes_len_ = p.sq_entries * sizeof(io_uring_sqe);
		void *sqes = mmap(nullptr, sqes_len_, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES);
		if (ring == MAP_FAILED || sqes == MAP_FAILED)
			return;
		ring_ = static_cast<char *>(ring);
		sqes_ = static_cast<io_uring_sqe *>(sqes);
		sq_tail_ = reinterpret_cast<unsigned *>(ring_ + p.sq_off.tail);
		sq_mask_ = *reinterpret_cast<unsigned *>(ring_ + p.sq_off.ring_mask);
		sq_array_ = reinterpret_cast<unsigned *>(ring_ + p.sq_off.array);
		cq_head_ = reinterpret_cast<unsigned *>(ring_ + p.cq_off.head);
		cq_tail_ = reinterpret_cast<unsigned *>(ring_ + p.cq_off.tail);
		cq_mask_ = *reinterpret_cast<unsigned *>(ring_ + p.cq_off.ring_mask);
		cqes_ = reinterpret_cast<io_uring_cqe *>(ring_ + p.cq_off.cqes);
		memfd_ = static_cast<int>(syscall(SYS_memfd_create, "mrn-pin", 0));
		ok_ = memfd_ >= 0;
	}
	~PinReader()
	{
		unpin();
		if (sqes_)
			munmap(sqes_, sqes_len_);
		if (ring_)
			munmap(ring_, sq_len_);
		if (memfd_ >= 0)
			close(memfd_);
		if (fd_ >= 0)
			close(fd_);
	}
	PinReader(const PinReader &) = delete;
	PinReader &operator=(const PinReader &) = delete;
	bool ok() const { return ok_; }
	// 0 or -errno (EFAULT: nothing mapped there).
	int pin(void *addr, size_t len)
	{
		iovec iov{addr, len};
		if (syscall(__NR_io_uring_register, fd_, IORING_REGISTER_BUFFERS, &iov, 1) != 0)
			return -errno;
		addr_ = addr;
		len_ = len;
		return 0;
	}
	void unpin()
	{
		if (addr_)
			syscall(__NR_io_uring_register, fd_, IORING_UNREGISTER_BUFFERS, nullptr, 0);
		addr_ = nullptr;
	}
	// Copies n bytes at offset off of the pinned pages to out; false on error.
	bool read_through_pin(size_t off, void *out, size_t n)
	{
		const unsigned tail = *sq_tail_;
		io_uring_sqe *sqe = &sqes_[tail & sq_mask_];
		memset(sqe, 0, sizeof(*sqe));
		sqe->opcode = IORING_OP_WRITE_FIXED;
		sqe->fd = memfd_;
		sqe->addr = reinterpret_cast<uintptr_t>(addr_);
		sqe->len = static_cast<unsigned>(len_);
		sqe->off = 0;
		sqe->buf_index = 0;
		sq_array_[tail & sq_mask_] = tail & sq_mask_;
		__atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
		if (syscall(__NR_io_uring_enter, fd_, 1, 1, IORING_ENTER_GETEVENTS, nullptr, 0) !=
		    1)
			return false;
		const unsigned head = *cq_head_;
		if (head == __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE))
			return false;
		const int res = cqes_[head & cq_mask_].res;
		__atomic_store_n(cq_head_, head + 1, __ATOMIC_RELEASE);
		return res == static_cast<int>(len_) &&
		       pread(memfd_, out, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
	}

private:
	int fd_ = -1, memfd_ = -1;
	bool ok_ = false;
	char *ring_ = nullptr;
	io_uring_sqe *sqes_ = nullptr;
	size_t sq_len_ = 0, cq_len_ = 0, sqes_len_ = 0;
	unsigned *sq_tail_ = nullptr, *sq_array_ = nullptr, *cq_head_ = nullptr,
		 *cq_tail_ = nullptr;
	unsigned sq_mask_ = 0, cq_mask_ = 0;
	io_uring_cqe *cqes_ = nullptr;
	void *addr_ = nullptr;
	size_t len_ = 0;
};

// AnonHugePages/Private_Hugetlb (kB) of the mapping containing addr, from
// /proc/self/smaps; -1 if not found.
inline long smaps_kb(const void *addr, const std::string &field)
{
	std::ifstream f("/proc/self/smaps");
	std::string line;
	const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
	bool in = false;
	while (std::getline(f, line)) {
		unsigned long lo, hi;
		if (sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 &&
		    line.find(':') > line.find(' ')) {
			in = a >= lo && a < hi;
			continue;
		}
		if (in && line.compare(0, field.size() + 1, field + ":") == 0)
			return std::stol(line.substr(field.size() + 1));
	}
	return -1;
}

// Slab/kernel memory in bytes from /proc/meminfo ("Slab:" etc.).
inline long long meminfo_bytes(const std::string &key)
{
	std::ifstream f("/proc/meminfo");
	std::string line;
	while (std::getline(f, line)) {
		if (line.compare(0, key.size() + 1, key + ":") == 0) {
			std::istringstream is(line.substr(key.size() + 1));
			long long kb = 0;
			is >> kb;
			return kb * 1024;
		}
	}
	return -1;
}

} // namespace mrn

#endif // MRN_TEST_UTIL_H

// SPDX-License-Identifier: GPL-2.0
// mrn_race_fuzz: random ioctls with random arguments on shared contexts,
// from several threads, interleaved with munmap, mremap, madvise, mprotect,
// MAP_FIXED, fork and close over the same ranges. What it looks for is in
// the kernel log (an oops, a KASAN, KFENCE or lockdep report, a warning),
// which the guest harness checks; on its own it fails on:
//  - a lost invalidation: each thread also runs checked rounds on a context
//    of its own (register, unmap, then the id must come back from DRAIN or
//    UNREGISTER must say WAS_DIRTY), interleaved with the chaos;
//  - an errno the ABI does not document for that call;
//  - a leak: once every context is closed, the user must have no
//    registration charged.
// With --fail-slab P (a kernel with CONFIG_FAILSLAB and debugfs, booted with
// slub_debug=A,mrn_reg,radix_tree_node), P percent of the fuzzing threads'
// allocations of registrations and of id-index nodes fail, so that the
// module's error paths run; a failed allocation may only cost an ENOMEM,
// never a lost invalidation or a leak. Only those two caches: failing every
// allocation of the task would fail its page faults (SIGBUS) and munmaps.
// Usage: mrn_race_fuzz [--ops N] [--threads T] [--seed S] [--fail-slab P]
// Exit status: 0 clean, 1 a check failed, 2 usage, 77 no /dev/mrnotify.
#include <linux/mrnotify.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#include <atomic>
#include <memory>
#include <cinttypes>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kArenaPages = 4096; // 16 MiB: room for huge pages too
constexpr int kContexts = 4;

struct Options {
	long ops = 1000000;
	int threads = 4;
	uint64_t seed = 1;
	int fail_slab = 0; // percent of slab allocations that fail
};

bool write_file(const std::string &path, const std::string &value)
{
	FILE *f = fopen(path.c_str(), "w");
	if (!f)
		return false;
	const bool ok = fputs(value.c_str(), f) >= 0;
	return fclose(f) == 0 && ok;
}

bool read_flag(const std::string &path)
{
	FILE *f = fopen(path.c_str(), "r");
	if (!f)
		return false;
	int v = 0;
	const bool ok = fscanf(f, "%d", &v) == 1;
	fclose(f);
	return ok && v == 1;
}

// Fault injection (Documentation/fault-injection): failslab for the threads
// that set /proc/thread-self/make-it-fail (the fuzzing threads, and the
// children they fork), not for the main thread, which creates the threads
// and checks for leaks at the end; and only in the caches marked at boot.
class FailSlab {
public:
	explicit FailSlab(int percent)
	{
		const std::string d = "/sys/kernel/debug/failslab/";
		if (!read_flag("/sys/kernel/slab/mrn_reg/failslab")) {
			why_ = "the mrn_reg cache is not marked (boot with "
			       "slub_debug=A,mrn_reg,radix_tree_node)";
			return;
		}
		ok_ = write_file(d + "task-filter", "Y") && write_file(d + "cache-filter", "Y") &&
		      write_file(d + "interval", "1") &&
		      write_file(d + "times", "-1") && write_file(d + "space", "0") &&
		      write_file(d + "verbose", "0") && write_file(d + "ignore-gfp-wait", "N") &&
		      write_file(d + "probability", std::to_string(percent));
		if (!ok_)
			why_ = "no " + d + " (CONFIG_FAILSLAB, debugfs): " + strerror(errno);
	}
	~FailSlab() { stop(); }
	FailSlab(const FailSlab &) = delete;
	FailSlab &operator=(const FailSlab &) = delete;
	bool ok() const { return ok_; }
	const std::string &why() const { return why_; }
	void stop() { write_file("/sys/kernel/debug/failslab/probability", "0"); }

private:
	bool ok_ = false;
	std::string why_;
};

// The errnos each call may return (docs/kernel-abi.md); anything else is a
// finding. EBADF: another thread closed the context; ENOTTY: a command that
// does not exist.
bool documented(int err)
{
	switch (err) {
	case EINVAL:
	case EFAULT:
	case E2BIG:
	case ENOSPC:
	case ENOMEM:
	case ENOENT:
	case ESTALE:
	case EBADF:
	case ENOTTY:
	case EIO:
	case EPERM:
	case EAGAIN:
	case EINTR:
		return true;
	default:
		return false;
	}
}

struct Shared {
	char *arena = nullptr;
	std::atomic<int> fds[kContexts];
	std::atomic<long> ops_left{0};
	std::atomic<long> lost{0};
	std::atomic<long> undocumented{0};
	std::atomic<long> checked_rounds{0};
	std::atomic<long> forks{0};
	std::atomic<long> enomem{0}; // calls that failed for want of memory
	bool fail_slab = false;
	std::mutex log_lock;
	std::set<int> bad_errnos;
};

// Faults pages in for writing. Not with a store: another thread may have
// just unmapped, moved or protected them, and the kernel's EFAULT is
// harmless where a store's SIGSEGV is not. (EINVAL before Linux 5.14.)
void populate(void *p, size_t len)
{
	madvise(p, len, MADV_POPULATE_WRITE);
}

int open_ctx()
{
	return open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
}

class Fuzzer {
public:
	Fuzzer(Shared *s, uint64_t seed) : s_(s), rng_(seed) {}

	void run()
	{
		own_fd_ = open_ctx();
		if (s_->fail_slab && !write_file("/proc/thread-self/make-it-fail", "1"))
			fprintf(stderr, "mrn_race_fuzz: make-it-fail: %s\n", strerror(errno));
		while (s_->ops_left.fetch_sub(1, std::memory_order_relaxed) > 0)
			step();
		if (own_fd_ >= 0)
			close(own_fd_);
	}

private:
	uint64_t any() { return rng_(); }
	size_t below(size_t n) { return static_cast<size_t>(rng_() % n); }
	bool one_in(size_t n) { return below(n) == 0; }

	int shared_fd() { return s_->fds[below(kContexts)].load(std::memory_order_relaxed); }

	void note(const char *what, int rc)
	{
		if (rc < 0 && errno == ENOMEM)
			s_->enomem++;
		if (rc >= 0 || documented(errno))
			return;
		s_->undocumented++;
		std::lock_guard<std::mutex> g(s_->log_lock);
		if (s_->bad_errnos.insert(errno).second)
			fprintf(stderr, "mrn_race_fuzz: %s returned undocumented errno %d (%s)\n",
				what, errno, strerror(errno));
	}

	// A range in the arena, sometimes outside it or nonsense.
	void range(__u64 *addr, __u64 *len)
	{
		const size_t first = below(kArenaPages);
		*addr = reinterpret_cast<uintptr_t>(s_->arena) + first * kPage;
		*len = (1 + below(std::min<size_t>(kArenaPages - first, 1024))) * kPage;
		switch (below(16)) {
		case 0:
			*addr = any();
			break;
		case 1:
			*len = any();
			break;
		case 2:
			*len = 0;
			break;
		case 3:
			*addr += below(kPage);
			*len = 1 + below(3 * kPage);
			break;
		default:
			break;
		}
	}

	// Sizes around the real ones, and sometimes anything.
	uint32_t size_of(uint32_t real)
	{
		switch (below(12)) {
		case 0:
			return static_cast<uint32_t>(any());
		case 1:
			return real - 8;
		case 2:
			return real + 8;
		default:
			return real;
		}
	}
	uint32_t flags() { return one_in(12) ? static_cast<uint32_t>(any()) : 0; }

	void do_register(int fd)
	{
		mrn_register r;
		memset(&r, 0, sizeof(r));
		r.size = size_of(sizeof(r));
		r.flags = flags();
		range(&r.addr, &r.length);
		r.cookie = any();
		int rc = ioctl(fd, MRN_IOC_REGISTER, one_in(50) ? nullptr : &r);
		note("REGISTER", rc);
		if (rc == 0 && ids_.size() < 4096)
			ids_.push_back(r.id);
	}

	void do_unregister(int fd)
	{
		mrn_unregister u;
		memset(&u, 0, sizeof(u));
		u.size = size_of(sizeof(u));
		u.flags = flags();
		if (!ids_.empty() && !one_in(8)) {
			const size_t i = below(ids_.size());
			u.id = ids_[i];
			ids_[i] = ids_.back();
			ids_.pop_back();
		} else {
			u.id = any() % 4 ? any() % 100000 : any();
		}
		note("UNREGISTER", ioctl(fd, MRN_IOC_UNREGISTER, &u));
	}

	void do_drain(int fd)
	{
		mrn_dirty_entry buf[64];
		mrn_drain d;
		memset(&d, 0, sizeof(d));
		d.size = size_of(sizeof(d));
		d.flags = flags();
		d.capacity = static_cast<uint32_t>(below(65));
		d.entry_size = one_in(10) ? static_cast<uint32_t>(below(128)) : sizeof(buf[0]);
		if (d.entry_size > sizeof(buf[0]))
			d.capacity = std::min<uint32_t>(d.capacity, 16);
		switch (below(10)) {
		case 0:
			d.entries = 0;
			break;
		case 1:
			// Into the arena, which other threads unmap and protect.
			d.entries = reinterpret_cast<uintptr_t>(s_->arena) +
				    below(kArenaPages) * kPage;
			break;
		default:
			d.entries = reinterpret_cast<uintptr_t>(buf);
			break;
		}
		note("DRAIN", ioctl(fd, MRN_IOC_DRAIN, &d));
	}

	void do_query(int fd)
	{
		unsigned char q[1024];
		memset(q, 0, sizeof(q));
		const uint32_t size = one_in(3) ? static_cast<uint32_t>(below(sizeof(q) + 1))
						: static_cast<uint32_t>(sizeof(mrn_query));
		memcpy(q, &size, sizeof(size));
		note("QUERY", ioctl(fd, MRN_IOC_QUERY, q));
	}

	void do_bad_command(int fd)
	{
		unsigned char arg[256] = {};
		const unsigned long cmd = _IOC(below(4), MRN_IOC_MAGIC, below(16),
					       below(sizeof(arg)));
		note("a random command", ioctl(fd, cmd, arg));
	}

	void do_mm()
	{
		const size_t first = below(kArenaPages);
		// Mostly a few pages; now and then a huge page's worth and more.
		// (Under emulation, faulting in megabytes is what costs.)
		const size_t most = one_in(32) ? 600 : 16;
		const size_t pages = 1 + below(std::min<size_t>(kArenaPages - first, most));
		char *p = s_->arena + first * kPage;
		const size_t len = pages * kPage;
		switch (below(9)) {
		case 0: // unmap and put back
			munmap(p, len);
			mmap(p, len, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			break;
		case 1: // replace in place
			mmap(p, len, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			break;
		case 2:
			madvise(p, len, MADV_DONTNEED);
			break;
		case 3:
			madvise(p, len, MADV_FREE);
			break;
		case 4:
			madvise(p, len, one_in(2) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
			break;
		case 5: // protect, then give access back
			mprotect(p, len, PROT_READ);
			mprotect(p, len, PROT_READ | PROT_WRITE);
			break;
		case 6: { // move it away and back
			void *q = mremap(p, len, len, MREMAP_MAYMOVE);
			if (q != MAP_FAILED && q != p)
				mremap(q, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p);
			break;
		}
		default: // fault pages in, so that there is something to zap
			populate(p, len);
			break;
		}
	}

	void do_fork()
	{
		s_->forks++;
		const pid_t pid = fork();
		if (pid == 0) {
			// The child's copies of the contexts: it may use and
			// close them; the kernel must refuse a foreign mm.
			for (int i = 0; i < 8; i++) {
				mrn_register r;
				memset(&r, 0, sizeof(r));
				r.size = sizeof(r);
				r.addr = reinterpret_cast<uintptr_t>(s_->arena);
				r.length = kPage;
				ioctl(s_->fds[i % kContexts].load(), MRN_IOC_REGISTER, &r);
				munmap(s_->arena + below(kArenaPages) * kPage, kPage);
			}
			_exit(0);
		}
		if (pid > 0)
			waitpid(pid, nullptr, 0);
	}

	void do_close()
	{
		const int fd = open_ctx();
		if (fd < 0)
			return;
		const int old = s_->fds[below(kContexts)].exchange(fd);
		// Other threads may be inside an ioctl on it, or about to use
		// the number after it was reused for another context.
		close(old);
	}

	// Register a private range on this thread's own context, unmap it: the
	// registration must come back dirty. This runs while other threads
	// remap the arena and hammer the shared contexts.
	void checked_round()
	{
		if (own_fd_ < 0)
			return;
		s_->checked_rounds++;
		const size_t len = (1 + below(4)) * kPage;
		char *p = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE,
						   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		if (p == MAP_FAILED)
			return;
		populate(p, len);
		mrn_register r;
		memset(&r, 0, sizeof(r));
		r.size = sizeof(r);
		r.addr = reinterpret_cast<uintptr_t>(p);
		r.length = len;
		r.cookie = 42;
		if (ioctl(own_fd_, MRN_IOC_REGISTER, &r) != 0) {
			note("REGISTER (checked)", -1);
			munmap(p, len);
			return;
		}
		if (munmap(p, len) != 0) {
			// Nothing was unmapped, so nothing is owed.
			note("munmap (checked)", -1);
			return;
		}
		bool seen = false;
		for (bool more = true; more;) {
			mrn_dirty_entry buf[16];
			mrn_drain d;
			memset(&d, 0, sizeof(d));
			d.size = sizeof(d);
			d.entries = reinterpret_cast<uintptr_t>(buf);
			d.capacity = 16;
			d.entry_size = sizeof(buf[0]);
			if (ioctl(own_fd_, MRN_IOC_DRAIN, &d) != 0) {
				note("DRAIN (checked)", -1);
				break;
			}
			for (uint32_t i = 0; i < d.count; i++)
				seen |= buf[i].id == r.id;
			more = d.out_flags & MRN_DRAIN_MORE;
		}
		if (!seen) {
			mrn_unregister u;
			memset(&u, 0, sizeof(u));
			u.size = sizeof(u);
			u.id = r.id;
			const int rc = ioctl(own_fd_, MRN_IOC_UNREGISTER, &u);
			if (rc != MRN_UNREGISTER_WAS_DIRTY) {
				s_->lost++;
				fprintf(stderr,
					"mrn_race_fuzz: lost invalidation: id %" PRIu64
					" unmapped, not drained, UNREGISTER returned %d\n",
					static_cast<uint64_t>(r.id), rc);
			}
		}
	}

	void step()
	{
		const size_t what = below(100);
		if (what < 14)
			do_register(shared_fd());
		else if (what < 24)
			do_unregister(shared_fd());
		else if (what < 34)
			do_drain(shared_fd());
		else if (what < 38)
			do_query(shared_fd());
		else if (what < 41)
			do_bad_command(shared_fd());
		else if (what < 80)
			do_mm();
		else if (what < 98)
			checked_round();
		else if (what < 99)
			do_close();
		else if (one_in(20))
			do_fork();
	}

	Shared *s_;
	std::mt19937_64 rng_;
	std::vector<uint64_t> ids_;
	int own_fd_ = -1;
};

int usage()
{
	fprintf(stderr,
		"usage: mrn_race_fuzz [--ops N] [--threads T] [--seed S] [--fail-slab PERCENT]\n");
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	Options o;
	for (int i = 1; i < argc; i++) {
		const std::string a = argv[i];
		if (i + 1 >= argc)
			return usage();
		char *end = nullptr;
		const unsigned long long v = strtoull(argv[++i], &end, 0);
		if (*end != '\0' || v == 0)
			return usage();
		if (a == "--ops")
			o.ops = static_cast<long>(v);
		else if (a == "--threads" && v <= 64)
			o.threads = static_cast<int>(v);
		else if (a == "--seed")
			o.seed = v;
		else if (a == "--fail-slab" && v <= 100)
			o.fail_slab = static_cast<int>(v);
		else
			return usage();
	}
	// Held to the end: the user's charges live as long as one of its
	// contexts does, so that a leaked charge is still there to be seen.
	const int hold_fd = open_ctx();
	if (hold_fd < 0) {
		printf("1..0 # SKIP cannot open %s: %s\n", MRN_DEVICE_PATH, strerror(errno));
		return 77;
	}
	Shared s;
	for (auto &fd : s.fds) {
		fd = open_ctx();
		if (fd < 0) {
			printf("1..0 # SKIP cannot open %s: %s\n", MRN_DEVICE_PATH,
			       strerror(errno));
			return 77;
		}
		s.fail_slab = true;
	}
	void *arena = mmap(nullptr, kArenaPages * kPage, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED) {
		perror("mrn_race_fuzz: mmap");
		return 1;
	}
	s.arena = static_cast<char *>(arena);
	s.ops_left = o.ops;
	std::unique_ptr<FailSlab> fail;
	if (o.fail_slab) {
		fail = std::make_unique<FailSlab>(o.fail_slab);
		if (!fail->ok()) {
			printf("1..0 # SKIP failslab: %s\n", fail->why().c_str());
			return 77;
		}
		s.fail_slab = true;
	}
	std::vector<std::thread> threads;
	for (int t = 0; t < o.threads; t++)
		threads.emplace_back([&s, &o, t] { Fuzzer(&s, o.seed * 1000 + t).run(); });
	for (auto &t : threads)
		t.join();
	for (auto &fd : s.fds)
		close(fd);
	if (fail)
		fail->stop();

	// Every other context is closed: nothing may stay charged to the user.
	long leaked = -1;
	mrn_query q;
	memset(&q, 0, sizeof(q));
	q.size = sizeof(q);
	if (ioctl(hold_fd, MRN_IOC_QUERY, &q) == 0)
		leaked = static_cast<long>(q.user_registrations);
	close(hold_fd);
	if (leaked != 0)
		fprintf(stderr, "mrn_race_fuzz: %ld registrations still charged after close\n",
			leaked);
	printf("mrn_race_fuzz: %ld operations, %d threads, seed %" PRIu64 ", failslab %d%%: "
	       "%ld checked rounds, %ld forks, %ld ENOMEM, %ld lost invalidations, "
	       "%ld undocumented errnos, %ld registrations leaked\n",
	       o.ops, o.threads, o.seed, o.fail_slab, s.checked_rounds.load(), s.forks.load(),
	       s.enomem.load(), s.lost.load(), s.undocumented.load(), leaked);
	// One TAP result for the whole run (tests/README.md).
	const bool ok = s.lost == 0 && s.undocumented == 0 && leaked == 0;
	printf("%s 1 - no lost invalidation, no undocumented errno, nothing left charged\n1..1\n",
	       ok ? "ok" : "not ok");
	return ok ? 0 : 1;
}

// SPDX-License-Identifier: BSD-3-Clause
//
// The userfaultfd monitor, for kernels without mrnotify.ko. Cached ranges
// are registered with a userfaultfd in write-protect mode (nothing is ever
// write-protected, so no fault is intercepted); the kernel then reports
// UNMAP, REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP events for them to
// a monitor thread.
//
// No window: the kernel holds the unmapping thread until the monitor has
// read the event. The monitor therefore moves the generation *before* each
// read, and a drain waits until what that read returned is queued. A get()
// that starts after munmap() (or mmap(MAP_FIXED), mremap(), madvise()) has
// returned sees the generation moved, drains, and finds the range invalid.
//
// What is registered: aligned granules shared by the cached ranges over
// them, not each range exactly, so that many small ranges do not split the
// application's mappings past vm.max_map_count (uffd_ranges.h).
//
// What uffd does not see: hole punches and truncation of shared memory and
// files. can_cache() therefore refuses pages that are shared or file-backed
// (/proc/self/pagemap's "file-page or shared-anon" bit, read once the pages
// are pinned); the cache registers those uncached. Memory uffd cannot
// register at all (other file mappings) is refused by watch().
//
// The thread never exits while the monitor lives, never allocates or logs
// while an unmapping thread may be waiting on it (the ranges go to a fixed
// ring; when it is full, the next drain invalidates everything), and may
// run on any CPU of the process, not only the core the rank is bound to.
#include "log.h"
#include "map_count.h"
#include "monitor.h"
#include "uffd_ranges.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <cerrno>
#include <cinttypes>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

namespace mrn {

namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

// /proc/self/pagemap: bit 61 "page is file-page or shared-anon", bit 63
// present, bit 62 swapped (Documentation/admin-guide/mm/pagemap.rst). The
// flags are readable without privileges.
constexpr uint64_t kPagemapShared = uint64_t(1) << 61;

class UffdMonitor final : public Monitor {
public:
	UffdMonitor(int uffd, int stop_fd, int pagemap_fd, const UffdOptions &o)
	    : uffd_(uffd), stop_fd_(stop_fd), pagemap_fd_(pagemap_fd),
	      page_size_(size_t(sysconf(_SC_PAGESIZE))),
	      ranges_(o.granule, page_size_, o.max_ranges,
		      [this](uintptr_t s, uintptr_t e) { return uffd_ioctl(UFFDIO_REGISTER, s, e); },
		      [this](uintptr_t s, uintptr_t e) {
			      return uffd_ioctl(UFFDIO_UNREGISTER, s, e);
		      })
	{
		thread_ = std::make_unique<std::thread>([this] { run(); });
	}
	~UffdMonitor() override
	{
		if (thread_) {
			const uint64_t one = 1;
			if (write(stop_fd_, &one, sizeof(one)) != sizeof(one))
				log(0, "uffd monitor: cannot stop the monitor thread");
			thread_->join();
		}
		for (int fd : {uffd_, stop_fd_, pagemap_fd_})
			if (fd >= 0)
				close(fd);
	}

	mrn_monitor_t kind() const override { return MRN_MONITOR_UFFD; }
	const uint64_t *generation() const override { return &generation_; }
	bool keeps_idle_entries() const override { return true; }

	int watch(uintptr_t start, uintptr_t end, uint64_t, uint64_t *id) override
	{
		std::lock_guard<std::mutex> g(ranges_mutex_);
		const uint64_t refused = ranges_.refused();
		*id = 0;
		const int rc = ranges_.add(start, end, id);
		if (ranges_.refused() != refused && refused == 0)
			log(0,
			    "uffd monitor: %" PRIu64 " userfaultfd ranges, the most "
			    "vm.max_map_count allows; further registrations are not cached",
			    ranges_.ranges());
		return rc;
	}

	int unwatch(uint64_t id) override
	{
		std::lock_guard<std::mutex> g(ranges_mutex_);
		ranges_.remove(id);
		return 0;
	}

	void add_stats(mrn_stats *s) override
	{
		std::lock_guard<std::mutex> g(ranges_mutex_);
		s->uffd_ranges = ranges_.ranges();
		s->uffd_out_of_budget = ranges_.refused();
	}

	bool can_cache(uintptr_t start, uintptr_t end) override
	{
		if (pagemap_fd_ < 0)
			return false;
		std::array<uint64_t, 512> words;
		for (uintptr_t a = start; a < end;) {
			const size_t pages = std::min(words.size(), size_t((end - a) / page_size_));
			const off_t off = off_t(a / page_size_ * sizeof(uint64_t));
			const ssize_t n = pread(pagemap_fd_, words.data(), pages * sizeof(uint64_t),
						off);
			if (n <= 0)
				return false;
			for (size_t i = 0; i < size_t(n) / sizeof(uint64_t); i++)
				if (words[i] & kPagemapShared)
					return false;
			a += size_t(n) / sizeof(uint64_t) * page_size_;
		}
		return true;
	}

	int drain(InvalidationSink &sink, uint64_t *generation) override
	{
		std::array<Range, kRing> ranges;
		size_t count = 0;
		bool overflowed;
		{
			std::unique_lock<std::mutex> lk(mutex_);
			// A read that moved the generation may still be turning its
			// events into ranges: wait for them.
			queued_.wait(lk, [this] { return reading_ == 0; });
			*generation = load_generation(&generation_);
			overflowed = overflowed_;
			overflowed_ = false;
			for (; count < pending_; count++)
				ranges[count] = ring_[count];
			pending_ = 0;
		}
		if (overflowed) {
			sink.invalidate_range(0, UINTPTR_MAX & ~(page_size_ - 1));
			return 0;
		}
		for (size_t i = 0; i < count; i++)
			sink.invalidate_range(ranges[i].start, ranges[i].end);
		return 0;
	}

	void abandon_after_fork() override
	{
		// The thread does not exist in the child; the uffd watches
		// nothing here (no UFFD_FEATURE_EVENT_FORK).
		// Not joined nor detached: the thread does not exist here, and
		// its descriptor is the parent's.
		(void)thread_.release();
		ranges_.forget();
		for (int *fd : {&uffd_, &stop_fd_, &pagemap_fd_}) {
			if (*fd >= 0)
				close(*fd);
			*fd = -1;
		}
	}

private:
	struct Range {
		uintptr_t start, end;
	};
	static constexpr size_t kRing = 256;

	// UFFDIO_REGISTER (write-protect mode: nothing is ever protected) or
	// UFFDIO_UNREGISTER of [start, end); 0 or -errno.
	int uffd_ioctl(unsigned long request, uintptr_t start, uintptr_t end)
	{
		uffdio_register r{};
		r.range.start = start;
		r.range.len = end - start;
		r.mode = UFFDIO_REGISTER_MODE_WP;
		void *arg = request == UFFDIO_REGISTER ? static_cast<void *>(&r)
						       : static_cast<void *>(&r.range);
		return ioctl(uffd_, request, arg) < 0 ? -errno : 0;
	}

	void run()
	{
		allow_every_cpu();
		pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
		for (;;) {
			if (poll(fds, 2, -1) < 0) {
				// EINTR, or ENOMEM: try again shortly; leaving
				// would blind the cache.
				if (errno != EINTR)
					std::this_thread::sleep_for(std::chrono::milliseconds(1));
				continue;
			}
			if (fds[1].revents)
				return;
			if (fds[0].revents)
				read_events();
		}
	}

	void read_events()
	{
		{
			std::lock_guard<std::mutex> g(mutex_);
			reading_++;
			// Before the read: the read releases the unmapping
			// threads, and a get() they make next must see a moved
			// generation.
			__atomic_fetch_add(&generation_, 1, __ATOMIC_RELEASE);
		}
		uffd_msg msgs[64];
		const ssize_t n = read(uffd_, msgs, sizeof(msgs));
		std::lock_guard<std::mutex> g(mutex_);
		for (ssize_t i = 0; n > 0 && i < n / ssize_t(sizeof(uffd_msg)); i++)
			queue_locked(msgs[i]);
		reading_--;
		queued_.notify_all();
	}

	void queue_locked(const uffd_msg &m)
	{
		Range r;
		switch (m.event) {
		case UFFD_EVENT_UNMAP:
		case UFFD_EVENT_REMOVE:
			r = {uintptr_t(m.arg.remove.start), uintptr_t(m.arg.remove.end)};
			break;
		case UFFD_EVENT_REMAP:
			r = {uintptr_t(m.arg.remap.from),
			     uintptr_t(m.arg.remap.from + m.arg.remap.len)};
			break;
		default:
			return;
		}
		if (pending_ == kRing) {
			overflowed_ = true;
			return;
		}
		ring_[pending_++] = r;
	}

	// A rank bound to one core starts this thread on that core; unmapping
	// threads wait on it, so let it run anywhere the process may.
	static void allow_every_cpu()
	{
		cpu_set_t all;
		CPU_ZERO(&all);
		for (int i = 0; i < CPU_SETSIZE; i++)
			CPU_SET(i, &all);
		(void)sched_setaffinity(0, sizeof(all), &all);
	}

	int uffd_;
	int stop_fd_;
	int pagemap_fd_;
	size_t page_size_;
	uint64_t generation_ = 0;
	std::mutex mutex_;
	std::condition_variable queued_;
	unsigned reading_ = 0;
	bool overflowed_ = false;
	size_t pending_ = 0;
	std::array<Range, kRing> ring_;
	// Taken by watch() and unwatch() (the cache's writer side), never by
	// the monitor thread.
	std::mutex ranges_mutex_;
	UffdRanges ranges_;
	std::unique_ptr<std::thread> thread_;
};

} // namespace

UffdOptions UffdOptions::defaults()
{
	UffdOptions o;
	o.granule = size_t(2) << 20;
	// Each range can split a mapping at both ends: an eighth of the limit
	// in ranges splits at most a quarter of the mappings; with the fork
	// advice's half at most (cache.cc), a quarter is always left to the
	// application.
	o.max_ranges = vm_max_map_count() / 8;
	return o;
}

std::unique_ptr<Monitor> make_uffd_monitor(int *err, std::string *why)
{
	return make_uffd_monitor(UffdOptions::defaults(), err, why);
}

std::unique_ptr<Monitor> make_uffd_monitor(const UffdOptions &options, int *err,
					   std::string *why)
{
	const int fd = static_cast<int>(
		syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
	if (fd < 0) {
		*err = -errno;
		*why = std::string("userfaultfd: ") + strerror(errno);
		return nullptr;
	}
	uffdio_api api{};
	api.api = UFFD_API;
	api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
		       UFFD_FEATURE_EVENT_REMAP;
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		*err = -errno;
		*why = std::string("UFFDIO_API (unmap/remove/remap events): ") + strerror(errno);
		close(fd);
		return nullptr;
	}
	const int stop = eventfd(0, EFD_CLOEXEC);
	if (stop < 0) {
		*err = -errno;
		*why = std::string("eventfd: ") + strerror(errno);
		close(fd);
		return nullptr;
	}
	// Without pagemap nothing can be shown private: every registration
	// is then uncached (can_cache says no).
	const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	*why = pagemap >= 0 ? "userfaultfd with unmap/remove/remap events"
			    : "userfaultfd with unmap/remove/remap events; no /proc/self/pagemap, "
			      "so nothing is cached";
	try {
		return std::make_unique<UffdMonitor>(fd, stop, pagemap, options);
	} catch (const std::system_error &e) {
		*err = -EAGAIN;
		*why = std::string("cannot start the uffd monitor thread: ") + e.what();
		close(fd);
		close(stop);
		if (pagemap >= 0)
			close(pagemap);
		return nullptr;
	}
}

} // namespace mrn

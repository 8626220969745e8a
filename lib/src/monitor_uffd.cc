// SPDX-License-Identifier: BSD-3-Clause
//
// The userfaultfd monitor, for kernels without mrnotify.ko. Cached ranges
// are registered with a userfaultfd in write-protect mode (nothing is ever
// write-protected, so no fault is intercepted); the kernel then reports
// UNMAP, REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP events for them to
// a monitor thread, which queues the ranges and bumps the generation.
//
// The window that cannot be closed: the kernel releases the unmapping thread
// once the monitor has read the event, a moment before the generation
// moves. A get() of that range in between, even by the thread that just
// unmapped it, can still hit.
// Only anonymous, shmem and hugetlb memory can be registered; entries on
// other memory are kept only while in use.
#include "log.h"
#include "monitor.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace mrn {

namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

class UffdMonitor final : public Monitor {
public:
	UffdMonitor(int uffd, int stop_fd) : uffd_(uffd), stop_fd_(stop_fd)
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
		if (uffd_ >= 0)
			close(uffd_);
		if (stop_fd_ >= 0)
			close(stop_fd_);
	}

	mrn_monitor_t kind() const override { return MRN_MONITOR_UFFD; }
	const uint64_t *generation() const override
	{
		return reinterpret_cast<const uint64_t *>(&generation_);
	}
	bool keeps_idle_entries() const override { return true; }

	int track(uintptr_t start, uintptr_t end, uint64_t, uint64_t *id) override
	{
		uffdio_register r{};
		r.range.start = start;
		r.range.len = end - start;
		r.mode = UFFDIO_REGISTER_MODE_WP;
		*id = 0;
		// Registering pages this uffd already watches is fine; EINVAL
		// means memory uffd cannot watch, EBUSY another uffd owns it.
		if (ioctl(uffd_, UFFDIO_REGISTER, &r) < 0)
			return (errno == EINVAL || errno == EBUSY) ? -EOPNOTSUPP : -errno;
		return 0;
	}

	int untrack(uint64_t) override { return 0; }

	void release_range(uintptr_t start, uintptr_t end) override
	{
		uffdio_range r{start, end - start};
		// The range may be gone already (unmapped): nothing to release.
		(void)ioctl(uffd_, UFFDIO_UNREGISTER, &r);
	}

	int drain(InvalidationSink &sink, uint64_t *generation) override
	{
		std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
		{
			std::lock_guard<std::mutex> g(mutex_);
			// Read the generation with the queue: all it counts is in it.
			*generation = __atomic_load_n(&generation_, __ATOMIC_ACQUIRE);
			ranges.swap(pending_);
		}
		for (const auto &r : ranges)
			sink.invalidate_range(r.first, r.second);
		return 0;
	}

	void abandon_after_fork() override
	{
		// The thread does not exist in the child; the uffd watches
		// nothing here (no UFFD_FEATURE_EVENT_FORK).
		(void)thread_.release();
		close(uffd_);
		close(stop_fd_);
		uffd_ = stop_fd_ = -1;
	}

private:
	void queue(uintptr_t start, uintptr_t end)
	{
		std::lock_guard<std::mutex> g(mutex_);
		pending_.emplace_back(start, end);
		__atomic_fetch_add(&generation_, 1, __ATOMIC_RELEASE);
	}

	void run()
	{
		pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
		for (;;) {
			if (poll(fds, 2, -1) < 0) {
				if (errno == EINTR)
					continue;
				log(0, "uffd monitor: poll failed: %s", strerror(errno));
				return;
			}
			if (fds[1].revents)
				return;
			uffd_msg msgs[64];
			const ssize_t n = read(uffd_, msgs, sizeof(msgs));
			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				log(0, "uffd monitor: read failed: %s", strerror(errno));
				return;
			}
			for (size_t i = 0; i < size_t(n) / sizeof(uffd_msg); i++)
				handle(msgs[i]);
		}
	}

	void handle(const uffd_msg &m)
	{
		switch (m.event) {
		case UFFD_EVENT_UNMAP:
			queue(m.arg.remove.start, m.arg.remove.end);
			break;
		case UFFD_EVENT_REMOVE:
			queue(m.arg.remove.start, m.arg.remove.end);
			break;
		case UFFD_EVENT_REMAP:
			queue(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
			break;
		default:
			break;
		}
	}

	int uffd_;
	int stop_fd_;
	uint64_t generation_ = 0;
	std::mutex mutex_;
	std::vector<std::pair<uintptr_t, uintptr_t>> pending_;
	std::unique_ptr<std::thread> thread_;
};

} // namespace

std::unique_ptr<Monitor> make_uffd_monitor(int *err, std::string *why)
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
	*why = "userfaultfd with unmap/remove/remap events";
	try {
		return std::make_unique<UffdMonitor>(fd, stop);
	} catch (const std::system_error &e) {
		*err = -EAGAIN;
		*why = std::string("cannot start the uffd monitor thread: ") + e.what();
		close(fd);
		close(stop);
		return nullptr;
	}
}

} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
//
// mrn_ofi_import(): the struct fid_mem_monitor libfabric imports, its ops
// (start, stop, subscribe, unsubscribe, valid), and the notifier thread
// that tells libfabric's caches what died. See mrnotify-ofi.h for the
// contract and watched_ranges.h for why the notify has its own thread.
#include "log.h"
#include "monitor.h"
#include "mrnotify-ofi.h"
#include "mrnotify.h"
#include "watched_ranges.h"

#include <rdma/fabric.h>
#include <rdma/fi_ext.h>

#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace mrn::ofi {

namespace {

// Dead ranges that touch or overlap, merged: each notify takes libfabric's
// locks and searches every cache's tree, so one munmap() over a thousand
// cached buffers costs one notify, not a thousand. An entry over a merged
// gap's neighbour is dropped too, which costs a registration, never data.
std::vector<Range> coalesce(std::vector<Range> r)
{
	std::sort(r.begin(), r.end(),
		  [](const Range &a, const Range &b) { return a.addr < b.addr; });
	std::vector<Range> out;
	for (const Range &x : r) {
		if (!out.empty() && x.addr <= out.back().addr + out.back().len) {
			Range &last = out.back();
			last.len = std::max(last.addr + last.len, x.addr + x.len) - last.addr;
		} else {
			out.push_back(x);
		}
	}
	return out;
}

// Blocks every signal in the calling thread for its lifetime.
class AllSignalsBlocked {
public:
	AllSignalsBlocked()
	{
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old_);
	}
	~AllSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
	AllSignalsBlocked(const AllSignalsBlocked &) = delete;
	AllSignalsBlocked &operator=(const AllSignalsBlocked &) = delete;

private:
	sigset_t old_;
};

// What runs between libfabric's start() and stop(): the kernel monitor, the
// table, and the thread that notifies. libfabric stops the monitor with its
// own locks held (mm_state_lock, in ofi_monitors_update), and the thread's
// notify may be waiting for libfabric's locks, so stop cannot wait for the
// thread: retire() tells it to stop, and whichever of the two lets go last
// frees this.
class Running {
public:
	// notify_gate: held around each notify, so that fork() (whose prepare
	// handler takes it) never copies libfabric's locks held by this thread.
	Running(std::unique_ptr<Monitor> monitor, fid_mem_monitor *fid, int wake_fd,
		std::mutex &notify_gate)
	    : ranges_(std::move(monitor), 0), fid_(fid), wake_fd_(wake_fd),
	      notify_gate_(notify_gate)
	{
		ranges_.set_on_death([this] { wake(); });
		// Every signal blocked in the thread (it inherits this mask): an
		// application's handler must not run on a thread that holds
		// libfabric's locks.
		const AllSignalsBlocked blocked;
		thread_ = std::thread([this] {
			notify_loop();
			release();
		});
	}
	Running(const Running &) = delete;
	Running &operator=(const Running &) = delete;

	WatchedRanges &ranges() { return ranges_; }

	// libfabric's stop(): the thread ends on its own, and frees what is left.
	void retire()
	{
		stopping_.store(true);
		wake();
		thread_.detach();
		release();
	}

	// In a forked child, which has neither the thread nor the parent's
	// kernel context: close the fds and never be freed. The table's lock
	// was taken by fork_prepare() (the table's own).
	void abandon_after_fork()
	{
		ranges_.fork_child();
		close(wake_fd_);
	}

private:
	~Running() { close(wake_fd_); }

	void release()
	{
		if (holders_.fetch_sub(1, std::memory_order_acq_rel) == 1)
			delete this;
	}

	void wake()
	{
		const uint64_t one = 1;
		if (write(wake_fd_, &one, sizeof(one)) < 0) {
			// EAGAIN: the counter is full, the thread will wake.
		}
	}

	void notify_loop()
	{
		pollfd fds[2] = {{ranges_.wait_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
		while (!stopping_.load()) {
			if (poll(fds, 2, -1) < 0 && errno != EINTR) {
				log(0, "ofi: poll: %s; the notifier stops (hits still check)",
				    strerror(errno));
				return;
			}
			if (fds[1].revents & POLLIN) {
				uint64_t n;
				if (read(wake_fd_, &n, sizeof(n)) < 0) {
					// EAGAIN: someone else read it.
				}
			}
			if (stopping_.load())
				return;
			ranges_.drain();
			const std::vector<Range> dead = ranges_.take_dead();
			{
				std::lock_guard<std::mutex> g(notify_gate_);
				for (const Range &r : coalesce(dead))
					fid_->import_ops->notify(
						fid_, reinterpret_cast<void *>(r.addr), r.len);
			}
			ranges_.notified(dead);
			// A drain that fails (a dead device) leaves the device
			// readable: wait a little rather than spin (hits refuse
			// meanwhile).
			if (ranges_.drain_failed())
				poll(nullptr, 0, 10);
		}
	}

	WatchedRanges ranges_;
	fid_mem_monitor *const fid_;
	const int wake_fd_;
	std::mutex &notify_gate_;
	std::atomic<bool> stopping_{false};
	std::atomic<int> holders_{2}; // retire() and the thread
	std::thread thread_;
};

struct Imported {
	fid_mem_monitor fid{};
	std::mutex mutex;       // start, stop, fork
	std::mutex notify_gate; // a notify in flight, fork (see Running)
	Running *running = nullptr;
	// Read on the hit path without the mutex: set by start() before
	// libfabric's first subscribe, cleared by stop() after its last call.
	std::atomic<Running *> live{nullptr};
	bool print_stats = false;
};

Imported &imported()
{
	static Imported *i = new Imported; // never freed: libfabric may call late
	return *i;
}

Imported *from_fid(fid_mem_monitor *)
{
	return &imported();
}

int op_start(fid_mem_monitor *fid)
{
	Imported &im = *from_fid(fid);
	std::lock_guard<std::mutex> g(im.mutex);
	if (im.running)
		return 0;
	int err = 0;
	std::string why;
	auto monitor = make_kernel_monitor(&err, &why);
	if (!monitor) {
		log(0, "ofi: %s; libfabric's MR cache runs without a monitor", why.c_str());
		return err ? err : -ENODEV;
	}
	const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wake_fd < 0)
		return -errno;
	try {
		im.running = new Running(std::move(monitor), fid, wake_fd, im.notify_gate);
	} catch (const std::exception &e) {
		close(wake_fd);
		log(0, "ofi: cannot start the notifier: %s", e.what());
		return -ENOMEM;
	}
	im.live.store(im.running, std::memory_order_release);
	log(1, "ofi: mrnotify.ko monitors libfabric's MR cache");
	return 0;
}

void print_stats(const mrn_ofi_stats &s)
{
	std::fprintf(stderr,
		     "libmrnotify: ofi stats: subscribes %llu unsubscribes %llu valid_slow %llu "
		     "valid_false %llu deaths %llu notified %llu ranges %llu watched %llu\n",
		     (unsigned long long)s.subscribes, (unsigned long long)s.unsubscribes,
		     (unsigned long long)s.valid_slow, (unsigned long long)s.valid_false,
		     (unsigned long long)s.deaths, (unsigned long long)s.notified,
		     (unsigned long long)s.ranges, (unsigned long long)s.watched);
}

void op_stop(fid_mem_monitor *fid)
{
	Imported &im = *from_fid(fid);
	std::lock_guard<std::mutex> g(im.mutex);
	if (!im.running)
		return;
	if (im.print_stats)
		print_stats(im.running->ranges().stats());
	im.live.store(nullptr, std::memory_order_release);
	std::exchange(im.running, nullptr)->retire();
}

Running *live(fid_mem_monitor *fid)
{
	return from_fid(fid)->live.load(std::memory_order_acquire);
}

int op_subscribe(fid_mem_monitor *fid, const void *addr, size_t len)
{
	Running *r = live(fid);
	if (!r)
		return -FI_ENOSYS;
	return r->ranges().subscribe(reinterpret_cast<uintptr_t>(addr), len);
}

void op_unsubscribe(fid_mem_monitor *fid, const void *addr, size_t len)
{
	if (Running *r = live(fid))
		r->ranges().unsubscribe(reinterpret_cast<uintptr_t>(addr), len);
}

bool op_valid(fid_mem_monitor *fid, const void *addr, size_t len)
{
	Running *r = live(fid);
	return r && r->ranges().valid(reinterpret_cast<uintptr_t>(addr), len);
}

fi_ops_mem_monitor export_ops = {
	sizeof(fi_ops_mem_monitor), op_start, op_stop, op_subscribe, op_unsubscribe, op_valid,
};

// The child keeps libfabric's state but not our thread or kernel context:
// every op then answers "not valid" / "cannot watch", and nothing of the
// parent's is touched (no ioctl on its context, no join).
// No notify is in flight across the fork: the child must not inherit
// libfabric's locks held by the notifier.
void fork_prepare()
{
	imported().mutex.lock();
	imported().notify_gate.lock();
	if (imported().running)
		imported().running->ranges().fork_prepare();
}
void fork_parent()
{
	if (imported().running)
		imported().running->ranges().fork_parent();
	imported().notify_gate.unlock();
	imported().mutex.unlock();
}
void fork_child()
{
	Imported &im = imported();
	if (im.running) {
		im.live.store(nullptr, std::memory_order_release);
		im.running->abandon_after_fork();
		im.running = nullptr; // never freed: its thread is the parent's
	}
	im.notify_gate.unlock();
	im.mutex.unlock();
}

// libfabric's entry points, from the copy already loaded in this process
// (whatever scope it was loaded into): libmrnotify never links it.
struct Libfabric {
	uint32_t (*version)(void);
	int (*open)(uint32_t, const char *, void *, size_t, uint64_t, fid **, void *);
	// The 1.3 versions, which 1.x and 2.x both have: only for fi_ini().
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const fi_info *, fi_info **);
	void (*freeinfo)(fi_info *);
};

bool find_libfabric(Libfabric *lf)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return false;
	*reinterpret_cast<void **>(&lf->version) = dlvsym(h, "fi_version", "FABRIC_1.0");
	*reinterpret_cast<void **>(&lf->open) = dlvsym(h, "fi_open", "FABRIC_1.5");
	*reinterpret_cast<void **>(&lf->getinfo) = dlvsym(h, "fi_getinfo", "FABRIC_1.3");
	*reinterpret_cast<void **>(&lf->freeinfo) = dlvsym(h, "fi_freeinfo", "FABRIC_1.3");
	dlclose(h); // it stays: someone else loaded it
	return lf->version && lf->open && lf->getinfo && lf->freeinfo;
}

int do_import()
{
	// The library's one reading of MRNOTIFY_* (a bad value is an error,
	// named on stderr); only the verbosity and the statistics apply here.
	mrn_config cfg;
	if (mrn_config_init(&cfg) < 0)
		return -EINVAL;
	raise_verbosity(cfg.verbose);
	Imported &im = imported();
	im.print_stats = cfg.print_stats;
	const char *want = getenv("FI_MR_CACHE_MONITOR");
	if (want && std::strcmp(want, "disabled") == 0) {
		log(1, "ofi: FI_MR_CACHE_MONITOR=disabled: not imported");
		return -ECANCELED;
	}
	Libfabric lf;
	if (!find_libfabric(&lf)) {
		log(0, "ofi: libfabric.so.1 is not loaded in this process: nothing imported");
		return -ENOSYS;
	}
	const uint32_t v = lf.version();
	if (FI_VERSION_LT(v, FI_VERSION(1, 13))) {
		log(0, "ofi: libfabric %u.%u has no monitor import (1.13 and later)", FI_MAJOR(v),
		    FI_MINOR(v));
		return -ENOSYS;
	}
	// Probe the device now: on a node without it libfabric must keep its
	// own monitor, which it can only do if nothing was imported.
	{
		int err = 0;
		std::string why;
		if (!make_kernel_monitor(&err, &why)) {
			// MRNOTIFY_OFI=try (what the modulefiles set on every
			// node): a node without the module is expected, and
			// said only at MRNOTIFY_VERBOSE=1; anything else wrong
			// with the device is always said.
			const char *mode = getenv("MRNOTIFY_OFI");
			const bool expected = mode && std::strcmp(mode, "try") == 0 && err == -ENOENT;
			log(expected ? 1 : 0, "ofi: %s; libfabric keeps its own memory monitor",
			    why.c_str());
			return -ENODEV;
		}
	}
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	im.fid.fid.fclass = FI_CLASS_MEM_MONITOR;
	im.fid.export_ops = &export_ops;
	// libfabric initialises itself (fi_ini) at the first fi_getinfo or
	// fi_fabric, not at fi_open("mr_cache"), and there an explicit
	// FI_MR_CACHE_MONITOR replaces whatever was imported before (1.17 and
	// 2.1 alike). Have it done first, so that ours stays.
	fi_info *all = nullptr;
	if (lf.getinfo(FI_VERSION(1, 13), nullptr, nullptr, 0, nullptr, &all) == 0)
		lf.freeinfo(all);
	// fi_import(), with the fi_open found above.
	fid *cache_fid = nullptr;
	int rc = lf.open(FI_VERSION(1, 13), "mr_cache", nullptr, 0, 0, &cache_fid, nullptr);
	if (rc == 0) {
		rc = fi_import_fid(cache_fid, &im.fid.fid, 0);
		fi_close(cache_fid);
	}
	if (rc == 0) {
		log(1, "ofi: imported into libfabric %u.%u", FI_MAJOR(v), FI_MINOR(v));
		return 0;
	}
	log(0, "ofi: libfabric refused the monitor (%s)%s", std::strerror(-rc),
	    rc == -FI_EBUSY ? ": another monitor was imported first, or a cache already runs" : "");
	return rc;
}

} // namespace

} // namespace mrn::ofi

extern "C" int mrn_ofi_import(void)
{
	static std::once_flag once;
	static int result;
	std::call_once(once, [] { result = mrn::ofi::do_import(); });
	return result;
}

extern "C" int mrn_ofi_monitor_stats(struct mrn_ofi_stats *out, size_t size)
{
	if (!out || size == 0 || size > sizeof(struct mrn_ofi_stats))
		return -EINVAL;
	mrn::ofi::Imported &im = mrn::ofi::imported();
	std::lock_guard<std::mutex> g(im.mutex);
	if (!im.running)
		return -ENODEV;
	const struct mrn_ofi_stats full = im.running->ranges().stats();
	std::memcpy(out, &full, size);
	return 0;
}

// SPDX-License-Identifier: BSD-3-Clause
// mrn_watch_*: the kernel monitor without a cache (see mrnotify.h).
#include "log.h"
#include "monitor.h"
#include "mrnotify.h"

#include <linux/mrnotify.h>

#include <cerrno>
#include <mutex>
#include <new>

struct mrn_watch {
	std::unique_ptr<mrn::Monitor> monitor;
	std::mutex mutex; // drains are serialised
};

namespace {

class Forward final : public mrn::InvalidationSink {
public:
	Forward(mrn_watch_fn fn, void *arg) : fn_(fn), arg_(arg) {}
	void invalidate_cookie(uint64_t cookie, uint64_t, uintptr_t start, uintptr_t end) override
	{
		fn_(arg_, cookie, reinterpret_cast<void *>(start), end - start);
		n_++;
	}
	void invalidate_range(uintptr_t start, uintptr_t end) override
	{
		fn_(arg_, 0, reinterpret_cast<void *>(start), end - start);
		n_++;
	}
	long count() const { return n_; }

private:
	mrn_watch_fn fn_;
	void *arg_;
	long n_ = 0;
};

} // namespace

extern "C" int mrn_watch_open(mrn_monitor_t monitor, mrn_watch_t **out)
{
	if (!out || (monitor != MRN_MONITOR_KERNEL && monitor != MRN_MONITOR_AUTO))
		return -EINVAL;
	try {
		int err = 0;
		std::string why;
		auto m = mrn::make_kernel_monitor(&err, &why);
		if (!m) {
			mrn::log(1, "watch: %s", why.c_str());
			return err == -ENOENT ? -ENODEV : err;
		}
		auto w = std::make_unique<mrn_watch>();
		w->monitor = std::move(m);
		*out = w.release();
		return 0;
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" void mrn_watch_close(mrn_watch_t *watch)
{
	std::unique_ptr<mrn_watch> owned(watch);
}

extern "C" void mrn_watch_abandon(mrn_watch_t *watch)
{
	if (!watch)
		return;
	// mrn_watch_open() makes only the kernel monitor, whose destructor
	// does nothing once it has let go of its descriptor (a cache's other
	// monitors are released instead: cache.cc's check_fork).
	watch->monitor->abandon_after_fork();
	delete watch;
}

extern "C" int mrn_watch_add(mrn_watch_t *watch, void *addr, size_t len, uint64_t cookie,
			     uint64_t *id)
{
	const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
	if (!watch || !id || len == 0 || a + len < a)
		return -EINVAL;
	return watch->monitor->watch(a, a + len, cookie, id);
}

extern "C" int mrn_watch_remove(mrn_watch_t *watch, uint64_t id)
{
	if (!watch)
		return -EINVAL;
	return watch->monitor->unwatch(id);
}

extern "C" const uint64_t *mrn_watch_generation(const mrn_watch_t *watch)
{
	return watch ? watch->monitor->generation() : nullptr;
}

extern "C" long mrn_watch_drain(mrn_watch_t *watch, mrn_watch_fn fn, void *arg,
				uint64_t *generation)
{
	if (!watch || !fn || !generation)
		return -EINVAL;
	std::lock_guard<std::mutex> g(watch->mutex);
	Forward sink(fn, arg);
	const int rc = watch->monitor->drain(sink, generation);
	return rc < 0 ? rc : sink.count();
}

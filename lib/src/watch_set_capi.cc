// SPDX-License-Identifier: BSD-3-Clause
// mrn_watch_set_*: the validity service's C API (mrnotify.h) over
// mrn::WatchSet with the kernel monitor.
#include "log.h"
#include "mrnotify.h"
#include "watch_set.h"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

struct mrn_watch_set {
	explicit mrn_watch_set(mrn::WatchSet::Opener opener, size_t max, int *err)
	    : set(std::move(opener), max, err)
	{}
	mrn::WatchSet set;
	// Held across a whole delivery, so that a thread whose deliver returns
	// finds every death found before it delivered, not in flight in
	// another thread; taken before the set's lock.
	std::mutex deliver;
	std::string why; // the last self-test's reason
};

namespace {

std::unique_ptr<mrn::Monitor> open_kernel(int *err, std::string *why)
{
	auto m = mrn::make_kernel_monitor(err, why);
	if (!m && *err == -ENOENT)
		*err = -ENODEV;
	return m;
}

} // namespace

extern "C" int mrn_watch_set_open(size_t max_ranges, mrn_watch_set_t **out)
{
	if (!out)
		return -EINVAL;
	try {
		int err = 0;
		auto s = std::make_unique<mrn_watch_set>(open_kernel, max_ranges, &err);
		if (err < 0) {
			mrn::log(1, "watch set: %s", strerror(-err));
			return err;
		}
		*out = s.release();
		return 0;
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" void mrn_watch_set_close(mrn_watch_set_t *set)
{
	delete set;
}

extern "C" int mrn_watch_set_hold(mrn_watch_set_t *set, void *addr, size_t len,
				  uint64_t *handle, int *shared)
{
	if (!set || !handle)
		return -EINVAL;
	try {
		bool was_live = false;
		const int rc =
			set->set.hold(reinterpret_cast<uintptr_t>(addr), len, handle, &was_live);
		if (rc == 0 && shared)
			*shared = was_live;
		return rc;
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" int mrn_watch_set_release(mrn_watch_set_t *set, uint64_t handle)
{
	return set ? set->set.release(handle) : -EINVAL;
}

extern "C" const uint64_t *mrn_watch_set_generation(const mrn_watch_set_t *set)
{
	return set ? set->set.generation() : nullptr;
}

extern "C" long mrn_watch_set_deliver(mrn_watch_set_t *set, mrn_death_fn fn, void *arg,
				      uint64_t *drained)
{
	if (!set || !fn || !drained)
		return -EINVAL;
	try {
		std::lock_guard<std::mutex> g(set->deliver);
		const int rc = set->set.drain();
		// Read before the queue is taken: every death found by the
		// drains up to this value is queued already (rule 2's order).
		*drained = rc < 0 ? mrn::load_generation(set->set.generation())
				  : set->set.drained();
		const std::vector<mrn::WatchedRange> dead = set->set.take_dead();
		for (const mrn::WatchedRange &r : dead)
			fn(arg, reinterpret_cast<void *>(r.addr), r.len);
		set->set.delivered(dead);
		return rc < 0 ? rc : static_cast<long>(dead.size());
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" int mrn_watch_set_self_test(mrn_watch_set_t *set, const char **why)
{
	if (!set || !why)
		return -EINVAL;
	const int rc = set->set.self_test(&set->why);
	*why = rc < 0 ? set->why.c_str() : "";
	return rc;
}

extern "C" void mrn_watch_set_fork_prepare(mrn_watch_set_t *set)
{
	if (!set)
		return;
	set->deliver.lock();
	set->set.fork_prepare();
}

extern "C" void mrn_watch_set_fork_parent(mrn_watch_set_t *set)
{
	if (!set)
		return;
	set->set.fork_parent();
	set->deliver.unlock();
}

extern "C" void mrn_watch_set_fork_child(mrn_watch_set_t *set)
{
	if (!set)
		return;
	set->set.fork_child(true);
	set->deliver.unlock();
}

extern "C" int mrn_watch_set_stats(mrn_watch_set_t *set, struct mrn_watch_stats *out,
				   size_t size)
{
	if (!set || !out)
		return -EINVAL;
	const mrn::WatchSetStats s = set->set.stats();
	mrn_watch_stats c{};
	c.holds = s.holds;
	c.shared = s.shared;
	c.hold_failures = s.hold_failures;
	c.releases = s.releases;
	c.released_dirty = s.released_dirty;
	c.drains = s.drains;
	c.drain_failures = s.drain_failures;
	c.deaths = s.deaths;
	c.delivered = s.delivered;
	c.ranges = s.ranges;
	c.watched = s.watched;
	std::memcpy(out, &c, size < sizeof(c) ? size : sizeof(c));
	return 0;
}

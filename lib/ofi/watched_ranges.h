// SPDX-License-Identifier: BSD-3-Clause
//
// libfabric's view of the library's validity service (watch_set.h): the
// ranges its registration caches subscribe, each watched once in the
// kernel however many caches hold it, and the answer to libfabric's
// question on every hit: is this range still backed by the pages that were
// registered (valid)?
//
// libfabric calls subscribe, unsubscribe and valid with its global mm_lock
// held, and its notify takes that lock too, so nothing here may call
// notify. What died is therefore answered in two steps:
//  1. valid() (or the notifier thread) drains the kernel's dirty list; from
//     then on valid() says false for each dead range, whichever cache asks;
//  2. the notifier thread, outside every libfabric lock, takes the dead
//     ranges (take_dead), calls notify for each, so that every cache drops
//     its entries over them, and then reports them done (notified).
// libfabric names ranges, never handles: the set runs with
// WatchSet::Holders::ranges (a failed subscribe is unsubscribed too; before
// libfabric 2.0 nothing is unsubscribed at all).
//
// Thread safety: every member may be called from any thread; valid()
// takes no lock while nothing died.
#ifndef MRN_OFI_WATCHED_RANGES_H
#define MRN_OFI_WATCHED_RANGES_H

#include "monitor.h"
#include "mrnotify-ofi.h"
#include "watch_set.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace mrn::ofi {

using Range = WatchedRange;

class WatchedRanges {
public:
	// max_ranges bounds the table (0: no bound); past it subscribe fails
	// and libfabric registers the range uncached.
	WatchedRanges(std::unique_ptr<Monitor> monitor, size_t max_ranges);
	WatchedRanges(const WatchedRanges &) = delete;
	WatchedRanges &operator=(const WatchedRanges &) = delete;

	// 0, or -ENOSPC (table full) or the kernel's error (-ENOSPC at its
	// cap, -ENOMEM, -EFAULT for an unmapped range).
	int subscribe(uintptr_t addr, size_t len)
	{
		subscribes_.fetch_add(1, std::memory_order_relaxed);
		WatchSet::Handle h;
		return set_.hold(addr, len, &h);
	}
	// Unknown ranges (a failed subscribe of a new range) are ignored.
	void unsubscribe(uintptr_t addr, size_t len)
	{
		unsubscribes_.fetch_add(1, std::memory_order_relaxed);
		(void)set_.release_range(addr, len);
	}

	// The hit path: one load and compare of the kernel's generation, and
	// one of the count of deaths not yet notified.
	bool valid(uintptr_t addr, size_t len) { return set_.valid(addr, len); }

	// Called (under the set's lock: it must not call back) when a drain
	// found deaths that someone must notify.
	void set_on_death(std::function<void()> fn) { set_.set_on_death(std::move(fn)); }

	// Drains the kernel's dirty list; true when deaths wait for notify.
	bool drain()
	{
		(void)set_.drain();
		return !set_.quiet();
	}
	// The last drain failed (a dead device): every held range was reported
	// dead, and valid() refuses every hit until a drain succeeds.
	bool drain_failed() const { return set_.drain_failed(); }
	// The dead ranges to notify (each death once, in order).
	std::vector<Range> take_dead() { return set_.take_dead(); }
	// Those ranges have been notified: every cache dropped them.
	void notified(const std::vector<Range> &done) { set_.delivered(done); }

	// The monitor's descriptor that polls readable while deaths wait.
	int wait_fd() const { return set_.wait_fd(); }

	// A forked child (no notifier thread there): nothing is watched any
	// more and nothing is opened again. prepare/parent around fork().
	void fork_prepare() { set_.fork_prepare(); }
	void fork_parent() { set_.fork_parent(); }
	void fork_child() { set_.fork_child(false); }

	// The counts mrn_ofi_monitor_stats() hands out.
	mrn_ofi_stats stats() const;

private:
	WatchSet set_;
	std::atomic<uint64_t> subscribes_{0}, unsubscribes_{0};
};

} // namespace mrn::ofi

#endif

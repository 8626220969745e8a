// SPDX-License-Identifier: BSD-3-Clause
//
// The ranges libfabric's registration caches asked the imported monitor to
// watch (subscribe), each watched once in the kernel however many caches
// hold it, and the answer to libfabric's question on every hit: is this
// range still backed by the pages that were registered (valid)?
//
// libfabric calls subscribe, unsubscribe and valid with its global mm_lock
// held, and its notify takes that lock too, so nothing here may call
// notify. What died is therefore answered in two steps:
//  1. valid() (or the notifier thread) drains the kernel's dirty list and
//     marks each dead range; from then on valid() says false for it, so
//     no cache can hit on it, whichever cache asks;
//  2. the notifier thread, outside every libfabric lock, takes the dead
//     ranges (take_dead), calls notify for each, so that every cache drops
//     its entries over them, and then reports them done (notified).
// A range can die and be watched again (a cache re-registers it) before
// step 2: valid() stays false for it until every death has been notified,
// because it cannot tell the new entry from an old one in another cache.
//
// Thread safety: every member may be called from any thread; valid()
// takes no lock while nothing died.
#ifndef MRN_OFI_WATCHED_RANGES_H
#define MRN_OFI_WATCHED_RANGES_H

#include "monitor.h"
#include "mrnotify-ofi.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mrn::ofi {

// A range exactly as libfabric names it: its entries' iov.
struct Range {
	uintptr_t addr;
	size_t len;
	bool operator==(const Range &o) const { return addr == o.addr && len == o.len; }
};

struct RangeHash {
	size_t operator()(const Range &r) const
	{
		// Buffers are aligned and lengths repeat: mix both.
		return std::hash<uint64_t>()(r.addr * 0x9e3779b97f4a7c15ULL ^ r.len);
	}
};

class WatchedRanges {
public:
	// max_ranges bounds the table (0: no bound); past it subscribe fails
	// and libfabric registers the range uncached.
	WatchedRanges(Monitor &monitor, size_t max_ranges);
	WatchedRanges(const WatchedRanges &) = delete;
	WatchedRanges &operator=(const WatchedRanges &) = delete;

	// 0, or -ENOSPC (table full) or the kernel's error (-ENOSPC at its
	// cap, -ENOMEM, -EFAULT for an unmapped range).
	int subscribe(uintptr_t addr, size_t len);
	void unsubscribe(uintptr_t addr, size_t len);

	// The hit path: one load and compare of the kernel's generation, and
	// one of the count of deaths not yet notified.
	bool valid(uintptr_t addr, size_t len)
	{
		if (load_generation(generation_) == drained_.load(std::memory_order_acquire) &&
		    undelivered_.load(std::memory_order_acquire) == 0)
			return true;
		return valid_slow(addr, len);
	}

	// Called (under the table's lock: it must not call back) when a drain
	// found deaths that someone must notify.
	void set_on_death(std::function<void()> fn) { on_death_ = std::move(fn); }

	// Drains the kernel's dirty list; true when something died that has
	// not been notified yet.
	bool drain();
	// The last drain failed (a dead device): valid() refuses every hit.
	bool drain_failed() const { return drain_failed_.load(std::memory_order_relaxed); }
	// The dead ranges to notify (each death once, in order).
	std::vector<Range> take_dead();
	// Those ranges have been notified: every cache dropped them.
	void notified(const std::vector<Range> &done);

	// The counts mrn_ofi_monitor_stats() hands out.
	mrn_ofi_stats stats() const;

private:
	struct Record {
		uint64_t watch_id = 0;
		uint64_t cookie = 0;
		uint32_t refs = 0;    // subscribes not unsubscribed
		uint32_t deaths = 0;  // deaths not notified yet
		bool watched = false; // a kernel watch is live for it
	};
	class Sink;

	bool valid_slow(uintptr_t addr, size_t len);
	void drain_locked();
	void died_locked(uint64_t cookie);
	void unwatch_locked(Record &r);

	Monitor &monitor_;
	const uint64_t *const generation_;
	const size_t max_ranges_;

	// Written under mutex_, read without it by valid().
	std::atomic<uint64_t> drained_;        // the generation the last drain reached
	std::atomic<uint64_t> undelivered_{0}; // deaths marked, not yet notified
	std::atomic<bool> drain_failed_{false};

	mutable std::mutex mutex_;
	std::unordered_map<Range, Record, RangeHash> ranges_;
	std::unordered_map<uint64_t, Range> by_cookie_;
	std::vector<Range> dead_; // taken by take_dead()
	std::function<void()> on_death_;
	uint64_t next_cookie_ = 1;
	mrn_ofi_stats stats_{};
};

} // namespace mrn::ofi

#endif

// SPDX-License-Identifier: BSD-3-Clause
//
// The validity service for caches that are not ours (UCX's rcache,
// libfabric's MR cache): the ranges they hold, each watched once in the
// kernel however many caches hold it, and the deaths the kernel reports,
// handed to whoever delivers them to those caches. Its rules:
//  1. One kernel watch per range at a time, counted: the last release
//     removes it; a hold of a range whose watch died makes a new one.
//  2. Each death is reported once, by take_dead(), and the range is not
//     valid from the drain that found it until delivered() says every
//     cache dropped it (a cache that re-registers meanwhile cannot be told
//     from one that did not hear yet).
//  3. After a failed drain nothing is trusted: every held range is
//     reported dead and valid() refuses until a drain succeeds (the
//     kernel keeps what it could not report: nothing is lost).
//  4. A forked child has none of its parent's watches: every range held at
//     fork() is reported dead in the child, handles from before the fork
//     are refused, and the monitor is opened again, once, by the child's
//     first drain (or never, if the adapter says so).
//
// Thread safety: every member may be called from any thread; valid() and
// quiet() take no lock while nothing died. fork_prepare() holds the lock
// across fork() (pthread_atfork), so that the child's copy is consistent.
#ifndef MRN_WATCH_SET_H
#define MRN_WATCH_SET_H

#include "monitor.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mrn {

// A range exactly as the foreign cache names it.
struct WatchedRange {
	uintptr_t addr;
	size_t len;
	bool operator==(const WatchedRange &o) const { return addr == o.addr && len == o.len; }
};

struct WatchedRangeHash {
	size_t operator()(const WatchedRange &r) const
	{
		// Buffers are aligned and lengths repeat: mix both.
		return std::hash<uint64_t>()(r.addr * 0x9e3779b97f4a7c15ULL ^ r.len);
	}
};

struct WatchSetStats {
	uint64_t holds = 0;         // hold() that succeeded
	uint64_t shared = 0;        // ... through a watch that was live already
	uint64_t hold_failures = 0; // hold() refused (table full, the kernel's error)
	uint64_t releases = 0;      // release() of a live handle
	uint64_t released_dirty = 0; // last releases whose watch had died, undrained
	uint64_t drains = 0;        // drains of the monitor
	uint64_t drain_failures = 0;
	uint64_t deaths = 0;        // ranges reported dead (deaths, failed drains, fork)
	uint64_t delivered = 0;     // deaths delivered
	uint64_t valid_slow = 0;    // valid() that took the lock
	uint64_t valid_false = 0;
	uint64_t ranges = 0;        // records now (held, or with deaths to deliver)
	uint64_t watched = 0;       // live kernel watches now
};

class WatchSet {
public:
	// A holder's share of a range: the record's slot in the low 32 bits,
	// the process epoch (moved by fork) above. 0 is never a handle.
	using Handle = uint64_t;
	// Opens the monitor (at construction, and again in a forked child);
	// nullptr with *err set when it cannot.
	using Opener = std::function<std::unique_ptr<Monitor>(int *err, std::string *why)>;

	// How holders let go. handles: each successful hold() is released once
	// (UCX's regions). ranges: the cache names ranges only and releases
	// by range (libfabric's unsubscribe), which changes two things: a
	// failed hold of a range others hold counts as a hold (libfabric 2.x
	// unsubscribes every subscribe, failed or not), and a delivered death
	// ends every hold on a range not watched again since (libfabric
	// before 2.0 never unsubscribes).
	enum class Holders { handles, ranges };

	// max_ranges bounds the records (0: no bound); past it hold() fails
	// with -ENOSPC. *err (optional) is set to the opener's error, and the
	// set then has no monitor: hold() fails with it, quiet() is true.
	WatchSet(Opener opener, size_t max_ranges, int *err = nullptr, std::string *why = nullptr,
		 Holders holders = Holders::handles);
	~WatchSet();
	WatchSet(const WatchSet &) = delete;
	WatchSet &operator=(const WatchSet &) = delete;

	// 0 with *handle set (and *shared: whether the range's watch was live
	// already), or -ENOSPC, -EINVAL, -ENODEV (no monitor) or the kernel's
	// error (-ENOSPC at its cap, -ENOMEM, -EFAULT for an unmapped range).
	int hold(uintptr_t addr, size_t len, Handle *handle, bool *shared = nullptr);
	// Lets go of a handle: 0, 1 when this was the last holder and the
	// watch had died undrained (it will not be reported), or -ESTALE for a
	// handle from before a fork or already released.
	int release(Handle handle);
	// The same by range, for a cache that names ranges only (libfabric's
	// unsubscribe): -ENOENT when nothing holds it.
	int release_range(uintptr_t addr, size_t len);

	// The word the hit path compares with drained(): the monitor's
	// generation, or a word of the set's own while it has no monitor
	// (never moves) or is a forked child that did not reopen yet (never
	// equals drained()). Re-read after each drain: a reopen changes it.
	const uint64_t *generation() const { return word_.load(std::memory_order_acquire); }
	uint64_t drained() const { return drained_.load(std::memory_order_acquire); }
	// Nothing moved since the last drain and nothing waits for delivery.
	bool quiet() const
	{
		return load_generation(generation()) == drained() &&
		       undelivered_.load(std::memory_order_acquire) == 0;
	}
	// The range is held, watched, not dead and the last drain succeeded.
	bool valid(uintptr_t addr, size_t len) { return quiet() || valid_slow(addr, len); }

	// Drains the monitor (opening it again first in a forked child): 0,
	// or the monitor's error (rule 3). Deaths go to the queue.
	int drain();
	// The last drain failed.
	bool drain_failed() const { return drain_failed_.load(std::memory_order_relaxed); }
	// The deaths queued so far, each once, oldest first.
	std::vector<WatchedRange> take_dead();
	// Those deaths reached every cache.
	void delivered(const std::vector<WatchedRange> &done);
	// Called under the set's lock when a drain queued deaths (it must not
	// call back into the set): wakes whoever delivers them.
	void set_on_death(std::function<void()> fn);

	// Watches a scratch page, unmaps it, and checks that the generation
	// moved and a drain reported it: the monitor is not only open but
	// hears unmaps. 0, or -errno with *why.
	int self_test(std::string *why);

	// The monitor's poll descriptor (monitor.h), or -1.
	int wait_fd() const;

	// pthread_atfork: prepare takes the lock, parent and child release it.
	// reopen: whether the child's first drain opens a monitor of its own
	// (else the child has none: hold() fails, quiet() is true once the
	// inherited deaths are delivered).
	void fork_prepare();
	void fork_parent();
	void fork_child(bool reopen);

	WatchSetStats stats() const;

private:
	struct Record {
		WatchedRange range{};
		uint64_t watch_id = 0;
		uint32_t seq = 0;     // watches made for this slot: the cookie's high half
		uint32_t refs = 0;    // handles not released
		uint32_t deaths = 0;  // deaths not delivered yet
		bool watched = false; // a kernel watch is live for it
		bool used = false;    // a record (else on the free list)
		uint32_t next_free = 0;
	};
	class Sink;

	bool valid_slow(uintptr_t addr, size_t len);
	int drain_locked();
	void reopen_locked();
	void died_locked(uint64_t cookie);
	void queue_death_locked(Record &r);
	void queue_every_held_locked();
	Record *record_of_locked(Handle h);
	uint32_t new_slot_locked();
	void free_slot_locked(uint32_t slot);
	void maybe_free_locked(uint32_t slot);
	void release_locked(uint32_t slot);

	const Opener opener_;
	const size_t max_ranges_;
	const Holders holders_;

	mutable std::mutex mutex_;
	std::unique_ptr<Monitor> monitor_;
	int monitor_err_ = 0;
	bool reopen_ = false;
	uint32_t epoch_ = 1;
	std::vector<Record> slots_{1}; // slot 0 is never used
	uint32_t free_ = 0;
	size_t used_ = 0;
	std::unordered_map<WatchedRange, uint32_t, WatchedRangeHash> by_range_;
	std::vector<WatchedRange> dead_;
	std::function<void()> on_death_;
	WatchSetStats stats_{};

	// The words generation() points at when there is no monitor's.
	const uint64_t still_ = 0; // no monitor: equals drained_ (0)
	// A child before its reopen: a value no monitor's word takes (they
	// count up from 0), so that whoever noted it while following this
	// word (UCX's lookup hook) cannot look current against the new one.
	const uint64_t forked_ = UINT64_MAX;

	// Written under mutex_, read without it by the hit paths.
	std::atomic<const uint64_t *> word_{&still_};
	std::atomic<uint64_t> drained_{0};
	std::atomic<uint64_t> undelivered_{0};
	std::atomic<bool> drain_failed_{false};
};

} // namespace mrn

#endif

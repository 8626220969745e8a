// SPDX-License-Identifier: BSD-3-Clause
//
// The queue between memory hooks that report unmaps (Open MPI's patcher)
// and the cache: the external monitor's dirty list. push() runs inside
// free() or munmap() on any thread, or in a signal handler: no lock, no
// allocation. The cache drains it through the generation check, as it
// drains the kernel's list, so that a hook costs the cache nothing until
// its next call.
//
// Only ranges that overlap the span of what was ever watched are queued:
// most unmaps of a process cannot matter to the cache and would only fill
// the queue. A range that finds the queue full is merged into one lost span
// (2 MiB granules, one word, so that merging stays one compare-and-swap):
// an overflow drops the registrations near the lost ranges, not the cache.
#ifndef MRN_HOOK_QUEUE_H
#define MRN_HOOK_QUEUE_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace mrn {

class HookQueue {
public:
	static constexpr size_t kSlots = 1024;

	HookQueue();
	HookQueue(const HookQueue &) = delete;
	HookQueue &operator=(const HookQueue &) = delete;

	// Widens the span reports are filtered by; called before the range's
	// pages are pinned, so that a report the hook makes after it is
	// queued (one made before it took the pages before they were pinned).
	void extend(uintptr_t start, uintptr_t end);

	// Async-signal-safe. Queues [start, start + len) if it overlaps the
	// span; true if it was queued or merged.
	bool push(uintptr_t start, size_t len);

	// The word the cache compares: pushes begun. drain() returns it only
	// once every push begun before it has been reported.
	const uint64_t *generation() const { return &begun_; }

	// Reports each queued range and the lost span, if any, to fn(start,
	// end); returns the generation everything reported corresponds to.
	// While a push is in flight that is a value the word does not hold,
	// so that the next check drains again. One drainer at a time.
	uint64_t drain(const std::function<void(uintptr_t, uintptr_t)> &fn);

	uint64_t queued() const { return queued_.load(std::memory_order_relaxed); }
	uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

private:
	struct Slot {
		std::atomic<uint64_t> seq;
		uintptr_t start;
		size_t len;
	};

	void merge_lost(uintptr_t start, size_t len);
	bool take_lost(uintptr_t *start, uintptr_t *end);
	bool pop(uintptr_t *start, size_t *len);

	// Read on every report: the span, then the counters of pushes.
	std::atomic<uintptr_t> span_lo_{UINTPTR_MAX};
	std::atomic<uintptr_t> span_hi_{0};
	uint64_t begun_ = 0; // atomically, through __atomic: the cache reads it raw
	std::atomic<uint64_t> ended_{0};
	alignas(64) std::atomic<uint64_t> head_{0}; // next ticket of producers
	alignas(64) std::atomic<uint64_t> tail_{0}; // next ticket of the drainer
	std::atomic<uint64_t> lost_{0};             // see kLost* in hook_queue.cc
	std::atomic<uint64_t> queued_{0}, overflows_{0};
	Slot slots_[kSlots];
};

} // namespace mrn

#endif

// SPDX-License-Identifier: BSD-3-Clause
#include "hook_queue.h"

namespace mrn {

namespace {

// The lost span in one word: 2 MiB granule numbers, the first in the low 28
// bits and the end (exclusive) in the next 28, which covers 2^49 bytes of
// address space; beyond that, the end is "everything above". 0: nothing.
constexpr unsigned kLostShift = 21;
constexpr unsigned kLostBits = 28;
constexpr uint64_t kLostMax = (uint64_t(1) << kLostBits) - 1;

} // namespace

HookQueue::HookQueue()
{
	for (uint64_t i = 0; i < kSlots; i++)
		slots_[i].seq.store(i, std::memory_order_relaxed);
}

// The span only grows: lo by compare-and-swap down, hi up.
void HookQueue::extend(uintptr_t start, uintptr_t end)
{
	uintptr_t cur = span_lo_.load(std::memory_order_relaxed);
	while (start < cur && !span_lo_.compare_exchange_weak(cur, start, std::memory_order_seq_cst,
							       std::memory_order_relaxed))
		;
	cur = span_hi_.load(std::memory_order_relaxed);
	while (end > cur && !span_hi_.compare_exchange_weak(cur, end, std::memory_order_seq_cst,
							     std::memory_order_relaxed))
		;
}

void HookQueue::merge_lost(uintptr_t start, size_t len)
{
	const uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
	uint64_t lo = start >> kLostShift;
	uint64_t hi = (end >> kLostShift) + ((end & ((uintptr_t(1) << kLostShift) - 1)) != 0);
	lo = lo > kLostMax ? kLostMax - 1 : lo;
	hi = hi > kLostMax ? kLostMax : hi;
	uint64_t old = lost_.load(std::memory_order_relaxed), merged;
	do {
		uint64_t mlo = lo, mhi = hi;
		if (old) {
			mlo = (old & kLostMax) < mlo ? (old & kLostMax) : mlo;
			mhi = (old >> kLostBits) > mhi ? (old >> kLostBits) : mhi;
		}
		merged = mlo | (mhi << kLostBits);
	} while (!lost_.compare_exchange_weak(old, merged, std::memory_order_release,
					      std::memory_order_relaxed));
}

bool HookQueue::take_lost(uintptr_t *start, uintptr_t *end)
{
	const uint64_t w = lost_.exchange(0, std::memory_order_acq_rel);
	if (!w)
		return false;
	const uint64_t lo = w & kLostMax, hi = w >> kLostBits;
	*start = uintptr_t(lo) << kLostShift;
	*end = hi == kLostMax ? UINTPTR_MAX : uintptr_t(hi) << kLostShift;
	return true;
}

// A bounded multi-producer queue: each slot's sequence says whose turn it
// is (the producer's at its ticket, the drainer's one later).
bool HookQueue::push(uintptr_t start, size_t len)
{
	const uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
	if (len == 0 || end <= span_lo_.load(std::memory_order_seq_cst) ||
	    start >= span_hi_.load(std::memory_order_seq_cst))
		return false;
	// Begun before anything is written: a drain that reads the word after
	// this sees ended_ behind it until the range is in a slot or merged.
	__atomic_fetch_add(&begun_, 1, __ATOMIC_SEQ_CST);
	uint64_t pos = head_.load(std::memory_order_relaxed);
	for (;;) {
		Slot &slot = slots_[pos % kSlots];
		const uint64_t seq = slot.seq.load(std::memory_order_acquire);
		if (seq == pos) {
			if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed,
							std::memory_order_relaxed)) {
				slot.start = start;
				slot.len = len;
				slot.seq.store(pos + 1, std::memory_order_release);
				queued_.fetch_add(1, std::memory_order_relaxed);
				break;
			}
		} else if (seq < pos) {
			// Full: merged, not lost.
			merge_lost(start, len);
			overflows_.fetch_add(1, std::memory_order_relaxed);
			break;
		} else {
			pos = head_.load(std::memory_order_relaxed);
		}
	}
	ended_.fetch_add(1, std::memory_order_seq_cst);
	return true;
}

bool HookQueue::pop(uintptr_t *start, size_t *len)
{
	const uint64_t pos = tail_.load(std::memory_order_relaxed);
	Slot &slot = slots_[pos % kSlots];
	if (slot.seq.load(std::memory_order_acquire) != pos + 1)
		return false;
	*start = slot.start;
	*len = slot.len;
	tail_.store(pos + 1, std::memory_order_relaxed);
	slot.seq.store(pos + kSlots, std::memory_order_release);
	return true;
}

uint64_t HookQueue::drain(const std::function<void(uintptr_t, uintptr_t)> &fn)
{
	// No push begun between the two reads, and every push begun before
	// them ended: everything they queued or merged is visible below.
	const uint64_t begun = __atomic_load_n(&begun_, __ATOMIC_SEQ_CST);
	const bool settled = ended_.load(std::memory_order_seq_cst) == begun &&
			     __atomic_load_n(&begun_, __ATOMIC_SEQ_CST) == begun;
	uintptr_t start, end;
	if (take_lost(&start, &end))
		fn(start, end);
	size_t len;
	while (pop(&start, &len))
		fn(start, start + len < start ? UINTPTR_MAX : start + len);
	return settled ? begun : begun - 1;
}

} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_ENTRY_H
#define MRN_ENTRY_H

#include "debug.h"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mrn {

// One cached registration; the caller's payload follows it in memory.
// Ranges are whole pages: a registration pins whole pages anyway, and page
// alignment makes "overlap" and "shares a page" the same thing.
//
// Reference counts. `refs` counts the users, plus kIndexRef while the entry
// is in the index:
//   indexed, refs == kIndexRef      idle: the cache may evict it
//   indexed, refs >  kIndexRef      in use
//   detached, refs >= 1             in use, never handed out again
//   detached, refs == 0             doomed: deregister and free
// Hits add a reference without the writer mutex (readers are excluded only
// while entries leave the index), so every transition out of "indexed"
// happens with readers excluded. While indexed, `refs` is only part of the
// count: the threads' deltas (RefDeltas) hold the rest, and are folded into
// it when the entry leaves the index.
// 56 bytes, so that with an 8-byte payload (a pointer) an entry fills one
// 64-byte block and its hot fields (range, count, access) share a cache
// line: blocks that straddle lines cost a second miss on random hits.
// EntryPool still hands out 16-byte aligned blocks, which the index needs.
struct alignas(8) Entry {
	enum State : uint8_t {
		kPending,  // being registered, not yet visible to lookups
		kIndexed,  // in the index: lookups can hand it out
		kDetached, // out of the index; freed when the last user puts it
	};
	// Writer-side facts about the entry (under the writer mutex).
	enum Flags : uint8_t {
		kWatched = 1,  // the monitor watches it (unwatch at the end)
		kAdvised = 2,  // its pages were advised MADV_DONTFORK
		kUncached = 4, // never indexed: it lives only while in use
		kSelected = 8, // chosen as an eviction victim in this pass
	};
	static constexpr uint32_t kIndexRef = 1;

	uintptr_t start;
	uintptr_t end;
	std::atomic<uint32_t> refs;
	uint32_t access;
	std::atomic<uint8_t> state;
	// Set when the pages under it changed (monitor or caller): never
	// handed out again, deregistered when the last user puts it.
	std::atomic<bool> invalid;
	// Fork epoch of the cache it was made in (see Cache::owns).
	uint8_t epoch;
	uint8_t flags;
	// When it last became idle (Cache::lru_stamp, which wraps: compare
	// ages, not stamps), for eviction. Written by put() without the writer
	// mutex, hence atomic (relaxed).
	std::atomic<uint32_t> last_use;
	// The monitor's handle (kernel registration id).
	uint64_t watch_id;
	// Intrusive links: the cache's list of live entries outside the index,
	// or (next only) a writer's local list of victims or doomed entries.
	// An entry is on at most one list at a time.
	Entry *prev;
	Entry *next;

	size_t length() const { return end - start; }

	// The one way the state moves after the entry is made pending:
	// Pending -> Indexed -> Detached, or Pending -> Detached (checked in
	// --enable-debug builds). Under the writer mutex.
	void move_to(State to)
	{
		MRN_ASSERT(can_move(static_cast<State>(state.load(std::memory_order_relaxed)), to));
		state.store(to, std::memory_order_relaxed);
	}
	static constexpr bool can_move(State from, State to)
	{
		return (from == kPending && to != kPending) || (from == kIndexed && to == kDetached);
	}
	bool covers(uintptr_t s, uintptr_t e) const { return start <= s && e <= end; }
	bool overlaps(uintptr_t s, uintptr_t e) const { return start < e && s < end; }
	bool has(Flags f) const { return (flags & f) != 0; }
	void *payload() { return reinterpret_cast<unsigned char *>(this) + kPayloadOffset; }
	const void *payload() const
	{
		return reinterpret_cast<const unsigned char *>(this) + kPayloadOffset;
	}
	static Entry *from_payload(void *p)
	{
		return reinterpret_cast<Entry *>(static_cast<unsigned char *>(p) - kPayloadOffset);
	}

	static constexpr size_t kPayloadOffset = 56;
};

static_assert(sizeof(Entry) == Entry::kPayloadOffset, "payload follows the entry");

// A singly linked list through Entry::next: victims found by a drain, or
// entries to deregister. Pushing never allocates.
class EntryStack {
public:
	EntryStack() = default;
	EntryStack(const EntryStack &) = delete;
	EntryStack &operator=(const EntryStack &) = delete;
	bool empty() const { return head_ == nullptr; }
	void push(Entry *x)
	{
		x->next = head_;
		head_ = x;
	}
	Entry *pop()
	{
		Entry *x = head_;
		if (x)
			head_ = x->next;
		return x;
	}

private:
	Entry *head_ = nullptr;
};

// A doubly linked list through Entry::prev/next: the live entries the index
// does not hold (being registered, detached while in use, uncached).
class EntryList {
public:
	EntryList() = default;
	EntryList(const EntryList &) = delete;
	EntryList &operator=(const EntryList &) = delete;
	void insert(Entry *x)
	{
		x->prev = nullptr;
		x->next = head_;
		if (head_)
			head_->prev = x;
		head_ = x;
		size_++;
	}
	void erase(Entry *x)
	{
		MRN_ASSERT(size_ > 0);
		if (x->prev)
			x->prev->next = x->next;
		else
			head_ = x->next;
		if (x->next)
			x->next->prev = x->prev;
		x->prev = x->next = nullptr;
		size_--;
	}
	// fn may erase the entry it is given.
	template <typename Fn>
	void for_each(Fn fn)
	{
		for (Entry *x = head_, *n; x; x = n) {
			n = x->next;
			fn(x);
		}
	}
	size_t size() const { return size_; }
	// Forgets every entry without touching them (a forked child).
	void forget()
	{
		head_ = nullptr;
		size_ = 0;
	}

private:
	Entry *head_ = nullptr;
	size_t size_ = 0;
};

} // namespace mrn

#endif

// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_ENTRY_H
#define MRN_ENTRY_H

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mrn {

// One cached registration; the caller's payload follows it in memory.
// Ranges are whole pages: a registration pins whole pages anyway, and page
// alignment makes "overlap" and "shares a page" the same thing.
struct alignas(16) Entry {
	enum State : uint8_t {
		kPending,	// being registered, not yet visible to lookups
		kIndexed,	// in the index: lookups can hand it out
		kDetached,	// out of the index; freed when the last user puts it
	};

	uintptr_t start;
	uintptr_t end;
	// Users, plus one while indexed: 1 means "idle in the cache".
	std::atomic<uint32_t> refs;
	uint32_t access;
	std::atomic<uint8_t> state;
	// Set when the pages under it changed (monitor or caller): never
	// handed out again, deregistered when the last user puts it.
	std::atomic<bool> invalid;
	// Fork epoch of the cache it was made in: a forked child never
	// deregisters its parent's entries.
	uint8_t epoch;
	// The monitor could not watch it: it is not kept once idle.
	bool untracked;
	uint32_t reserved;
	// When it last became idle (tick), for LRU eviction.
	uint64_t last_use;
	// The monitor's handle (kernel registration id).
	uint64_t track_id;

	size_t length() const { return end - start; }
	bool covers(uintptr_t s, uintptr_t e) const { return start <= s && e <= end; }
	bool overlaps(uintptr_t s, uintptr_t e) const { return start < e && s < end; }
	void *payload() { return reinterpret_cast<unsigned char *>(this) + kPayloadOffset; }
	const void *payload() const
	{
		return reinterpret_cast<const unsigned char *>(this) + kPayloadOffset;
	}
	static Entry *from_payload(void *p)
	{
		return reinterpret_cast<Entry *>(static_cast<unsigned char *>(p) - kPayloadOffset);
	}

	static constexpr size_t kPayloadOffset = 48;
};

static_assert(sizeof(Entry) == Entry::kPayloadOffset, "payload follows the entry");

} // namespace mrn

#endif

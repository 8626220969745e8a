// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_ENTRY_POOL_H
#define MRN_ENTRY_POOL_H

#include "big_array.h"
#include "entry.h"

#include <cstddef>
#include <vector>

namespace mrn {

// Fixed-size blocks for entries plus payload, carved from large slabs: no
// per-allocation header, and no trip to malloc on a miss. Not thread safe;
// the cache calls it under its writer mutex.
class EntryPool {
public:
	explicit EntryPool(size_t payload_size);
	EntryPool(const EntryPool &) = delete;
	EntryPool &operator=(const EntryPool &) = delete;

	// A zeroed block, or nullptr when memory is exhausted.
	Entry *allocate();
	void release(Entry *e);

	size_t block_size() const { return block_; }
	static size_t block_size_for(size_t payload_size)
	{
		return (sizeof(Entry) + payload_size + 15) & ~size_t(15);
	}
	size_t blocks_in_use() const { return in_use_; }
	size_t bytes_reserved() const { return reserved_; }

	// After fork the child forgets its parent's blocks (they stay mapped:
	// the child may still hold pointers to them).
	void abandon();

private:
	// Slabs double from 64 KiB to 2 MiB (huge-page advised): small caches
	// stay small, large ones get few TLB entries.
	static constexpr size_t kFirstSlab = 64 * 1024;

	struct FreeBlock {
		FreeBlock *next;
	};

	size_t block_;
	std::vector<BigArray> slabs_;
	std::vector<BigArray> abandoned_;
	FreeBlock *free_ = nullptr;
	unsigned char *bump_ = nullptr; // unused tail of the newest slab
	unsigned char *bump_end_ = nullptr;
	size_t in_use_ = 0;
	size_t reserved_ = 0;
};

} // namespace mrn

#endif

// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_ENTRY_POOL_H
#define MRN_ENTRY_POOL_H

#include "entry.h"

#include <cstddef>
#include <memory>
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
	size_t blocks_in_use() const { return in_use_; }
	size_t bytes_reserved() const { return slabs_.size() * kSlabBytes; }

	// After fork the child forgets its parent's blocks (they stay mapped:
	// the child may still hold pointers to them).
	void abandon();

private:
	static constexpr size_t kSlabBytes = 256 * 1024;

	struct FreeBlock {
		FreeBlock *next;
	};

	size_t block_;
	std::vector<std::unique_ptr<unsigned char[]>> slabs_;
	std::vector<std::unique_ptr<unsigned char[]>> abandoned_;
	FreeBlock *free_ = nullptr;
	size_t in_use_ = 0;
};

} // namespace mrn

#endif

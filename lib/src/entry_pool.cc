// SPDX-License-Identifier: BSD-3-Clause
#include "entry_pool.h"

#include "range_index.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace mrn {


EntryPool::EntryPool(size_t payload_size) : block_(block_size_for(payload_size)) {}

Entry *EntryPool::allocate()
{
	void *b = nullptr;
	if (free_) {
		b = free_;
		free_ = free_->next;
		std::memset(b, 0, block_);
	} else {
		if (bump_ + block_ > bump_end_) {
			const size_t bytes = slabs_.empty() ? kFirstSlab
							    : std::min(slabs_.back().size() * 2,
								       BigArray::kHuge);
			try {
				slabs_.emplace_back(std::max(bytes, block_));
			} catch (const std::bad_alloc &) {
				return nullptr;
			}
			reserved_ += slabs_.back().size();
			bump_ = static_cast<unsigned char *>(slabs_.back().data());
			bump_end_ = bump_ + slabs_.back().size();
		}
		b = bump_; // fresh mmap'ed memory is already zero
		// The index packs entry pointers into 44 bits (range_index.h).
		if (reinterpret_cast<uintptr_t>(bump_ + block_) > RangeIndex::kAddressLimit)
			return nullptr;
		bump_ += block_;
	}
	in_use_++;
	return new (b) Entry{};
}

void EntryPool::release(Entry *e)
{
	e->~Entry();
	auto *b = reinterpret_cast<FreeBlock *>(e);
	b->next = free_;
	free_ = b;
	in_use_--;
}

void EntryPool::abandon()
{
	for (auto &s : slabs_)
		abandoned_.push_back(std::move(s));
	slabs_.clear();
	free_ = nullptr;
	bump_ = bump_end_ = nullptr;
	in_use_ = 0;
	reserved_ = 0;
}

} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
#include "entry_pool.h"

#include <cstring>
#include <new>

namespace mrn {

namespace {
constexpr size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
} // namespace

EntryPool::EntryPool(size_t payload_size) : block_(round_up(sizeof(Entry) + payload_size, 16)) {}

Entry *EntryPool::allocate()
{
	if (!free_) {
		std::unique_ptr<unsigned char[]> slab;
		try {
			slab = std::make_unique<unsigned char[]>(kSlabBytes);
		} catch (const std::bad_alloc &) {
			return nullptr;
		}
		const size_t n = kSlabBytes / block_;
		for (size_t i = n; i-- > 0;) {
			auto *b = reinterpret_cast<FreeBlock *>(slab.get() + i * block_);
			b->next = free_;
			free_ = b;
		}
		slabs_.push_back(std::move(slab));
	}
	FreeBlock *b = free_;
	free_ = b->next;
	in_use_++;
	std::memset(static_cast<void *>(b), 0, block_);
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
	in_use_ = 0;
}

} // namespace mrn

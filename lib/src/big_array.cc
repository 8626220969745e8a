// SPDX-License-Identifier: BSD-3-Clause
#include "big_array.h"

#include <cstdint>

namespace mrn {

BigArray::BigArray(size_t bytes)
{
	if (bytes == 0)
		return;
	const bool huge = bytes >= kHuge;
	const size_t len = huge ? bytes + kHuge : bytes;
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		throw std::bad_alloc();
	map_ = p;
	map_len_ = len;
	uintptr_t a = reinterpret_cast<uintptr_t>(p);
	if (huge) {
		a = (a + kHuge - 1) & ~(kHuge - 1);
		(void)madvise(reinterpret_cast<void *>(a), bytes, MADV_HUGEPAGE);
	}
	data_ = reinterpret_cast<void *>(a);
	bytes_ = bytes;
}

BigArray::~BigArray()
{
	if (map_)
		munmap(map_, map_len_);
}

BigArray &BigArray::operator=(BigArray &&o) noexcept
{
	if (this != &o) {
		if (map_)
			munmap(map_, map_len_);
		map_ = std::exchange(o.map_, nullptr);
		map_len_ = std::exchange(o.map_len_, 0);
		data_ = std::exchange(o.data_, nullptr);
		bytes_ = std::exchange(o.bytes_, 0);
	}
	return *this;
}

} // namespace mrn

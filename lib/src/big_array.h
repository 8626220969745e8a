// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_BIG_ARRAY_H
#define MRN_BIG_ARRAY_H

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <utility>

namespace mrn {

// Zeroed memory from mmap. Arrays of 2 MiB and more are aligned to 2 MiB
// and advised MADV_HUGEPAGE: the index and the entry slabs are read at
// random on hits, and with 4 KiB pages a large cache would pay a TLB miss
// on top of each cache miss.
class BigArray {
public:
	static constexpr size_t kHuge = size_t(2) << 20;

	BigArray() = default;
	explicit BigArray(size_t bytes);
	~BigArray();
	BigArray(BigArray &&o) noexcept { *this = std::move(o); }
	BigArray &operator=(BigArray &&o) noexcept;
	BigArray(const BigArray &) = delete;
	BigArray &operator=(const BigArray &) = delete;

	void *data() const { return data_; }
	size_t size() const { return bytes_; }

private:
	void *map_ = nullptr;
	size_t map_len_ = 0;
	void *data_ = nullptr;
	size_t bytes_ = 0;
};

} // namespace mrn

#endif

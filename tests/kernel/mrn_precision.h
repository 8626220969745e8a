// SPDX-License-Identifier: GPL-2.0
// Helpers for the tests that compare frames before and after an operation:
// registrations per page, frames from pagemap, a real THP, and the count of
// lost invalidations (a frame changed under a registration never drained).
#ifndef MRN_PRECISION_H
#define MRN_PRECISION_H

#include <gtest/gtest.h>

#include "mrn_test_util.h"

namespace mrn {

using Ids = std::set<uint64_t>;

// One registration per page of [base, base + n pages); cookie = page index.
inline std::vector<uint64_t> reg_pages(const mrn::Ctx &c, char *base, int n)
{
	std::vector<uint64_t> ids;
	for (int i = 0; i < n; i++) {
		int64_t id = c.reg(base + i * page_size(), page_size(), static_cast<uint64_t>(i));
		EXPECT_GT(id, 0);
		ids.push_back(static_cast<uint64_t>(id));
	}
	return ids;
}

constexpr size_t kHuge = 2u << 20;

// A 2 MiB-aligned anonymous THP, populated; nullptr if THP is unavailable.
class Thp {
public:
	Thp()
	{
		raw_ = static_cast<char *>(mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE,
						MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		if (raw_ == MAP_FAILED) {
			raw_ = nullptr;
			return;
		}
		char *a = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw_) + kHuge - 1) &
						   ~(kHuge - 1));
		if (madvise(a, kHuge, MADV_HUGEPAGE) != 0)
			return;
		memset(a, 0x11, kHuge);
		if (mrn::smaps_kb(a, "AnonHugePages") >= 2048)
			p_ = a;
	}
	~Thp()
	{
		if (raw_)
			munmap(raw_, 2 * kHuge);
	}
	char *get() const { return p_; }

private:
	char *raw_ = nullptr;
	char *p_ = nullptr;
};

// The frame of each page of [p, p + n pages).
inline std::vector<uint64_t> pfns(const char *p, int n)
{
	std::vector<uint64_t> v;
	for (int i = 0; i < n; i++)
		v.push_back(mrn::pfn_of(p + i * page_size()));
	return v;
}

// Registrations whose page changed frame must all be among the drained:
// a changed frame with a clean registration is a lost invalidation.
inline long lost_invalidations(const std::vector<uint64_t> &before, const std::vector<uint64_t> &after,
			const std::vector<uint64_t> &ids, const Ids &drained)
{
	long lost = 0;
	for (size_t i = 0; i < ids.size(); i++)
		if (before[i] != after[i] && !drained.count(ids[i]))
			lost++;
	return lost;
}

// Pages whose frame changed: what an invalidation was really needed for.
inline long pages_replaced(const std::vector<uint64_t> &before, const std::vector<uint64_t> &after)
{
	long moved = 0;
	for (size_t i = 0; i < before.size() && i < after.size(); i++)
		moved += before[i] != after[i];
	return moved;
}

} // namespace mrn

#endif

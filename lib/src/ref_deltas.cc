// SPDX-License-Identifier: BSD-3-Clause
#include "ref_deltas.h"

#include <cstring>

namespace mrn {

int32_t RefDeltas::sum(const Entry *x) const
{
	int32_t n = 0;
	const unsigned threads = ReaderRecords::high_water();
	for (unsigned t = 0; t < threads; t++) {
		const Slot &s = slot(t, x);
		if (s.entry.load(std::memory_order_relaxed) == x)
			n += s.delta.load(std::memory_order_relaxed);
	}
	return n;
}

uint32_t RefDeltas::youngest_age(const Entry *x, uint32_t now, uint32_t age) const
{
	const unsigned threads = ReaderRecords::high_water();
	for (unsigned t = 0; t < threads; t++) {
		const Slot &s = slot(t, x);
		if (s.entry.load(std::memory_order_relaxed) != x)
			continue;
		const uint32_t a = now - s.stamp.load(std::memory_order_relaxed);
		if (a < age)
			age = a;
	}
	return age;
}

void RefDeltas::fold(Entry *x)
{
	const unsigned threads = ReaderRecords::high_water();
	for (unsigned t = 0; t < threads; t++) {
		Slot &s = slot(t, x);
		if (s.entry.load(std::memory_order_relaxed) != x)
			continue;
		x->refs.fetch_add(uint32_t(s.delta.load(std::memory_order_relaxed)),
				  std::memory_order_relaxed);
		write_back(s, x);
		s.entry.store(nullptr, std::memory_order_relaxed);
		s.delta.store(0, std::memory_order_relaxed);
	}
}

void RefDeltas::clear()
{
	const unsigned threads = ReaderRecords::high_water();
	Slot *slots = static_cast<Slot *>(table_.data());
	for (size_t i = 0; i < size_t(threads) * kSlotsPerThread; i++) {
		slots[i].entry.store(nullptr, std::memory_order_relaxed);
		slots[i].delta.store(0, std::memory_order_relaxed);
	}
}

} // namespace mrn

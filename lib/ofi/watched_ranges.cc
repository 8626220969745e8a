// SPDX-License-Identifier: BSD-3-Clause
#include "watched_ranges.h"

#include <cerrno>
#include <utility>

namespace mrn::ofi {

namespace {

// The set opens its monitor once, at construction: a forked child never
// reopens (it has no notifier thread).
WatchSet::Opener once(std::unique_ptr<Monitor> monitor)
{
	auto held = std::make_shared<std::unique_ptr<Monitor>>(std::move(monitor));
	return [held](int *err, std::string *) {
		if (!*held)
			*err = -ENODEV;
		return std::move(*held);
	};
}

} // namespace

WatchedRanges::WatchedRanges(std::unique_ptr<Monitor> monitor, size_t max_ranges)
    : set_(once(std::move(monitor)), max_ranges, nullptr, nullptr, WatchSet::Holders::ranges)
{}

mrn_ofi_stats WatchedRanges::stats() const
{
	const WatchSetStats s = set_.stats();
	mrn_ofi_stats o{};
	o.subscribes = subscribes_.load(std::memory_order_relaxed);
	o.unsubscribes = unsubscribes_.load(std::memory_order_relaxed);
	o.valid_slow = s.valid_slow;
	o.valid_false = s.valid_false;
	o.deaths = s.deaths;
	o.notified = s.delivered;
	o.ranges = s.ranges;
	o.watched = s.watched;
	return o;
}

} // namespace mrn::ofi

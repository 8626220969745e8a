// SPDX-License-Identifier: BSD-3-Clause
#include "watched_ranges.h"

#include <unistd.h>

#include <cerrno>

namespace mrn::ofi {

namespace {

uintptr_t page_size()
{
	static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
	return size;
}

} // namespace

// Hands each registration the kernel reports back to the table.
class WatchedRanges::Sink final : public InvalidationSink {
public:
	explicit Sink(WatchedRanges &t) : t_(t) {}
	void invalidate_cookie(uint64_t cookie, uint64_t, uintptr_t, uintptr_t) override
	{
		t_.died_locked(cookie);
	}
	// The kernel monitor names registrations, never bare ranges.
	void invalidate_range(uintptr_t, uintptr_t) override {}

private:
	WatchedRanges &t_;
};

WatchedRanges::WatchedRanges(Monitor &monitor, size_t max_ranges)
    : monitor_(monitor), generation_(monitor.generation()), max_ranges_(max_ranges),
      drained_(load_generation(monitor.generation()))
{}

int WatchedRanges::subscribe(uintptr_t addr, size_t len)
{
	const Range key{addr, len};
	if (len == 0 || addr + len < addr)
		return -EINVAL;
	std::lock_guard<std::mutex> g(mutex_);
	stats_.subscribes++;
	drain_locked();
	auto [it, inserted] = ranges_.try_emplace(key);
	Record &r = it->second;
	if (inserted && max_ranges_ && ranges_.size() > max_ranges_) {
		ranges_.erase(it);
		return -ENOSPC;
	}
	if (!r.watched) {
		const uintptr_t mask = page_size() - 1;
		const uint64_t cookie = next_cookie_++;
		const int rc = monitor_.watch(addr & ~mask, (addr + len + mask) & ~mask, cookie,
					      &r.watch_id);
		if (rc < 0) {
			// libfabric 2.x unsubscribes right after a failed
			// subscribe: count it, so that the unsubscribe does not
			// take a reference another cache's entry holds. A new
			// record has no other holder: drop it.
			if (inserted)
				ranges_.erase(it);
			else
				r.refs++;
			return rc;
		}
		r.cookie = cookie;
		r.watched = true;
		by_cookie_.emplace(cookie, key);
	}
	r.refs++;
	return 0;
}

void WatchedRanges::unwatch_locked(Record &r)
{
	// 1: it had died and was not drained yet; it will never be reported,
	// and with no subscriber left nothing needs to hear of it.
	(void)monitor_.unwatch(r.watch_id);
	by_cookie_.erase(r.cookie);
	r.watched = false;
}

void WatchedRanges::unsubscribe(uintptr_t addr, size_t len)
{
	std::lock_guard<std::mutex> g(mutex_);
	stats_.unsubscribes++;
	auto it = ranges_.find(Range{addr, len});
	// Unknown: a subscribe that failed on a new range.
	if (it == ranges_.end())
		return;
	Record &r = it->second;
	if (r.refs > 0)
		r.refs--;
	if (r.refs > 0)
		return;
	if (r.watched)
		unwatch_locked(r);
	if (r.deaths == 0)
		ranges_.erase(it);
}

void WatchedRanges::died_locked(uint64_t cookie)
{
	auto c = by_cookie_.find(cookie);
	if (c == by_cookie_.end())
		return;
	const Range key = c->second;
	by_cookie_.erase(c);
	Record &r = ranges_.at(key);
	r.watched = false;
	r.deaths++;
	stats_.deaths++;
	dead_.push_back(key);
	undelivered_.fetch_add(1, std::memory_order_relaxed);
}

void WatchedRanges::drain_locked()
{
	if (load_generation(generation_) == drained_.load(std::memory_order_relaxed))
		return;
	Sink sink(*this);
	const size_t dead_before = dead_.size();
	uint64_t gen;
	// A failed drain (it cannot fail but on a dead device) leaves drained_
	// behind the generation: valid() keeps asking, and says false.
	const bool failed = monitor_.drain(sink, &gen) != 0;
	if (!failed)
		drained_.store(gen, std::memory_order_release);
	drain_failed_.store(failed, std::memory_order_relaxed);
	if (dead_.size() > dead_before && on_death_)
		on_death_();
}

bool WatchedRanges::valid_slow(uintptr_t addr, size_t len)
{
	std::lock_guard<std::mutex> g(mutex_);
	stats_.valid_slow++;
	drain_locked();
	auto it = ranges_.find(Range{addr, len});
	const bool ok = it != ranges_.end() && it->second.watched && it->second.deaths == 0 &&
			load_generation(generation_) == drained_.load(std::memory_order_relaxed);
	if (!ok)
		stats_.valid_false++;
	return ok;
}

bool WatchedRanges::drain()
{
	std::lock_guard<std::mutex> g(mutex_);
	drain_locked();
	return !dead_.empty();
}

std::vector<Range> WatchedRanges::take_dead()
{
	std::lock_guard<std::mutex> g(mutex_);
	std::vector<Range> out;
	out.swap(dead_);
	return out;
}

void WatchedRanges::notified(const std::vector<Range> &done)
{
	std::lock_guard<std::mutex> g(mutex_);
	for (const Range &key : done) {
		auto it = ranges_.find(key);
		if (it == ranges_.end() || it->second.deaths == 0)
			continue;
		Record &r = it->second;
		r.deaths--;
		stats_.notified++;
		undelivered_.fetch_sub(1, std::memory_order_release);
		// Not watched again since: every entry over it is gone, whatever
		// refs says (libfabric before 2.0 never unsubscribes).
		if (r.deaths == 0 && !r.watched)
			ranges_.erase(it);
	}
}

mrn_ofi_stats WatchedRanges::stats() const
{
	std::lock_guard<std::mutex> g(mutex_);
	mrn_ofi_stats s = stats_;
	s.ranges = ranges_.size();
	s.watched = by_cookie_.size();
	return s;
}

} // namespace mrn::ofi

// SPDX-License-Identifier: BSD-3-Clause
#include "watch_set.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace mrn {

namespace {

uintptr_t page_size()
{
	static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
	return size;
}

constexpr uint64_t cookie_of(uint32_t slot, uint32_t seq)
{
	return static_cast<uint64_t>(seq) << 32 | slot;
}

} // namespace

// Hands each registration the kernel reports back to the set.
class WatchSet::Sink final : public InvalidationSink {
public:
	explicit Sink(WatchSet &s) : s_(s) {}
	void invalidate_cookie(uint64_t cookie, uint64_t, uintptr_t, uintptr_t) override
	{
		s_.died_locked(cookie);
	}
	// A monitor that names bare ranges (uffd) cannot say which watch
	// died: trust nothing.
	void invalidate_range(uintptr_t, uintptr_t) override { s_.queue_every_held_locked(); }

private:
	WatchSet &s_;
};

WatchSet::WatchSet(Opener opener, size_t max_ranges, int *err, std::string *why, Holders holders)
    : opener_(std::move(opener)), max_ranges_(max_ranges), holders_(holders)
{
	std::string reason;
	monitor_ = opener_(&monitor_err_, &reason);
	if (monitor_) {
		monitor_err_ = 0;
		word_.store(monitor_->generation(), std::memory_order_release);
		drained_.store(load_generation(monitor_->generation()), std::memory_order_release);
	} else if (monitor_err_ == 0) {
		monitor_err_ = -ENODEV;
	}
	if (err)
		*err = monitor_err_;
	if (why)
		*why = std::move(reason);
}

WatchSet::~WatchSet() = default;

WatchSet::Record *WatchSet::record_of_locked(Handle h)
{
	const auto slot = static_cast<uint32_t>(h);
	if (static_cast<uint32_t>(h >> 32) != epoch_ || slot == 0 || slot >= slots_.size())
		return nullptr;
	Record &r = slots_[slot];
	return r.used && r.refs > 0 ? &r : nullptr;
}

uint32_t WatchSet::new_slot_locked()
{
	uint32_t slot;
	if (free_ != 0) {
		slot = free_;
		free_ = slots_[slot].next_free;
	} else {
		slot = static_cast<uint32_t>(slots_.size());
		slots_.emplace_back();
	}
	const uint32_t seq = slots_[slot].seq;
	slots_[slot] = Record{};
	slots_[slot].seq = seq; // a reused slot's cookies stay new
	slots_[slot].used = true;
	used_++;
	return slot;
}

void WatchSet::free_slot_locked(uint32_t slot)
{
	Record &r = slots_[slot];
	by_range_.erase(r.range);
	r.used = false;
	r.next_free = free_;
	free_ = slot;
	used_--;
}

// A record lives while someone holds it or a death waits for delivery.
void WatchSet::maybe_free_locked(uint32_t slot)
{
	const Record &r = slots_[slot];
	if (r.refs == 0 && r.deaths == 0 && !r.watched)
		free_slot_locked(slot);
}

int WatchSet::hold(uintptr_t addr, size_t len, Handle *handle, bool *shared)
{
	if (!handle || len == 0 || addr + len < addr)
		return -EINVAL;
	const WatchedRange key{addr, len};
	std::lock_guard<std::mutex> g(mutex_);
	(void)drain_locked();
	if (!monitor_) {
		stats_.hold_failures++;
		return monitor_err_ ? monitor_err_ : -ENODEV;
	}
	uint32_t slot;
	auto it = by_range_.find(key);
	const bool inserted = it == by_range_.end();
	if (inserted) {
		if (max_ranges_ && used_ >= max_ranges_) {
			stats_.hold_failures++;
			return -ENOSPC;
		}
		slot = new_slot_locked();
		slots_[slot].range = key;
		by_range_.emplace(key, slot);
	} else {
		slot = it->second;
	}
	Record &r = slots_[slot];
	const bool was_live = r.watched;
	if (!r.watched) {
		const uintptr_t mask = page_size() - 1;
		const uint64_t cookie = cookie_of(slot, ++r.seq);
		const int rc = monitor_->watch(addr & ~mask, (addr + len + mask) & ~mask, cookie,
					       &r.watch_id);
		if (rc < 0) {
			stats_.hold_failures++;
			// Its release will come: it must not take another's hold.
			if (holders_ == Holders::ranges && r.refs > 0)
				r.refs++;
			maybe_free_locked(slot);
			return rc;
		}
		r.watched = true;
	}
	r.refs++;
	stats_.holds++;
	if (was_live)
		stats_.shared++;
	if (shared)
		*shared = was_live;
	*handle = static_cast<Handle>(epoch_) << 32 | slot;
	return 0;
}

void WatchSet::release_locked(uint32_t slot)
{
	Record &r = slots_[slot];
	stats_.releases++;
	if (--r.refs > 0)
		return;
	if (r.watched) {
		// 1: it had died and was not drained yet; it will never be
		// reported, and with no holder left nobody needs to hear of it.
		if (monitor_ && monitor_->unwatch(r.watch_id) == 1)
			stats_.released_dirty++;
		r.watched = false;
	}
	maybe_free_locked(slot);
}

int WatchSet::release(Handle handle)
{
	std::lock_guard<std::mutex> g(mutex_);
	if (!record_of_locked(handle))
		return -ESTALE;
	const uint64_t dirty_before = stats_.released_dirty;
	release_locked(static_cast<uint32_t>(handle));
	return stats_.released_dirty != dirty_before ? 1 : 0;
}

int WatchSet::release_range(uintptr_t addr, size_t len)
{
	std::lock_guard<std::mutex> g(mutex_);
	auto it = by_range_.find(WatchedRange{addr, len});
	if (it == by_range_.end() || slots_[it->second].refs == 0)
		return -ENOENT;
	const uint64_t dirty_before = stats_.released_dirty;
	release_locked(it->second);
	return stats_.released_dirty != dirty_before ? 1 : 0;
}

void WatchSet::queue_death_locked(Record &r)
{
	r.deaths++;
	stats_.deaths++;
	dead_.push_back(r.range);
	undelivered_.fetch_add(1, std::memory_order_relaxed);
}

void WatchSet::died_locked(uint64_t cookie)
{
	const auto slot = static_cast<uint32_t>(cookie);
	if (slot == 0 || slot >= slots_.size())
		return;
	Record &r = slots_[slot];
	// An older watch of a reused slot (removed as dirty, never reported)
	// is not this one.
	if (!r.used || !r.watched || cookie != cookie_of(slot, r.seq))
		return;
	r.watched = false;
	queue_death_locked(r);
}

// A range whose death is queued already is delivered anyway: queued once,
// so that drains failing on every hit do not grow the queue.
void WatchSet::queue_every_held_locked()
{
	for (uint32_t s = 1; s < slots_.size(); s++) {
		if (slots_[s].used && slots_[s].refs > 0 && slots_[s].deaths == 0)
			queue_death_locked(slots_[s]);
	}
}

void WatchSet::reopen_locked()
{
	reopen_ = false;
	std::string why;
	monitor_ = opener_(&monitor_err_, &why);
	if (monitor_) {
		monitor_err_ = 0;
		drained_.store(load_generation(monitor_->generation()), std::memory_order_release);
		word_.store(monitor_->generation(), std::memory_order_release);
	} else {
		if (monitor_err_ == 0)
			monitor_err_ = -ENODEV;
		drained_.store(0, std::memory_order_release);
		word_.store(&still_, std::memory_order_release);
	}
}

int WatchSet::drain_locked()
{
	if (reopen_)
		reopen_locked();
	if (!monitor_ || load_generation(generation()) == drained_.load(std::memory_order_relaxed))
		return 0;
	const size_t dead_before = dead_.size();
	Sink sink(*this);
	uint64_t gen;
	stats_.drains++;
	const int rc = monitor_->drain(sink, &gen);
	if (rc == 0) {
		drained_.store(gen, std::memory_order_release);
		drain_failed_.store(false, std::memory_order_relaxed);
	} else {
		// drained_ stays behind: the next check drains again.
		stats_.drain_failures++;
		drain_failed_.store(true, std::memory_order_relaxed);
		queue_every_held_locked();
	}
	if (dead_.size() > dead_before && on_death_)
		on_death_();
	return rc;
}

int WatchSet::drain()
{
	std::lock_guard<std::mutex> g(mutex_);
	return drain_locked();
}

bool WatchSet::valid_slow(uintptr_t addr, size_t len)
{
	std::lock_guard<std::mutex> g(mutex_);
	stats_.valid_slow++;
	(void)drain_locked();
	auto it = by_range_.find(WatchedRange{addr, len});
	const bool ok = it != by_range_.end() && slots_[it->second].watched &&
			slots_[it->second].deaths == 0 && !drain_failed_.load(std::memory_order_relaxed) &&
			load_generation(generation()) == drained_.load(std::memory_order_relaxed);
	if (!ok)
		stats_.valid_false++;
	return ok;
}

std::vector<WatchedRange> WatchSet::take_dead()
{
	std::lock_guard<std::mutex> g(mutex_);
	std::vector<WatchedRange> out;
	out.swap(dead_);
	return out;
}

void WatchSet::delivered(const std::vector<WatchedRange> &done)
{
	std::lock_guard<std::mutex> g(mutex_);
	for (const WatchedRange &key : done) {
		// Counted whether or not the record is still there: a fork
		// empties the table but not the queue of what the child must
		// deliver.
		undelivered_.fetch_sub(1, std::memory_order_release);
		stats_.delivered++;
		auto it = by_range_.find(key);
		if (it == by_range_.end() || slots_[it->second].deaths == 0)
			continue;
		Record &r = slots_[it->second];
		r.deaths--;
		// Every entry over it is gone, whatever refs says.
		if (holders_ == Holders::ranges && r.deaths == 0 && !r.watched)
			r.refs = 0;
		maybe_free_locked(it->second);
	}
}

void WatchSet::set_on_death(std::function<void()> fn)
{
	std::lock_guard<std::mutex> g(mutex_);
	on_death_ = std::move(fn);
}

int WatchSet::self_test(std::string *why)
{
	const size_t page = page_size();
	void *p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		*why = "mmap of a scratch page failed";
		return -errno;
	}
	static_cast<char *>(p)[0] = 1;
	const auto addr = reinterpret_cast<uintptr_t>(p);
	Handle h;
	int rc = hold(addr, page, &h);
	if (rc < 0) {
		munmap(p, page);
		*why = "watching a scratch page failed";
		return rc;
	}
	uint64_t deaths_before;
	{
		std::lock_guard<std::mutex> g(mutex_);
		deaths_before = slots_[static_cast<uint32_t>(h)].deaths;
	}
	const uint64_t before = drained();
	munmap(p, page);
	rc = 0;
	if (load_generation(generation()) == before) {
		*why = "munmap of a watched page did not move the generation";
		rc = -EPROTO;
	}
	(void)drain();
	{
		std::lock_guard<std::mutex> g(mutex_);
		if (rc == 0 && slots_[static_cast<uint32_t>(h)].deaths == deaths_before) {
			*why = "munmap of a watched page was not reported by a drain";
			rc = -EPROTO;
		}
	}
	(void)release(h);
	return rc;
}

int WatchSet::wait_fd() const
{
	std::lock_guard<std::mutex> g(mutex_);
	return monitor_ ? monitor_->wait_fd() : -1;
}

void WatchSet::fork_prepare()
{
	mutex_.lock();
}

void WatchSet::fork_parent()
{
	mutex_.unlock();
}

// The child of a possibly threaded parent: no allocation beyond the
// queue's, no syscall on the parent's context.
void WatchSet::fork_child(bool reopen)
{
	// Every range held at fork() was the parent's watch: dead here.
	queue_every_held_locked();
	if (monitor_) {
		// Let go of, not destroyed (as the cache's check_fork does):
		// its destructor would act on the parent's state.
		monitor_->abandon_after_fork();
		(void)monitor_.release();
	}
	monitor_err_ = -ENODEV;
	for (uint32_t s = 1; s < slots_.size(); s++)
		slots_[s] = Record{};
	slots_.resize(1);
	free_ = 0;
	used_ = 0;
	by_range_.clear();
	epoch_++;
	reopen_ = reopen;
	drain_failed_.store(false, std::memory_order_relaxed);
	drained_.store(0, std::memory_order_release);
	word_.store(reopen ? &forked_ : &still_, std::memory_order_release);
	mutex_.unlock();
}

WatchSetStats WatchSet::stats() const
{
	std::lock_guard<std::mutex> g(mutex_);
	WatchSetStats s = stats_;
	s.ranges = used_;
	s.watched = 0;
	for (uint32_t i = 1; i < slots_.size(); i++)
		s.watched += slots_[i].used && slots_[i].watched;
	return s;
}

} // namespace mrn

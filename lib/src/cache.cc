// SPDX-License-Identifier: BSD-3-Clause
#include "cache.h"

#include "log.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace mrn {

namespace {

// The next get() after a fork must take the slow path: no generation the
// cache has seen equals this.
const uint64_t kForkedGeneration = UINT64_MAX;

// A registration that keeps racing unmaps of its own range gives up after
// this many tries (the memory is being unmapped as fast as we pin it).
constexpr int kMaxRaceRetries = 16;

unsigned page_shift()
{
	return unsigned(__builtin_ctzl(static_cast<unsigned long>(sysconf(_SC_PAGESIZE))));
}

} // namespace

Cache::Cache(Key, const mrn_config &c, MonitorFactory open)
	: name_(c.name ? c.name : "mrnotify"), reg_(c.reg), dereg_(c.dereg), context_(c.context),
	  payload_size_(c.payload_size), leave_pinned_(c.leave_pinned != 0),
	  max_pinned_(c.max_pinned_bytes), max_entries_(c.max_entries),
	  fork_policy_(c.fork_policy), print_stats_(c.print_stats != 0),
	  page_mask_((uintptr_t(1) << page_shift()) - 1), open_monitor_(std::move(open)),
	  index_(page_shift()), pool_(c.payload_size)
{
}

int Cache::create(const mrn_config &config, MonitorFactory open, std::unique_ptr<Cache> *out)
{
	if (!config.reg || !config.dereg) {
		log(0, "cache %s: the register and deregister functions are required",
		    config.name ? config.name : "(unnamed)");
		return -EINVAL;
	}
	if (config.payload_size > 4096) {
		log(0, "cache %s: payload_size %zu is over the limit of 4096 bytes",
		    config.name ? config.name : "(unnamed)", config.payload_size);
		return -EINVAL;
	}
	if (config.fork_policy != MRN_FORK_DONTFORK && config.fork_policy != MRN_FORK_NONE) {
		log(0, "cache %s: unknown fork policy %d", config.name ? config.name : "(unnamed)",
		    int(config.fork_policy));
		return -EINVAL;
	}
	raise_verbosity(config.verbose);
	auto c = std::make_unique<Cache>(Key(), config, std::move(open));
	int rc;
	{
		std::lock_guard<std::mutex> g(c->lock_.writer_mutex());
		rc = c->open_monitor_locked();
	}
	if (rc < 0)
		return rc;
	register_for_fork(c.get());
	*out = std::move(c);
	return 0;
}

int Cache::open_monitor_locked()
{
	std::string why;
	const int rc = open_monitor_(&monitor_, &why);
	if (rc < 0) {
		log(0, "cache %s: cannot use the requested monitor: %s", name_.c_str(), why.c_str());
		return rc == -EINVAL ? -EINVAL : -ENODEV;
	}
	monitor_kind_ = monitor_->kind();
	keep_idle_ = leave_pinned_ && monitor_->keeps_idle_entries();
	const uint64_t *gen = monitor_->generation();
	seen_gen_.store(__atomic_load_n(gen, __ATOMIC_ACQUIRE), std::memory_order_relaxed);
	gen_ptr_.store(gen, std::memory_order_release);
	log(1, "cache %s: monitor %s: %s; leave_pinned %s", name_.c_str(),
	    mrn_monitor_to_string(monitor_kind_), why.c_str(), keep_idle_ ? "on" : "off");
	return 0;
}

Cache::~Cache()
{
	unregister_for_fork(this);
	Lock lk(lock_.writer_mutex());
	check_fork_locked();
	if (print_stats_)
		print_stats_locked();
	size_t busy = 0;
	{
		ExclusiveGuard ex(lock_);
		std::vector<Entry *> all;
		index_.for_each([&](Entry *x) { all.push_back(x); });
		for (Entry *x : all) {
			index_.erase(x);
			x->state.store(Entry::kDetached, std::memory_order_relaxed);
			if (x->refs.load(std::memory_order_relaxed) > 1)
				busy++;
			doomed_.push_back(x);
		}
	}
	for (Entry *x : unindexed_)
		if (x->state.load(std::memory_order_relaxed) == Entry::kDetached) {
			busy++;
			doomed_.push_back(x);
		}
	unindexed_.clear();
	if (busy)
		log(1, "cache %s: destroyed with %zu entries still in use; deregistering them",
		    name_.c_str(), busy);
	destroy_doomed(lk);
}

void Cache::check_fork_locked()
{
	if (!forked_)
		return;
	// The child starts empty: the parent's registrations are not ours to
	// deregister, and their memory stays as it is (the child may still
	// hold pointers into it).
	forked_ = false;
	index_.clear();
	unindexed_.clear();
	victims_.clear();
	doomed_.clear();
	lru_queue_.clear();
	pool_.abandon();
	pinned_bytes_ = 0;
	epoch_++;
	if (monitor_) {
		monitor_->abandon_after_fork();
		monitor_.reset();
	}
	if (open_monitor_locked() < 0) {
		// Without a monitor the child can still register, just not cache.
		monitor_ = make_null_monitor(MRN_MONITOR_NONE);
		monitor_kind_ = MRN_MONITOR_NONE;
		keep_idle_ = false;
		gen_ptr_.store(monitor_->generation(), std::memory_order_release);
		seen_gen_.store(*monitor_->generation(), std::memory_order_relaxed);
	}
}

void Cache::fork_child()
{
	lock_.reset_after_fork();
	forked_ = true;
	seen_gen_.store(0, std::memory_order_relaxed);
	gen_ptr_.store(&kForkedGeneration, std::memory_order_relaxed);
	lock_.writer_mutex().unlock();
}

// --- invalidation ------------------------------------------------------------

void Cache::invalidate_cookie(uint64_t cookie, uint64_t track_id, uintptr_t, uintptr_t)
{
	Entry *x = reinterpret_cast<Entry *>(static_cast<uintptr_t>(cookie));
	// The kernel reports only registrations we have not unregistered, so
	// the cookie is a live entry; the id check guards against our bugs.
	if (!x || x->track_id != track_id) {
		log(0, "cache %s: the monitor reported an unknown registration (id %" PRIu64 ")",
		    name_.c_str(), track_id);
		return;
	}
	x->track_id = 0; // the kernel has dropped it
	x->invalid.store(true, std::memory_order_relaxed);
	if (x->state.load(std::memory_order_relaxed) == Entry::kIndexed)
		victims_.push_back(x);
}

void Cache::invalidate_range(uintptr_t start, uintptr_t end)
{
	if (end <= start)
		return;
	index_.for_each_overlapping(start, end, [&](Entry *x) {
		if (!x->invalid.exchange(true, std::memory_order_relaxed))
			victims_.push_back(x);
	});
	for (Entry *x : unindexed_)
		if (x->overlaps(start, end))
			x->invalid.store(true, std::memory_order_relaxed);
}

// Takes the victims out of the index (readers must be excluded); those
// nobody uses are doomed, the others wait for their last put.
void Cache::detach_excluded(std::vector<Entry *> &victims)
{
	for (Entry *x : victims) {
		if (x->state.load(std::memory_order_relaxed) != Entry::kIndexed)
			continue;
		index_.erase(x);
		x->state.store(Entry::kDetached, std::memory_order_relaxed);
		if (x->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
			doomed_.push_back(x);
		else
			unindexed_.insert(x);
	}
	victims.clear();
}

void Cache::detach_locked(std::vector<Entry *> &victims)
{
	if (victims.empty())
		return;
	ExclusiveGuard ex(lock_);
	detach_excluded(victims);
}

// Drops an idle entry (readers must be excluded, and x idle: refs == 1).
void Cache::drop_idle_excluded(Entry *x)
{
	index_.erase(x);
	x->state.store(Entry::kDetached, std::memory_order_relaxed);
	x->refs.store(0, std::memory_order_relaxed);
	doomed_.push_back(x);
}

int Cache::sync_locked()
{
	check_fork_locked();
	const uint64_t now = __atomic_load_n(gen_ptr_.load(std::memory_order_relaxed),
					     __ATOMIC_ACQUIRE);
	if (now == seen_gen_.load(std::memory_order_relaxed))
		return 0;
	uint64_t gen = 0;
	const int rc = monitor_->drain(*this, &gen);
	st_.drains++;
	if (rc < 0) {
		log(0, "cache %s: draining the monitor failed: %s; dropping every idle entry",
		    name_.c_str(), strerror(-rc));
		// We cannot tell what died: nothing idle may be trusted.
		index_.for_each([&](Entry *x) {
			x->invalid.store(true, std::memory_order_relaxed);
			victims_.push_back(x);
		});
		gen = now;
	}
	st_.invalidations += victims_.size();
	{
		// Publish the new generation together with the removals: a hit
		// that sees it also sees the victims gone.
		ExclusiveGuard ex(lock_);
		detach_excluded(victims_);
		seen_gen_.store(gen, std::memory_order_relaxed);
	}
	return rc;
}

long Cache::invalidate(void *addr, size_t len)
{
	uintptr_t s, e;
	if (!page_range(addr, len, &s, &e))
		return -EINVAL;
	Lock lk(lock_.writer_mutex());
	sync_locked();
	invalidate_range(s, e);
	const long n = long(victims_.size());
	st_.invalidations += victims_.size();
	detach_locked(victims_);
	destroy_doomed(lk);
	return n;
}

// --- lookups and registration ---------------------------------------------------

int Cache::find(void *addr, size_t len, Entry **out)
{
	uintptr_t s, e;
	if (!page_range(addr, len, &s, &e))
		return -EINVAL;
	Lock lk(lock_.writer_mutex());
	sync_locked();
	Entry *x = index_.find_covering(s, e, [](const Entry *) { return true; });
	if (x)
		x->refs.fetch_add(1, std::memory_order_relaxed);
	destroy_doomed(lk);
	if (!x)
		return -ENOENT;
	*out = x;
	return 0;
}

int Cache::get_slow(uintptr_t s, uintptr_t e, uint32_t access, Entry **out)
{
	Lock lk(lock_.writer_mutex());
	for (int attempt = 0;; attempt++) {
		sync_locked();
		auto has_access = [access](const Entry *c) { return (c->access & access) == access; };
		if (Entry *x = index_.find_covering(s, e, has_access)) {
			x->refs.fetch_add(1, std::memory_order_relaxed);
			st_.hits_locked++;
			destroy_doomed(lk);
			*out = x;
			return 0;
		}
		// An entry that overlaps the range but lacks access is replaced
		// by one with the union of both ranges and both rights.
		uintptr_t ps = s, pe = e;
		uint32_t pacc = access;
		Entry *upgraded = nullptr;
		index_.for_each_overlapping(s, e, [&](Entry *y) {
			if (!upgraded && (y->access & access) != access)
				upgraded = y;
		});
		if (upgraded) {
			ps = std::min(ps, upgraded->start);
			pe = std::max(pe, upgraded->end);
			pacc |= upgraded->access;
			st_.upgrades++;
		}
		Entry *p = pool_.allocate();
		if (!p) {
			destroy_doomed(lk);
			return -ENOMEM;
		}
		p->start = ps;
		p->end = pe;
		p->access = pacc;
		p->refs.store(1, std::memory_order_relaxed);
		p->state.store(Entry::kPending, std::memory_order_relaxed);
		p->epoch = epoch_;
		unindexed_.insert(p);
		st_.misses++;
		// Advise before watching: changing the VMA's flags can split a
		// huge page mapping, which the kernel reports as a CLEAR of the
		// range; done after the watch, it would invalidate this very
		// registration every time.
		if (fork_policy_ == MRN_FORK_DONTFORK &&
		    madvise(reinterpret_cast<void *>(ps), pe - ps, MADV_DONTFORK) < 0)
			log(1, "cache %s: madvise(DONTFORK) of [%#" PRIxPTR ", %#" PRIxPTR ") failed: %s",
			    name_.c_str(), ps, pe, strerror(errno));
		// Watch first, pin second: an unmap that lands while we pin is
		// then reported, and checked for below.
		const int trc = monitor_->track(ps, pe, reinterpret_cast<uintptr_t>(p), &p->track_id);
		if (trc == -EOPNOTSUPP) {
			p->untracked = true;
		} else if (trc < 0) {
			log(1, "cache %s: the monitor cannot watch [%#" PRIxPTR ", %#" PRIxPTR "): %s",
			    name_.c_str(), ps, pe, strerror(-trc));
			release_pages_locked(p);
			unindexed_.erase(p);
			pool_.release(p);
			destroy_doomed(lk);
			return trc;
		}
		make_room_locked(pe - ps);
		destroy_doomed(lk);
		lk.unlock();
		const int rc = register_entry(p);
		lk.lock();
		if (rc < 0) {
			st_.reg_failures++;
			if (p->epoch == epoch_)
				release_pages_locked(p);
			unindexed_.erase(p);
			if (p->track_id)
				monitor_->untrack(p->track_id);
			if (p->epoch == epoch_)
				pool_.release(p);
			destroy_doomed(lk);
			return rc;
		}
		if (p->epoch != epoch_) {
			// We forked while registering: this registration is
			// the parent's. Start over in the child.
			continue;
		}
		pinned_bytes_ += p->length();
		// Validate: did the pages change while we pinned them?
		sync_locked();
		if (p->invalid.load(std::memory_order_relaxed)) {
			st_.retries++;
			unindexed_.erase(p);
			p->state.store(Entry::kDetached, std::memory_order_relaxed);
			p->refs.store(0, std::memory_order_relaxed);
			doomed_.push_back(p);
			destroy_doomed(lk);
			if (attempt + 1 >= kMaxRaceRetries) {
				log(0, "cache %s: [%#" PRIxPTR ", %#" PRIxPTR ") was unmapped during each of %d registrations",
				    name_.c_str(), ps, pe, kMaxRaceRetries);
				return -EAGAIN;
			}
			continue;
		}
		insert_locked(p);
		if (upgraded) {
			// The entry we upgraded is superseded: no new user gets it.
			std::vector<Entry *> old;
			index_.for_each_overlapping(ps, pe, [&](Entry *y) {
				if (y != p && p->covers(y->start, y->end) &&
				    (p->access & y->access) == y->access)
					old.push_back(y);
			});
			detach_locked(old);
		}
		destroy_doomed(lk);
		*out = p;
		return 0;
	}
}

int Cache::register_entry(Entry *p)
{
	for (;;) {
		const int rc = reg_(context_, reinterpret_cast<void *>(p->start), p->length(),
				    p->access, p->payload());
		if (rc == 0)
			return 0;
		if (rc != -ENOMEM && rc != -EAGAIN)
			return rc > 0 ? -rc : rc;
		// Out of resources: give back idle registrations and retry
		// while there are any.
		Lock lk(lock_.writer_mutex());
		const size_t n = evict_locked(p->length(), 1);
		destroy_doomed(lk);
		if (n == 0)
			return rc;
		st_.retries++;
	}
}

void Cache::insert_locked(Entry *p)
{
	unindexed_.erase(p);
	// One reference for the index, one for the caller.
	p->refs.store(2, std::memory_order_relaxed);
	p->state.store(Entry::kIndexed, std::memory_order_relaxed);
	p->last_use = lru_stamp();
	lru_tick_.fetch_add(1, std::memory_order_relaxed);
	if (index_.insert_needs_growth()) {
		ExclusiveGuard ex(lock_);
		index_.grow();
	}
	// Hits may run meanwhile: the index publishes the slot last.
	index_.insert(p);
}

// --- idle entries and limits -----------------------------------------------------

void Cache::make_room_locked(size_t len)
{
	uint64_t bytes = 0, entries = 0;
	if (max_pinned_ && pinned_bytes_ + len > max_pinned_)
		bytes = pinned_bytes_ + len - max_pinned_;
	if (max_entries_ && index_.size() + 1 > max_entries_)
		entries = index_.size() + 1 - max_entries_;
	if (bytes || entries)
		evict_locked(bytes, entries);
}

size_t Cache::evict_locked(uint64_t bytes_needed, uint64_t entries_needed)
{
	std::vector<Entry *> victims;
	uint64_t bytes = 0;
	auto idle = [](const Entry *x) {
		return x->refs.load(std::memory_order_relaxed) == 1 &&
		       x->state.load(std::memory_order_relaxed) == Entry::kIndexed;
	};
	for (int pass = 0; pass < 2 && (bytes < bytes_needed || victims.size() < entries_needed);
	     pass++) {
		if (lru_queue_.empty() || pass == 1) {
			// (Re)build the candidate queue: the oldest idle entries,
			// oldest at the back. Built in batches so that a cache
			// at its limit does not scan everything on each miss.
			lru_queue_.clear();
			index_.for_each([&](Entry *x) {
				if (idle(x))
					lru_queue_.emplace_back(x->last_use, x);
			});
			const size_t keep = std::max<size_t>(64, lru_queue_.size() / 8);
			if (lru_queue_.size() > keep) {
				std::nth_element(lru_queue_.begin(), lru_queue_.begin() + keep,
						 lru_queue_.end());
				lru_queue_.resize(keep);
			}
			std::sort(lru_queue_.begin(), lru_queue_.end(),
				  [](const auto &a, const auto &b) { return a.first > b.first; });
		}
		while (!lru_queue_.empty() &&
		       (bytes < bytes_needed || victims.size() < entries_needed)) {
			auto [stamp, x] = lru_queue_.back();
			lru_queue_.pop_back();
			// Skip candidates reused (or gone) since the queue was built.
			if (!idle(x) || x->last_use != stamp ||
			    std::find(victims.begin(), victims.end(), x) != victims.end())
				continue;
			victims.push_back(x);
			bytes += x->length();
		}
	}
	if (victims.empty())
		return 0;
	size_t evicted = 0;
	{
		ExclusiveGuard ex(lock_);
		for (Entry *x : victims) {
			// Recheck with readers out: a hit may have taken it.
			if (!idle(x))
				continue;
			drop_idle_excluded(x);
			evicted++;
		}
	}
	st_.evictions += evicted;
	lru_tick_.fetch_add(1, std::memory_order_relaxed);
	return evicted;
}

bool Cache::evict_one()
{
	Lock lk(lock_.writer_mutex());
	sync_locked();
	const bool any = evict_locked(0, 1) > 0;
	destroy_doomed(lk);
	return any;
}

long Cache::flush()
{
	Lock lk(lock_.writer_mutex());
	sync_locked();
	std::vector<Entry *> all;
	index_.for_each([&](Entry *x) {
		if (x->refs.load(std::memory_order_relaxed) == 1)
			all.push_back(x);
	});
	long n = 0;
	{
		ExclusiveGuard ex(lock_);
		for (Entry *x : all) {
			if (x->refs.load(std::memory_order_relaxed) != 1)
				continue;
			drop_idle_excluded(x);
			n++;
		}
	}
	st_.evictions += uint64_t(n);
	lru_queue_.clear();
	destroy_doomed(lk);
	return n;
}

void Cache::put_slow(Entry *x, bool released)
{
	Lock lk(lock_.writer_mutex());
	check_fork_locked();
	if (x->epoch != epoch_) {
		// A registration of the parent's, in a forked child: not ours to
		// deregister or to free.
		if (!released)
			x->refs.fetch_sub(1, std::memory_order_acq_rel);
		return;
	}
	if (released) {
		// The fast path saw the last reference of a detached entry go.
		unindexed_.erase(x);
		doomed_.push_back(x);
		destroy_doomed(lk);
		return;
	}
	x->last_use = lru_stamp();
	const uint32_t prev = x->refs.fetch_sub(1, std::memory_order_acq_rel);
	if (prev == 1) {
		unindexed_.erase(x);
		doomed_.push_back(x);
	} else if (prev == 2 && x->state.load(std::memory_order_relaxed) == Entry::kIndexed) {
		// Idle, and idle entries are not kept.
		ExclusiveGuard ex(lock_);
		if (x->refs.load(std::memory_order_relaxed) == 1)
			drop_idle_excluded(x);
	}
	destroy_doomed(lk);
}

// --- teardown of entries -----------------------------------------------------------

// Pages of x that no other live registration covers: their fork advice is
// undone and the monitor may stop watching them.
void Cache::release_pages_locked(const Entry *x)
{
	std::vector<std::pair<uintptr_t, uintptr_t>> covered;
	auto note = [&](const Entry *y) {
		if (y != x && y->overlaps(x->start, x->end))
			covered.emplace_back(std::max(y->start, x->start), std::min(y->end, x->end));
	};
	index_.for_each_overlapping(x->start, x->end, note);
	for (const Entry *y : unindexed_)
		note(y);
	std::sort(covered.begin(), covered.end());
	uintptr_t cur = x->start;
	auto release = [&](uintptr_t s, uintptr_t e) {
		if (s >= e)
			return;
		if (fork_policy_ == MRN_FORK_DONTFORK)
			(void)madvise(reinterpret_cast<void *>(s), e - s, MADV_DOFORK);
		monitor_->release_range(s, e);
	};
	for (const auto &[s, e] : covered) {
		release(cur, s);
		cur = std::max(cur, e);
	}
	release(cur, x->end);
}

void Cache::destroy_doomed(Lock &lk)
{
	while (!doomed_.empty()) {
		Entry *x = doomed_.back();
		doomed_.pop_back();
		destroy_one(lk, x);
	}
}

void Cache::destroy_one(Lock &lk, Entry *x)
{
	if (x->epoch != epoch_)
		return; // the parent's, in a forked child
	unindexed_.erase(x);
	lk.unlock();
	const int rc = dereg_(context_, x->payload());
	lk.lock();
	if (rc != 0)
		log(0, "cache %s: deregistering [%#" PRIxPTR ", %#" PRIxPTR ") failed: %s",
		    name_.c_str(), x->start, x->end, strerror(rc < 0 ? -rc : rc));
	if (x->epoch != epoch_)
		return;
	pinned_bytes_ -= x->length();
	if (x->track_id)
		monitor_->untrack(x->track_id);
	release_pages_locked(x);
	pool_.release(x);
}

// --- statistics ----------------------------------------------------------------------

void Cache::stats(mrn_stats *o)
{
	Lock lk(lock_.writer_mutex());
	check_fork_locked();
	*o = mrn_stats{};
	uint64_t hits = st_.hits_locked;
	for (const auto &h : hits_)
		hits += h.n.load(std::memory_order_relaxed);
	o->hits = hits;
	o->misses = st_.misses;
	o->access_upgrades = st_.upgrades;
	o->evictions = st_.evictions;
	o->invalidations = st_.invalidations;
	o->drains = st_.drains;
	o->retries = st_.retries;
	o->register_failures = st_.reg_failures;
	o->pinned_bytes = pinned_bytes_;
	o->entries = index_.size();
	index_.for_each([&](Entry *x) {
		if (x->refs.load(std::memory_order_relaxed) == 1)
			o->idle_entries++;
	});
	for (const Entry *x : unindexed_)
		if (x->state.load(std::memory_order_relaxed) == Entry::kDetached)
			o->in_use_detached++;
}

void Cache::print_stats()
{
	Lock lk(lock_.writer_mutex());
	check_fork_locked();
	print_stats_locked();
}

void Cache::print_stats_locked()
{
	uint64_t hits = st_.hits_locked;
	for (const auto &h : hits_)
		hits += h.n.load(std::memory_order_relaxed);
	std::fprintf(stderr,
		     "libmrnotify: cache %s (monitor %s): hits %" PRIu64 " misses %" PRIu64
		     " upgrades %" PRIu64 " evictions %" PRIu64 " invalidations %" PRIu64
		     " drains %" PRIu64 " retries %" PRIu64 " failures %" PRIu64
		     " entries %zu pinned_bytes %" PRIu64 "\n",
		     name_.c_str(), mrn_monitor_to_string(monitor_kind_), hits, st_.misses,
		     st_.upgrades, st_.evictions, st_.invalidations, st_.drains, st_.retries,
		     st_.reg_failures, index_.size(), pinned_bytes_);
}

size_t Cache::bytes_per_entry()
{
	Lock lk(lock_.writer_mutex());
	const size_t n = pool_.blocks_in_use();
	if (n == 0)
		return 0;
	// The entry block less the payload, plus the index's slots.
	return (pool_.block_size() - payload_size_) + index_.bytes() / n;
}

} // namespace mrn

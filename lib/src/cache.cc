// SPDX-License-Identifier: BSD-3-Clause
#include "cache.h"

#include "log.h"
#include "map_count.h"

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

// A registration that keeps racing changes of its own range is made this
// many times, and the last one is handed out uncached (see commit_entry).
constexpr int kMaxRaceRetries = 16;

// A registration the kernel refuses for lack of room (its caps, or memory)
// is retried this many times, each after evicting an idle entry.
constexpr int kMaxTrackRetries = 8;

// Eviction looks at this many entries from its clock hand at the most, and
// picks the least recently used of the first kEvictSample idle entries it
// meets there: each victim costs a bounded number of entries however large
// the cache (and the empty slots between them: all of the table when it
// grew for many more entries than it holds), and small caches get exact
// LRU.
constexpr size_t kEvictScan = 256;
constexpr unsigned kEvictSample = 16;

// commit_entry's "start over" results.
constexpr int kRaced = 1;  // the pages changed while we pinned them
constexpr int kForked = 2; // the registration is the parent's

unsigned page_shift()
{
	return unsigned(__builtin_ctzl(static_cast<unsigned long>(sysconf(_SC_PAGESIZE))));
}

// How many entries may carry MADV_DONTFORK. Each advised range can split its
// mapping at both ends; past vm.max_map_count every mmap (and malloc) of the
// process fails. A quarter of the limit in advised entries keeps at least
// half of the mappings for the application.
uint64_t advised_entry_budget()
{
	return vm_max_map_count() / 4;
}

} // namespace

// A writer section: the writer mutex, and the entries that became doomed
// while it was held. They are deregistered when the section ends, with the
// mutex dropped around each deregister call (which may be slow, or come back
// into the cache), so no path can forget them.
class Cache::Writer {
public:
	explicit Writer(Cache &c) : cache_(c), lock_(c.lock_.writer_mutex()) {}
	~Writer() { cache_.destroy_doomed(*this); }
	Writer(const Writer &) = delete;
	Writer &operator=(const Writer &) = delete;
	// Only the functions cache.h marks as dropping the writer mutex use it.
	std::unique_lock<std::mutex> &lock() { return lock_; }
	CacheLock &cache_lock() { return cache_.lock_; }
	Cache &cache() { return cache_; }

	EntryStack doomed;

private:
	Cache &cache_;
	std::unique_lock<std::mutex> lock_;
};

// Readers kept out, inside a writer section: what the functions that take
// entries out of the index or free them ask for, so that calling one
// without it does not compile. Only a writer can make one.
class Cache::Excluded {
public:
	explicit Excluded(Writer &w) : writer_(w), guard_(w.cache_lock()) {}
	// Every erasure from the index happens in one of these: a table left
	// mostly empty shrinks here, before readers come back.
	~Excluded()
	{
		Cache &c = writer_.cache();
		if (c.index_.shrink_if_sparse())
			c.evict_hand_ = 0;
	}
	Excluded(const Excluded &) = delete;
	Excluded &operator=(const Excluded &) = delete;
	Writer &writer() { return writer_; }

private:
	Writer &writer_;
	ExclusiveGuard guard_;
};

// What one drain (or one caller's invalidation) found: indexed entries to
// detach, on a local list. Entries outside the index are only marked
// invalid: one being registered is then retried, one in use dies at its put.
class Cache::DrainSink final : public InvalidationSink {
public:
	explicit DrainSink(Cache &c) : cache_(c) {}

	void invalidate_cookie(uint64_t cookie, uint64_t watch_id, uintptr_t, uintptr_t) override
	{
		Entry *x = reinterpret_cast<Entry *>(static_cast<uintptr_t>(cookie));
		// The kernel reports only registrations we have not unregistered,
		// so the cookie is a live entry; the id check guards against our
		// own bugs.
		if (!x || x->watch_id != watch_id) {
			log(0,
			    "cache %s: the monitor reported an unknown registration (id %" PRIu64
			    ")",
			    cache_.name_.c_str(), watch_id);
			return;
		}
		// The kernel dropped its registration when it reported it.
		// Hits read it (the word check) without the writer mutex.
		__atomic_store_n(&x->watch_id, 0, __ATOMIC_RELAXED);
		x->flags &= uint8_t(~Entry::kWatched);
		condemn(x);
	}
	void invalidate_range(uintptr_t start, uintptr_t end) override
	{
		if (end <= start)
			return;
		cache_.index_.for_each_overlapping(start, end, [this](Entry *x) { condemn(x); });
		cache_.unindexed_.for_each([&](Entry *x) {
			if (x->overlaps(start, end))
				x->invalid.store(true, std::memory_order_relaxed);
		});
	}
	// Each entry once, however many reports name it.
	void condemn(Entry *x)
	{
		if (x->invalid.exchange(true, std::memory_order_relaxed))
			return;
		if (x->state.load(std::memory_order_relaxed) == Entry::kIndexed) {
			victims_.push(x);
			count_++;
		}
	}
	EntryStack &victims() { return victims_; }
	long count() const { return count_; }

private:
	Cache &cache_;
	EntryStack victims_;
	long count_ = 0;
};

struct Cache::MissPlan {
	uintptr_t start, end;
	uint32_t access;
	bool merged;  // grown to cover the entries it overlaps
	bool upgrade; // one of them lacked the access asked for
	// index_.inserts() when the search found no entry overlapping the
	// request; kNotEmpty when it found some, or did not search.
	uint64_t empty_at;
	static constexpr uint64_t kNotEmpty = UINT64_MAX;
};

Cache::Cache(Key, const mrn_config &c, MonitorFactory open)
    : name_(c.name ? c.name : "mrnotify"), reg_(c.reg), dereg_(c.dereg), context_(c.context),
      payload_size_(c.payload_size), leave_pinned_(c.leave_pinned != 0),
      max_pinned_(c.max_pinned_bytes), max_entries_(c.max_entries), fork_policy_(c.fork_policy),
      advise_dontfork_(resolve_fork_policy(c.fork_policy) == MRN_FORK_DONTFORK),
      max_advised_(advised_entry_budget()), print_stats_(c.print_stats != 0),
      page_mask_((uintptr_t(1) << page_shift()) - 1), open_monitor_(std::move(open)),
      deltas_(EntryPool::block_size_for(c.payload_size)), index_(page_shift()),
      pool_(c.payload_size)
{}

int Cache::create(const mrn_config &config, MonitorFactory open, std::unique_ptr<Cache> *out)
{
	const char *name = config.name ? config.name : "(unnamed)";
	if (!config.reg || !config.dereg) {
		log(0, "cache %s: the register and deregister functions are required", name);
		return -EINVAL;
	}
	if (config.payload_size > 4096) {
		log(0, "cache %s: payload_size %zu is over the limit of 4096 bytes", name,
		    config.payload_size);
		return -EINVAL;
	}
	if (config.fork_policy != MRN_FORK_DONTFORK && config.fork_policy != MRN_FORK_NONE &&
	    config.fork_policy != MRN_FORK_AUTO) {
		log(0, "cache %s: unknown fork policy %d", name, int(config.fork_policy));
		return -EINVAL;
	}
	raise_verbosity(config.verbose);
	auto c = std::make_unique<Cache>(Key(), config, std::move(open));
	int rc;
	{
		Writer w(*c);
		rc = c->open_monitor(w);
	}
	if (rc < 0)
		return rc;
	register_for_fork(c.get());
	*out = std::move(c);
	return 0;
}

int Cache::open_monitor(Writer &)
{
	std::string why;
	const int rc = open_monitor_(&monitor_, &why);
	if (rc < 0) {
		log(0, "cache %s: cannot use the requested monitor: %s", name_.c_str(),
		    why.c_str());
		return rc == -EINVAL ? -EINVAL : -ENODEV;
	}
	monitor_kind_ = monitor_->kind();
	keep_idle_ = leave_pinned_ && monitor_->keeps_idle_entries();
	const uint64_t *gen = monitor_->generation();
	seen_gen_.store(load_generation(gen), std::memory_order_relaxed);
	gen_ptr_.store(gen, std::memory_order_release);
	use_words(*monitor_);
	log(1, "cache %s: monitor %s: %s; leave_pinned %s; fork %s%s", name_.c_str(),
	    mrn_monitor_to_string(monitor_kind_), why.c_str(), keep_idle_ ? "on" : "off",
	    mrn_fork_policy_to_string(fork_policy_),
	    fork_policy_ == MRN_FORK_AUTO ? (advise_dontfork_ ? " (dontfork)" : " (none)") : "");
	return 0;
}

// Teardown allocates nothing: it may run when memory or mappings have run out.
Cache::~Cache()
{
	unregister_for_fork(this);
	tear_down();
	// The end state: nothing indexed, nothing pinned, no advice left.
	MRN_ASSERT(index_.size() == 0);
	MRN_ASSERT(pinned_bytes_ == 0);
	MRN_ASSERT(advised_ == 0);
}

void Cache::tear_down()
{
	Writer w(*this);
	check_fork(w);
	if (print_stats_)
		print_stats(w);
	size_t busy = 0;
	{
		// Taken out one by one (erasing allocates nothing), so that the
		// index stays true for what ~Writer does next: undoing fork
		// advice looks for the entries still covering a page.
		Excluded ex(w);
		EntryStack all;
		index_.for_each([&](Entry *x) { all.push(x); });
		while (Entry *x = all.pop()) {
			deltas_.fold(x);
			if (x->refs.load(std::memory_order_relaxed) > Entry::kIndexRef)
				busy++;
			index_.erase(x);
			x->move_to(Entry::kDetached);
			x->refs.store(0, std::memory_order_relaxed);
			w.doomed.push(x);
		}
	}
	unindexed_.for_each([&](Entry *x) {
		if (x->state.load(std::memory_order_relaxed) != Entry::kDetached)
			return; // being registered by another thread: its own
		busy++;
		unindexed_.erase(x);
		w.doomed.push(x);
	});
	if (busy)
		log(1, "cache %s: destroyed with %zu entries still in use; deregistering them",
		    name_.c_str(), busy);
	// ~Writer deregisters them.
}

// --- fork ------------------------------------------------------------------------------

void Cache::fork_child()
{
	lock_.reset_after_fork();
	forked_ = true;
	seen_gen_.store(0, std::memory_order_relaxed);
	gen_ptr_.store(&kForkedGeneration, std::memory_order_relaxed);
	// The parent's words are not mapped here (VM_DONTCOPY).
	words_.store(nullptr, std::memory_order_relaxed);
	lock_.writer_mutex().unlock();
}

void Cache::check_fork(Writer &w)
{
	if (!forked_)
		return;
	// The child starts empty: the parent's registrations are not ours to
	// deregister, and their memory stays as it is (the child may still
	// hold pointers into it). epoch_ moves so owns() is false for them.
	forked_ = false;
	index_.clear();
	deltas_.clear();
	unindexed_.forget();
	pool_.abandon();
	pinned_bytes_ = 0;
	advised_ = 0;
	evict_hand_ = 0;
	epoch_++;
	if (monitor_) {
		// Abandoned, not destroyed: another thread of the parent may have
		// been changing it when we forked, and its destructor would act
		// on that state (free it, join a thread that is not here).
		monitor_->abandon_after_fork();
		(void)monitor_.release();
	}
	if (open_monitor(w) < 0) {
		// Without a monitor the child can still register, just not cache.
		monitor_ = make_null_monitor(MRN_MONITOR_NONE);
		monitor_kind_ = MRN_MONITOR_NONE;
		keep_idle_ = false;
		gen_ptr_.store(monitor_->generation(), std::memory_order_release);
		seen_gen_.store(load_generation(monitor_->generation()), std::memory_order_relaxed);
		use_words(*monitor_);
	}
}

void Cache::use_words(const Monitor &m)
{
	const uint64_t *deferred = m.deferred_word();
	seen_deferred_.store(deferred ? load_generation(deferred) : 0, std::memory_order_relaxed);
	deferred_ptr_.store(deferred, std::memory_order_relaxed);
	words_.store(deferred ? m.validity_words() : nullptr, std::memory_order_release);
}

// --- invalidation ------------------------------------------------------------------------

int Cache::report_unmap(void *addr, size_t len)
{
	if (monitor_kind_ != MRN_MONITOR_NONE && monitor_kind_ != MRN_MONITOR_EXTERNAL)
		return -EOPNOTSUPP;
	return monitor_->report_unmap(reinterpret_cast<uintptr_t>(addr), len) ? 1 : 0;
}

int Cache::sync(Writer &w)
{
	check_fork(w);
	const uint64_t now = load_generation(gen_ptr_.load(std::memory_order_relaxed));
	if (now == seen_gen_.load(std::memory_order_relaxed))
		return 0;
	DrainSink sink(*this);
	uint64_t gen = 0;
	// Read before the drain: a deferral after this point moves it past
	// the value kept, so hits do not trust the words until the next drain.
	const uint64_t *deferred = deferred_ptr_.load(std::memory_order_relaxed);
	const uint64_t deferred_before = deferred ? load_generation(deferred) : 0;
	const int rc = monitor_->drain(sink, &gen);
	if (rc == 0)
		seen_deferred_.store(deferred_before, std::memory_order_relaxed);
	st_.drains++;
	if (rc < 0) {
		st_.drain_failures++;
		log(0, "cache %s: draining the monitor failed: %s; dropping every idle entry",
		    name_.c_str(), strerror(-rc));
		// We cannot tell what died: trust neither the idle entries nor
		// one being registered right now (it is then registered again).
		// What the monitor still holds is reported by a later drain.
		index_.for_each([&](Entry *x) { sink.condemn(x); });
		unindexed_.for_each(
			[](Entry *x) { x->invalid.store(true, std::memory_order_relaxed); });
		gen = now;
	}
	st_.invalidations += uint64_t(sink.count());
	if (sink.victims().empty()) {
		seen_gen_.store(gen, std::memory_order_relaxed);
		return rc;
	}
	// Publish the new generation together with the removals: a hit that
	// sees it also sees the victims gone.
	Excluded ex(w);
	detach(ex, sink.victims());
	seen_gen_.store(gen, std::memory_order_relaxed);
	return rc;
}

// Takes the victims out of the index; those nobody uses are doomed, the
// others wait for their last put.
void Cache::detach(Excluded &ex, EntryStack &victims)
{
	while (Entry *x = victims.pop()) {
		if (x->state.load(std::memory_order_relaxed) != Entry::kIndexed)
			continue;
		// From here on its count is refs alone (see RefDeltas).
		deltas_.fold(x);
		index_.erase(x);
		x->move_to(Entry::kDetached);
		if (x->refs.fetch_sub(Entry::kIndexRef, std::memory_order_acq_rel) ==
		    Entry::kIndexRef)
			ex.writer().doomed.push(x);
		else
			unindexed_.insert(x);
	}
}

// Drops an idle entry.
void Cache::drop_idle(Excluded &ex, Entry *x)
{
	MRN_ASSERT(is_idle(x));
	deltas_.fold(x);
	index_.erase(x);
	x->move_to(Entry::kDetached);
	x->refs.store(0, std::memory_order_relaxed);
	ex.writer().doomed.push(x);
}

long Cache::invalidate(void *addr, size_t len)
{
	uintptr_t s, e;
	if (!page_range(addr, len, &s, &e))
		return -EINVAL;
	Writer w(*this);
	sync(w);
	DrainSink sink(*this);
	sink.invalidate_range(s, e);
	st_.invalidations += uint64_t(sink.count());
	if (!sink.victims().empty()) {
		Excluded ex(w);
		detach(ex, sink.victims());
	}
	return sink.count();
}

// --- lookups and misses --------------------------------------------------------------------

int Cache::find(void *addr, size_t len, Entry **out)
{
	uintptr_t s, e;
	if (!page_range(addr, len, &s, &e))
		return -EINVAL;
	Writer w(*this);
	sync(w);
	Entry *x = index_.find_covering(s, e, [](const Entry *) { return true; });
	if (!x)
		return -ENOENT;
	x->refs.fetch_add(1, std::memory_order_relaxed);
	*out = x;
	return 0;
}

int Cache::get_not_fresh(uintptr_t s, uintptr_t e, uint32_t access, void *arg, Entry **out)
{
	// A plain miss (nothing moved) goes straight on: no second section.
	if (load_generation(gen_ptr_.load(std::memory_order_relaxed)) ==
	    seen_gen_.load(std::memory_order_relaxed))
		return get_slow(s, e, access, arg, out);
	Entry *x = lock_.read([this, s, e, access](const auto &section) -> Entry * {
		const uint32_t *words = valid_words();
		if (!words)
			return nullptr;
		Entry *c = find_for(s, e, access);
		if (!c || !valid_by_word(words, __atomic_load_n(&c->watch_id, __ATOMIC_RELAXED)))
			return nullptr;
		take_hit(section, c, true);
		return c;
	});
	if (x) {
		*out = x;
		return 0;
	}
	return get_slow(s, e, access, arg, out);
}

// A miss: plan what to register, prepare the entry (advice, watch, room),
// register it with the lock dropped, then commit it (validate and index).
// Each step says how it ended; the loop decides what comes next.
int Cache::get_slow(uintptr_t s, uintptr_t e, uint32_t access, void *arg, Entry **out)
{
	Writer w(*this);
	bool merge = true;
	for (int attempt = 0;; attempt++) {
		sync(w);
		Entry *x = nullptr;
		const MissPlan plan = plan_miss(s, e, access, merge, &x);
		if (x) {
			x->refs.fetch_add(1, std::memory_order_relaxed);
			st_.hits++;
			*out = x;
			return 0;
		}
		Entry *p = nullptr;
		int rc = prepare_entry(w, plan, &p);
		if (rc < 0)
			return rc;
		rc = register_entry(w, p, arg);
		if (rc < 0) {
			st_.register_failures++;
			abandon_entry(w, p);
			if (plan.merged) {
				// The union may cover memory that is gone (unmapped,
				// not yet drained): the request alone may still work.
				merge = false;
				continue;
			}
			return rc;
		}
		rc = commit_entry(w, p, &plan, attempt + 1 >= kMaxRaceRetries);
		if (rc == 0) {
			*out = p;
			return 0;
		}
	}
}

// The steps of a miss without the index: registered (evicting idle
// entries when the register function runs out of resources), committed as
// uncached, deregistered at its put. Glue with registrations a cache must
// not keep (Open MPI's BYPASS, PERSIST and device memory) needs no second
// path of its own.
int Cache::get_uncached(void *addr, size_t len, uint32_t access, bool exact, void *arg,
			Entry **out)
{
	uintptr_t s, e;
	if (exact) {
		s = reinterpret_cast<uintptr_t>(addr);
		if (len == 0 || s + len < s)
			return -EINVAL;
		e = s + len;
	} else if (!page_range(addr, len, &s, &e)) {
		return -EINVAL;
	}
	Writer w(*this);
	for (;;) {
		Entry *p = new_pending_entry(s, e, access);
		if (!p)
			return -ENOMEM;
		p->flags |= Entry::kUncached;
		// Device memory has no host mapping to advise.
		if (!exact && advise_dontfork_)
			advise_entry(p);
		int rc = register_entry(w, p, arg);
		if (rc < 0) {
			st_.register_failures++;
			abandon_entry(w, p);
			return rc;
		}
		// Never watched, so never raced: 0, or kForked (the entry was
		// the parent's; this child registers its own).
		rc = commit_entry(w, p, nullptr, true);
		if (rc == 0) {
			*out = p;
			return 0;
		}
	}
}

// Entries the request overlaps merge into one registration, as in
// ucs_rcache: a window sliding over a buffer pins each page once, and a hit
// finds one entry however many ranges overlapped before. An entry that
// covers the request but lacks access is replaced by one with both rights.
// Adjacent entries are not merged: many small neighbouring buffers would
// then re-register an ever larger region on each miss.
//
// *covering: an entry that covers the request with the access asked for,
// or nullptr: a hit after all (inserted by another thread since the
// caller's lookup, or the lookup ran before a drain). Found by the same
// search, so that a miss searches the index once.
Cache::MissPlan Cache::plan_miss(uintptr_t s, uintptr_t e, uint32_t access, bool merge,
				 Entry **covering) const
{
	MissPlan p{s, e, access, false, false, MissPlan::kNotEmpty};
	*covering = nullptr;
	if (!merge) {
		*covering = index_.find_covering(
			s, e, [access](const Entry *c) { return (c->access & access) == access; });
		return p;
	}
	index_.for_each_overlapping(s, e, [&](Entry *y) {
		if ((y->access & access) != access)
			p.upgrade = true;
		else if (!*covering && y->covers(s, e))
			*covering = y;
		p.start = std::min(p.start, y->start);
		p.end = std::max(p.end, y->end);
		p.access |= y->access;
		p.merged = true;
	});
	if (!p.merged)
		p.empty_at = index_.inserts();
	return p;
}

// An entry being registered: the caller's reference, not in the index.
Entry *Cache::new_pending_entry(uintptr_t s, uintptr_t e, uint32_t access)
{
	Entry *p = pool_.allocate();
	if (!p)
		return nullptr;
	p->start = s;
	p->end = e;
	p->access = access;
	p->refs.store(1, std::memory_order_relaxed);
	p->state.store(Entry::kPending, std::memory_order_relaxed);
	p->epoch = epoch_;
	unindexed_.insert(p);
	return p;
}

int Cache::prepare_entry(Writer &w, const MissPlan &plan, Entry **out)
{
	Entry *p = new_pending_entry(plan.start, plan.end, plan.access);
	if (!p)
		return -ENOMEM;
	st_.misses++;
	if (plan.upgrade)
		st_.access_upgrades++;
	else if (plan.merged)
		st_.merges++;
	// Advise before watching: changing the VMA's flags can split a huge
	// page mapping, which the kernel reports as a CLEAR of the range; done
	// after the watch, it would invalidate this very registration.
	if (advise_dontfork_)
		advise_entry(p);
	if (!p->has(Entry::kUncached)) {
		const int rc = watch_entry(w, p);
		if (rc < 0) {
			log(1,
			    "cache %s: the monitor cannot watch [%#" PRIxPTR ", %#" PRIxPTR "): %s",
			    name_.c_str(), p->start, p->end, strerror(-rc));
			abandon_entry(w, p);
			return rc;
		}
	}
	if (!p->has(Entry::kUncached) && over_limits(p->length())) {
		uint64_t bytes = 0, entries = 0;
		if (max_pinned_ && pinned_bytes_ + p->length() > max_pinned_)
			bytes = pinned_bytes_ + p->length() - max_pinned_;
		if (max_entries_ && index_.size() + 1 > max_entries_)
			entries = index_.size() + 1 - max_entries_;
		if (evict(w, bytes, entries))
			destroy_doomed(w);
		// Nothing idle to give back: use this registration uncached
		// rather than grow past the limits.
		if (over_limits(p->length()))
			make_uncached(w, p);
	}
	*out = p;
	return 0;
}

bool Cache::over_limits(size_t len) const
{
	return (max_pinned_ && pinned_bytes_ + len > max_pinned_) ||
	       (max_entries_ && index_.size() + 1 > max_entries_);
}

void Cache::advise_entry(Entry *p)
{
	if (advised_ >= max_advised_) {
		// Out of budget (see advised_entry_budget): uncached, so the
		// advice, the pin and the mapping split last only while in use.
		if (st_.fork_advice_failures++ == 0)
			log(0,
			    "cache %s: %" PRIu64 " registrations carry MADV_DONTFORK, the most "
			    "vm.max_map_count allows; further ones are not cached",
			    name_.c_str(), advised_);
		p->flags |= Entry::kUncached;
		return;
	}
	if (madvise(reinterpret_cast<void *>(p->start), p->length(), MADV_DONTFORK) < 0) {
		if (st_.fork_advice_failures++ == 0)
			log(0,
			    "cache %s: madvise(DONTFORK) of [%#" PRIxPTR ", %#" PRIxPTR
			    ") failed: %s; "
			    "such registrations are not cached",
			    name_.c_str(), p->start, p->end, strerror(errno));
		p->flags |= Entry::kUncached;
		return;
	}
	p->flags |= Entry::kAdvised;
	advised_++;
}

int Cache::watch_entry(Writer &w, Entry *p)
{
	for (int attempt = 0;; attempt++) {
		const int rc = monitor_->watch(p->start, p->end, reinterpret_cast<uintptr_t>(p),
					       &p->watch_id);
		if (rc == 0) {
			p->flags |= Entry::kWatched;
			return 0;
		}
		if (rc == -EOPNOTSUPP) {
			// Memory the monitor cannot watch (file-backed, or owned
			// by another userfaultfd).
			p->flags |= Entry::kUncached;
			return 0;
		}
		if (rc != -ENOSPC && rc != -ENOMEM)
			return rc;
		// The kernel's caps or its memory: give back an idle entry and
		// try again; failing that, use this registration uncached.
		if (attempt >= kMaxTrackRetries || evict(w, 0, 1) == 0) {
			p->flags |= Entry::kUncached;
			return 0;
		}
		destroy_doomed(w);
		st_.retries++;
	}
}

// p will not be kept once idle: stop watching it now.
void Cache::make_uncached(Writer &, Entry *p)
{
	p->flags |= Entry::kUncached;
	if (!p->has(Entry::kWatched))
		return;
	monitor_->unwatch(p->watch_id);
	p->watch_id = 0;
	p->flags &= uint8_t(~Entry::kWatched);
	// Its fork advice stays while it is in use.
}

int Cache::register_entry(Writer &w, Entry *p, void *arg)
{
	for (;;) {
		w.lock().unlock();
		const int rc = reg_(context_, arg, reinterpret_cast<void *>(p->start), p->length(),
				    p->access, p->payload());
		w.lock().lock();
		if (rc == 0)
			return 0;
		const int err = rc > 0 ? -rc : rc;
		if (err != -ENOMEM && err != -EAGAIN)
			return err;
		// Out of resources: give back idle registrations and retry
		// while there are any.
		if (evict(w, p->length(), 1) == 0)
			return err;
		destroy_doomed(w);
		st_.retries++;
	}
}

// p is registered. Returns 0 when the caller may have it, kRaced when the
// pages changed while we pinned them, kForked when we are now a forked
// child and p is the parent's. last_try: hand out a raced registration
// uncached instead of kRaced.
int Cache::commit_entry(Writer &w, Entry *p, const MissPlan *plan, bool last_try)
{
	check_fork(w);
	if (!owns(p))
		return kForked;
	pinned_bytes_ += p->length();
	// Validate: did the pages change while we pinned them?
	sync(w);
	if (p->invalid.load(std::memory_order_relaxed) && last_try) {
		// Changed under every try. Not always our range's own unmaps:
		// Linux invalidates a whole 2 MiB block whenever a mapping in
		// it is split or merged (__split_huge_pmd, also with no huge
		// page there), so a buffer next to one that is mapped and
		// unmapped in a loop races as often as that loop runs. A
		// registration we cannot trust to stay valid is what an MPI
		// without a cache uses: the caller gets it, nobody else, and
		// it is deregistered at its put.
		log(1,
		    "cache %s: [%#" PRIxPTR ", %#" PRIxPTR
		    ") changed during each of %d registrations; this one is not cached",
		    name_.c_str(), p->start, p->end, kMaxRaceRetries);
		make_uncached(w, p);
	} else if (p->invalid.load(std::memory_order_relaxed)) {
		st_.retries++;
		unindexed_.erase(p);
		p->move_to(Entry::kDetached);
		p->refs.store(0, std::memory_order_relaxed);
		w.doomed.push(p);
		return kRaced;
	}
	if (!p->has(Entry::kUncached) && !monitor_->can_cache(p->start, p->end))
		make_uncached(w, p);
	if (p->has(Entry::kUncached)) {
		// Never indexed: the caller's reference is the only one, and the
		// entry dies at its put.
		p->move_to(Entry::kDetached);
		st_.uncached++;
		return 0;
	}
	insert(w, p);
	// Entries the new one covers, with no more rights, are superseded:
	// no new user gets them. None if the plan's search of the same range
	// found none and nothing but p was inserted since (the writer mutex
	// was let go around the registration): most misses, which then
	// search the index once, not twice.
	if (plan && plan->empty_at != MissPlan::kNotEmpty && index_.inserts() == plan->empty_at + 1)
		return 0;
	EntryStack old;
	index_.for_each_overlapping(p->start, p->end, [&](Entry *y) {
		if (y != p && p->covers(y->start, y->end) && (p->access & y->access) == y->access)
			old.push(y);
	});
	if (!old.empty()) {
		Excluded ex(w);
		detach(ex, old);
	}
	return 0;
}

// A registration that failed (or was never made): forget p.
void Cache::abandon_entry(Writer &w, Entry *p)
{
	if (!owns(p))
		return; // the parent's, in a forked child
	unindexed_.erase(p);
	if (p->has(Entry::kWatched))
		monitor_->unwatch(p->watch_id);
	undo_fork_advice(w, p);
	// Its advice was counted against the budget: give it back.
	if (p->has(Entry::kAdvised))
		advised_--;
	pool_.release(p);
}

void Cache::insert(Writer &w, Entry *p)
{
	// Growth first: when it throws (std::bad_alloc, which the C API turns
	// into -ENOMEM), p is still among the unindexed entries, which the
	// cache's end deregisters, not lost half indexed.
	if (index_.insert_needs_growth()) {
		Excluded ex(w);
		index_.grow();
		evict_hand_ = 0;
	}
	unindexed_.erase(p);
	// One reference for the index, one for the caller.
	p->refs.store(Entry::kIndexRef + 1, std::memory_order_relaxed);
	p->move_to(Entry::kIndexed);
	p->last_use.store(lru_stamp(), std::memory_order_relaxed);
	advance_lru_tick(w);
	// Hits may run meanwhile: the index publishes the slot last.
	index_.insert(p);
}

// --- idle entries and limits -----------------------------------------------------------------

// The least recently used of the first kEvictSample idle entries among the
// kEvictScan entries after the clock hand, or nullptr.
Entry *Cache::pick_victim()
{
	Entry *best = nullptr;
	uint32_t best_age = 0;
	const uint32_t now = lru_now();
	unsigned seen = 0;
	index_.sweep(&evict_hand_, kEvictScan, [&](Entry *x) {
		if (!is_idle(x) || x->has(Entry::kSelected))
			return false;
		const uint32_t age = deltas_.youngest_age(
			x, now, now - x->last_use.load(std::memory_order_relaxed));
		if (!best || age > best_age) {
			best = x;
			best_age = age;
		}
		return ++seen >= kEvictSample;
	});
	return best;
}

size_t Cache::evict(Writer &w, uint64_t bytes_needed, uint64_t entries_needed)
{
	EntryStack victims;
	uint64_t bytes = 0, chosen = 0;
	while (bytes < bytes_needed || chosen < entries_needed) {
		Entry *x = pick_victim();
		if (!x)
			break;
		x->flags |= Entry::kSelected;
		victims.push(x);
		bytes += x->length();
		chosen++;
	}
	if (!chosen)
		return 0;
	size_t evicted = 0;
	{
		Excluded ex(w);
		while (Entry *x = victims.pop()) {
			x->flags &= uint8_t(~Entry::kSelected);
			// Recheck with readers out: a hit may have taken it.
			if (!is_idle(x))
				continue;
			drop_idle(ex, x);
			evicted++;
		}
	}
	st_.evictions += evicted;
	advance_lru_tick(w);
	return evicted;
}

bool Cache::evict_one()
{
	Writer w(*this);
	sync(w);
	return evict(w, 0, 1) > 0;
}

long Cache::flush()
{
	Writer w(*this);
	sync(w);
	EntryStack idle;
	index_.for_each([&](Entry *x) {
		if (is_idle(x))
			idle.push(x);
	});
	long n = 0;
	{
		Excluded ex(w);
		while (Entry *x = idle.pop()) {
			if (!is_idle(x))
				continue;
			drop_idle(ex, x);
			n++;
		}
	}
	st_.evictions += uint64_t(n);
	return n;
}

void Cache::put_slow(Entry *x, bool released)
{
	Writer w(*this);
	check_fork(w);
	if (!owns(x)) {
		// A registration of the parent's, in a forked child: not ours to
		// deregister or to free.
		if (!released)
			x->refs.fetch_sub(1, std::memory_order_acq_rel);
		return;
	}
	if (released) {
		// The fast path saw the last reference of a detached entry go.
		unindexed_.erase(x);
		w.doomed.push(x);
		return;
	}
	x->last_use.store(lru_stamp(), std::memory_order_relaxed);
	const uint32_t prev = x->refs.fetch_sub(1, std::memory_order_acq_rel);
	if (prev == 1) {
		unindexed_.erase(x);
		w.doomed.push(x);
	} else if (prev == Entry::kIndexRef + 1 &&
		   x->state.load(std::memory_order_relaxed) == Entry::kIndexed) {
		// Idle, and idle entries are not kept.
		Excluded ex(w);
		if (is_idle(x))
			drop_idle(ex, x);
	}
}

// --- teardown of entries -----------------------------------------------------------------

// Pages of x that no other live advised entry covers get their fork advice
// undone. Allocates nothing.
void Cache::undo_fork_advice(Writer &, const Entry *x)
{
	if (!x->has(Entry::kAdvised))
		return;
	uintptr_t cur = x->start;
	while (cur < x->end) {
		// The first page from cur on that another advised entry covers,
		// and where that entry ends.
		uintptr_t cov_s = x->end, cov_e = x->end;
		auto note = [&](const Entry *y) {
			if (y == x || !y->has(Entry::kAdvised) || !y->overlaps(cur, x->end))
				return;
			const uintptr_t ys = std::max(y->start, cur);
			if (ys < cov_s || (ys == cov_s && y->end > cov_e)) {
				cov_s = ys;
				cov_e = y->end;
			}
		};
		index_.for_each_overlapping(cur, x->end, note);
		unindexed_.for_each(note);
		if (cur < cov_s)
			(void)madvise(reinterpret_cast<void *>(cur), cov_s - cur, MADV_DOFORK);
		cur = std::max(cov_s, std::min(cov_e, x->end));
	}
}

void Cache::destroy_doomed(Writer &w)
{
	while (Entry *x = w.doomed.pop()) {
		if (!owns(x))
			continue; // the parent's, in a forked child
		MRN_ASSERT(x->refs.load(std::memory_order_relaxed) == 0);
		w.lock().unlock();
		const int rc = dereg_(context_, x->payload());
		w.lock().lock();
		if (rc != 0)
			log(0, "cache %s: deregistering [%#" PRIxPTR ", %#" PRIxPTR ") failed: %s",
			    name_.c_str(), x->start, x->end, strerror(rc < 0 ? -rc : rc));
		if (forked_ || !owns(x))
			continue;
		pinned_bytes_ -= x->length();
		if (x->has(Entry::kWatched))
			monitor_->unwatch(x->watch_id);
		undo_fork_advice(w, x);
		if (x->has(Entry::kAdvised))
			advised_--;
		pool_.release(x);
	}
}

// --- statistics ----------------------------------------------------------------------------

#define MRN_COUNT_FIELD(f) +1
static_assert(sizeof(mrn_stats) == (0 MRN_STATS_FIELDS(MRN_COUNT_FIELD)) * sizeof(uint64_t),
	      "MRN_STATS_FIELDS names every field of struct mrn_stats");
#undef MRN_COUNT_FIELD

void Cache::stats(mrn_stats *o)
{
	Writer w(*this);
	check_fork(w);
	stats(w, o);
}

void Cache::stats(Writer &, mrn_stats *o)
{
	// st_ holds the writers' counts (hits: those made under the writer
	// mutex); the rest is counted here.
	*o = st_;
	for (const auto &h : hits_) {
		o->hits += h.n.load(std::memory_order_relaxed);
		o->valid_word_hits += h.by_word.load(std::memory_order_relaxed);
	}
	o->pinned_bytes = pinned_bytes_;
	o->entries = index_.size();
	index_.for_each([&](Entry *x) {
		if (is_idle(x))
			o->idle_entries++;
	});
	unindexed_.for_each([&](Entry *x) {
		if (x->state.load(std::memory_order_relaxed) == Entry::kDetached)
			o->in_use_detached++;
	});
	monitor_->add_stats(o);
}

void Cache::print_stats()
{
	Writer w(*this);
	check_fork(w);
	print_stats(w);
}

void Cache::print_stats(Writer &w)
{
	mrn_stats st;
	stats(w, &st);
	std::fprintf(stderr, "libmrnotify: cache %s (monitor %s):", name_.c_str(),
		     mrn_monitor_to_string(monitor_kind_));
#define MRN_PRINT_FIELD(f) std::fprintf(stderr, " %s %" PRIu64, #f, st.f);
	MRN_STATS_FIELDS(MRN_PRINT_FIELD)
#undef MRN_PRINT_FIELD
	std::fprintf(stderr, "\n");
}

size_t Cache::bytes_per_entry()
{
	Writer w(*this);
	const size_t n = pool_.blocks_in_use();
	if (n == 0)
		return 0;
	// The entry block less the payload, plus the index's slots.
	return (pool_.block_size() - payload_size_) + index_.bytes() / n;
}

} // namespace mrn

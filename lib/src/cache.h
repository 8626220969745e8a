// SPDX-License-Identifier: BSD-3-Clause
//
// The registration cache. Hits run under the shared side of CacheLock and
// cost: one acquire load of the monitor's generation, one hash probe, one
// increment of the thread's own reference delta for the entry (RefDeltas;
// the entry's atomic count where a delta cannot be used). Puts run in a
// read section too. Everything else (misses, drains, evictions) runs in a
// writer section (the writer mutex), and whatever removes an entry from the
// index or frees one also excludes readers.
//
// Fork. Registrations are never inherited:
//  - before fork (fork.cc, pthread_atfork) every cache's writer mutex is
//    taken, so no cache is caught half-modified;
//  - in the parent, the mutexes are released: nothing else changes;
//  - in the child, fork_child() voids the reader records of the threads
//    that were not copied, points the hit path at a generation no drain
//    returns (so the next get() takes the slow path) and marks the cache
//    forked; the first writer section then forgets every entry (they are
//    the parent's: owns() is false for them, so they are never
//    deregistered or freed here), abandons the parent's monitor without
//    touching it, and opens a monitor of its own.
// With the fork policy `dontfork` in force (kernels that do not keep pinned
// pages with the parent across fork), registered pages are not even mapped
// in the child.
#ifndef MRN_CACHE_H
#define MRN_CACHE_H

#include "compiler.h"
#include "entry.h"
#include "entry_pool.h"
#include "monitor.h"
#include "mrnotify.h"
#include "range_index.h"
#include "reader_lock.h"
#include "ref_deltas.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace mrn {

class Cache final {
public:
	// Opens the monitor; tests pass their own.
	using MonitorFactory = std::function<int(std::unique_ptr<Monitor> *, std::string *)>;

	static int create(const mrn_config &config, MonitorFactory open,
			  std::unique_ptr<Cache> *out);
	~Cache();
	Cache(const Cache &) = delete;
	Cache &operator=(const Cache &) = delete;

	// arg goes to the register function if this call registers.
	MRN_HOT_INLINE int get(void *addr, size_t len, uint32_t access, Entry **out,
				  void *arg = nullptr)
	{
		uintptr_t s, e;
		if (!page_range(addr, len, &s, &e))
			return -EINVAL;
		Entry *x = lock_.read([this, s, e, access](const auto &section) MRN_HOT_LAMBDA -> Entry * {
			if (load_generation(gen_ptr_.load(std::memory_order_relaxed)) !=
			    seen_gen_.load(std::memory_order_relaxed))
				return nullptr;
			Entry *c = find_for(s, e, access);
			if (c)
				take_hit(section, c, false);
			return c;
		});
		if (x) {
			*out = x;
			return 0;
		}
		return get_not_fresh(s, e, access, arg, out);
	}

	MRN_HOT_INLINE void put(Entry *x)
	{
		if (!keep_idle_) {
			put_slow(x, false);
			return;
		}
		const uint32_t stamp = lru_stamp();
		// In the index x cannot leave it (nor its count be folded) before
		// the section ends, and the index's reference keeps it alive
		// whatever its count says.
		const bool indexed = lock_.read([this, x, stamp](const auto &section) MRN_HOT_LAMBDA {
			if (x->state.load(std::memory_order_relaxed) != Entry::kIndexed)
				return false;
			if (!section.owns_record() || !deltas_.put(section.index(), x, stamp)) {
				x->last_use.store(stamp, std::memory_order_relaxed);
				x->refs.fetch_sub(1, std::memory_order_release);
			}
			return true;
		});
		if (indexed)
			return;
		// Out of the index: its count is refs alone. Stamp before
		// letting go: once our reference is gone the entry may be freed.
		x->last_use.store(stamp, std::memory_order_relaxed);
		if (x->refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
			return;
		put_slow(x, true);
	}

	int find(void *addr, size_t len, Entry **out);
	// A registration of its own, never looked up or kept (MRN_GET_UNCACHED);
	// exact: [addr, addr + len) as given, no fork advice (MRN_GET_EXACT).
	int get_uncached(void *addr, size_t len, uint32_t access, bool exact, void *arg,
			 Entry **out);
	long invalidate(void *addr, size_t len);
	// From the caller's memory hooks: async-signal-safe (monitor.h). 1
	// queued, 0 not (outside what was registered), -EOPNOTSUPP when the
	// monitor hears unmaps itself.
	int report_unmap(void *addr, size_t len);
	bool evict_one();
	long flush();
	void stats(mrn_stats *out);
	void print_stats();
	mrn_monitor_t monitor_kind() const { return monitor_kind_; }
	mrn_fork_policy_t fork_policy() const { return fork_policy_; }
	size_t bytes_per_entry();
	const std::string &name() const { return name_; }

	// pthread_atfork handlers (see the fork section above and fork.cc).
	void fork_prepare() { lock_.writer_mutex().lock(); }
	void fork_parent() { lock_.writer_mutex().unlock(); }
	void fork_child();

	// Only create() makes caches (it must open the monitor first).
	class Key {
		friend class Cache;
		Key() = default;
	};
	Cache(Key, const mrn_config &config, MonitorFactory open);

private:
	// A writer section (the writer mutex), and within one, readers kept
	// out (cache.cc).
	class Writer;
	class Excluded;
	class DrainSink;
	struct MissPlan;

	MRN_HOT_INLINE bool page_range(void *addr, size_t len, uintptr_t *s, uintptr_t *e) const
	{
		const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
		if (len == 0 || a + len < a || a + len > UINTPTR_MAX - page_mask_)
			return false;
		*s = a & ~page_mask_;
		*e = (a + len + page_mask_) & ~page_mask_;
		return true;
	}
	// The validity words while they may be trusted: the monitor has them
	// and no change left marks to a drain since the one before the last
	// drain. Null otherwise (and in a forked child, whose parent's words
	// are not mapped).
	MRN_HOT_INLINE Entry *find_for(uintptr_t s, uintptr_t e, uint32_t access)
	{
		return index_.find_covering(
			s, e, [access](const Entry *y) { return (y->access & access) == access; });
	}
	template <class Section>
	MRN_HOT_INLINE void take_hit(const Section &section, Entry *c, bool by_word)
	{
		if (!keep_idle_ || !section.owns_record() || !deltas_.get(section.index(), c))
			c->refs.fetch_add(1, std::memory_order_relaxed);
		count_hit(section.index(), by_word);
	}
	// Not a hit: either a miss, or something became invalid since the
	// last drain; then the entry's own validity word may still say it
	// was not this one, and it is a hit without a drain. Else get_slow().
	int get_not_fresh(uintptr_t s, uintptr_t e, uint32_t access, void *arg, Entry **out);
	// Points the word check at the monitor's words (or at none).
	void use_words(const Monitor &m);
	const uint32_t *valid_words() const
	{
		const uint32_t *words = words_.load(std::memory_order_relaxed);
		if (!words || load_generation(deferred_ptr_.load(std::memory_order_relaxed)) !=
				      seen_deferred_.load(std::memory_order_relaxed))
			return nullptr;
		return words;
	}
	MRN_HOT_INLINE void count_hit(unsigned idx, bool by_word)
	{
		// Each thread owns its counter's line: a plain increment, no
		// locked instruction (threads beyond the record table share one
		// and may lose counts, which only statistics would notice).
		auto &h = hits_[idx];
		h.n.store(h.n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
		if (by_word)
			h.by_word.store(h.by_word.load(std::memory_order_relaxed) + 1,
					std::memory_order_relaxed);
	}
	// LRU order: the tick (moved by misses and evictions) first, then the
	// releasing thread's own sequence (its low 12 bits). Entries released by
	// different threads between the same two misses are ordered
	// arbitrarily. 32 bits wrap after a million ticks: eviction compares
	// ages (now - stamp), which stay right while they are below 2^31.
	static constexpr unsigned kSequenceBits = RefDeltas::kSequenceBits;
	MRN_HOT_INLINE uint32_t lru_stamp() const
	{
		return uint32_t(lru_tick_.load(std::memory_order_relaxed) << kSequenceBits |
				(ReaderRecords::next_sequence() & ((1u << kSequenceBits) - 1)));
	}
	// Writers are serialised (hence the Writer): a load and a store, no
	// locked instruction.
	void advance_lru_tick(Writer &)
	{
		lru_tick_.store(lru_tick_.load(std::memory_order_relaxed) + 1,
				std::memory_order_relaxed);
	}
	// A stamp no entry has yet: the next tick's first.
	uint32_t lru_now() const
	{
		return uint32_t((lru_tick_.load(std::memory_order_relaxed) + 1) << kSequenceBits);
	}
	// Entries made before a fork are the parent's: never ours to
	// deregister or free.
	bool owns(const Entry *x) const { return x->epoch == epoch_; }
	// In the index and used by nobody: its atomic count plus the threads'
	// deltas (exact with readers excluded, a guess otherwise).
	bool is_idle(const Entry *x) const
	{
		return x->state.load(std::memory_order_relaxed) == Entry::kIndexed &&
		       x->refs.load(std::memory_order_relaxed) + uint32_t(deltas_.sum(x)) ==
			       Entry::kIndexRef;
	}

	int get_slow(uintptr_t s, uintptr_t e, uint32_t access, void *arg, Entry **out);
	// released: the fast path dropped the last reference already.
	void put_slow(Entry *x, bool released);

	// The steps of a miss (see get_slow).
	MissPlan plan_miss(uintptr_t s, uintptr_t e, uint32_t access, bool merge,
			   Entry **covering) const;
	Entry *new_pending_entry(uintptr_t s, uintptr_t e, uint32_t access);
	int commit_entry(Writer &w, Entry *p, const MissPlan *plan, bool last_try);
	void abandon_entry(Writer &w, Entry *p);

	// The destructor's work: everything deregistered, in a writer section
	// of its own.
	void tear_down();
	// Everything below runs in a writer section.
	int open_monitor(Writer &w);
	void check_fork(Writer &w);
	int sync(Writer &w);
	void advise_entry(Entry *p);
	void make_uncached(Writer &w, Entry *p);
	// Taking entries out of the index: only with readers out.
	void detach(Excluded &ex, EntryStack &victims);
	void drop_idle(Excluded &ex, Entry *x);
	size_t evict(Writer &w, uint64_t bytes_needed, uint64_t entries_needed);
	Entry *pick_victim();
	bool over_limits(size_t len) const;
	void insert(Writer &w, Entry *p);
	void undo_fork_advice(Writer &w, const Entry *x);

	// These drop the writer mutex for a while, around the register and
	// deregister callbacks (slow, and free to call back into the cache):
	// when they return, an entry the caller holds no reference to may be
	// gone, the index may have changed and the monitor may have moved on.
	int prepare_entry(Writer &w, const MissPlan &plan, Entry **out); // evicts
	int register_entry(Writer &w, Entry *p, void *arg);
	int watch_entry(Writer &w, Entry *p); // evicts when the kernel is full
	void destroy_doomed(Writer &w);

	void print_stats(Writer &w);
	void stats(Writer &w, mrn_stats *out);

	std::string name_;
	mrn_register_fn reg_;
	mrn_deregister_fn dereg_;
	void *context_;
	size_t payload_size_;
	bool leave_pinned_;
	uint64_t max_pinned_;
	uint64_t max_entries_;
	mrn_fork_policy_t fork_policy_; // as configured (auto resolved below)
	bool advise_dontfork_;          // the policy in force
	uint64_t max_advised_;          // advised entries before mappings run out
	bool print_stats_;
	uintptr_t page_mask_;
	MonitorFactory open_monitor_;

	// Read by hits: lines that misses do not write (the lock's writer
	// flag and the index's table pointers change only with readers
	// excluded, seen_gen_ on drains), so a thread that misses does not
	// take the line away from threads that hit.
	CacheLock lock_;
	alignas(64) std::atomic<const uint64_t *> gen_ptr_{nullptr};
	std::atomic<uint64_t> seen_gen_{0};
	bool keep_idle_ = false;
	// The monitor's validity words and deferral count (both null without
	// words), and the count read before the last drain.
	std::atomic<const uint32_t *> words_{nullptr};
	std::atomic<const uint64_t *> deferred_ptr_{nullptr};
	std::atomic<uint64_t> seen_deferred_{0};

	// Its table pointer shares the line above (read by hits only).
	RefDeltas deltas_;
	RangeIndex index_;
	// Read by every put, moved by misses and evictions: a line of its own.
	alignas(64) std::atomic<uint64_t> lru_tick_{1};

	struct alignas(64) HitCounter {
		std::atomic<uint64_t> n{0};
		// Of those, served by a validity word while the generation had
		// moved (a drain not made).
		std::atomic<uint64_t> by_word{0};
	};
	HitCounter hits_[kMaxReaderRecords + 1];

	// Writer side.
	std::unique_ptr<Monitor> monitor_;
	mrn_monitor_t monitor_kind_ = MRN_MONITOR_NONE;
	EntryPool pool_;
	// Live entries the index does not hold: being registered, detached
	// while still in use, or uncached. Their pages are still pinned.
	EntryList unindexed_;
	size_t evict_hand_ = 0;
	uint64_t advised_ = 0;
	uint8_t epoch_ = 0;
	bool forked_ = false;
	uint64_t pinned_bytes_ = 0;
	// The writers' counts, in the public form: hits made under the writer
	// mutex, misses, evictions...; stats() adds the hits counted per thread
	// and what it counts afresh (entries, pinned bytes, the monitor's).
	mrn_stats st_{};
};

// Registry of live caches for pthread_atfork.
void register_for_fork(Cache *c);
void unregister_for_fork(Cache *c);

// What MRN_FORK_AUTO means on the running kernel.
mrn_fork_policy_t resolve_fork_policy(mrn_fork_policy_t configured);

} // namespace mrn

#endif

// SPDX-License-Identifier: BSD-3-Clause
//
// The lock that keeps cache hits cheap and scalable. A reader (a cache hit)
// marks its own thread's record active with a plain store and checks the
// cache's writer flag; it makes no atomic read-modify-write and writes no
// line another thread writes. A writer raises the flag, makes every thread
// of the process execute a full memory barrier with membarrier(2)
// (MEMBARRIER_CMD_PRIVATE_EXPEDITED), and then waits until no record is
// active. That barrier orders the reader's store before its load of the
// flag, as a fence in the reader would, but the cost falls on the writer.
// Writers are rare (invalidations, evictions, table growth) and pay for a
// system call or a registration anyway. Where membarrier is unavailable,
// readers fall back to a fence of their own.
//
// Records are process-wide (one per thread, reused after a thread exits);
// the writer flag is per cache. A writer of one cache also waits out the
// short read sections of other caches, which is harmless.
//
// Read sections nest, so a signal handler may look up a cache while the
// code it interrupted is inside a read section of the same thread. A record
// holds 0 (no section), kEntering (the outermost section has announced
// itself but not yet checked the writer flag) or kValidated times the
// depth. A section nested in a validated one needs no check: the writer
// waits for the outer one. A section nested in one that is still entering
// checks for both, and when a writer is active it retreats for both (the
// interrupted one re-checks when it resumes), so neither waits for a writer
// that waits for it. Writers never run in signal handlers (a miss in a
// handler takes the writer mutex: only hits are async-signal-safe).
//
// At thread exit a pthread key destructor gives the record back; calls made
// after it (from other key destructors) share the overflow record.
#ifndef MRN_READER_LOCK_H
#define MRN_READER_LOCK_H

#include "compiler.h"

#include <atomic>
#include <cstdint>
#include <mutex>

// ThreadSanitizer understands neither membarrier nor fences: its builds make
// every step of the protocol sequentially consistent instead (slower, but
// the same ordering, and visible to it).
#if defined(__SANITIZE_THREAD__)
#define MRN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MRN_TSAN 1
#endif
#endif

namespace mrn {

constexpr unsigned kMaxReaderRecords = 256;

// Per-thread state read on every hit: __thread (no dynamic initialisation,
// so no init wrapper) in the initial-exec model (one %fs-relative load, no
// __tls_get_addr call). 24 bytes of the static TLS surplus.
struct ReaderRecord;
struct ReaderThreadState {
	// The thread's record; kUnassignedIndex before its first section, and
	// kMaxReaderRecords (the overflow record) when none was free or once
	// the thread exits. Kept as is, not plus one, so that the hit's one
	// test (below kMaxReaderRecords) covers all three.
	unsigned index;
	uint32_t sequence;
	// The record itself while index < kMaxReaderRecords: a hit loads it
	// rather than computing it from the index.
	ReaderRecord *record;
	uint32_t overflow_state; // this thread's sections on the overflow record
};
constexpr unsigned kUnassignedIndex = ~0u;
constexpr uint32_t kEntering = 1;
constexpr uint32_t kValidated = 2;
extern __thread ReaderThreadState tls_reader __attribute__((tls_model("initial-exec")));

struct alignas(64) ReaderRecord {
	std::atomic<uint32_t> active{0};
};

// The process-wide table of reader records.
class ReaderRecords {
public:
	// The calling thread's record index; kMaxReaderRecords when all are
	// taken (such threads share the counted overflow record).
	static MRN_HOT_INLINE unsigned my_index()
	{
		const unsigned i = tls_reader.index;
		return __builtin_expect(i < kMaxReaderRecords, 1) ? i : index_slow(i);
	}
	// A number that grows with each call in this thread (LRU stamps).
	static MRN_HOT_INLINE uint32_t next_sequence() { return ++tls_reader.sequence; }
	static MRN_HOT_INLINE ReaderRecord &record(unsigned i) { return records_[i]; }
	static std::atomic<uint32_t> &overflow() { return overflow_; }
	// How many records have ever been handed out (a writer scans these).
	static unsigned high_water() { return high_water_.load(std::memory_order_acquire); }
	// True when readers may rely on the writer's membarrier.
	static MRN_HOT_INLINE bool asymmetric() { return asymmetric_; }
	// Full barrier on every thread of the process (or this one only).
	static void barrier_all_threads();
	// In a forked child only the forking thread runs: its parent's other
	// threads' records are void.
	static void reset_after_fork();

private:
	// The first section of a thread takes a record; the overflow record
	// otherwise.
	static unsigned index_slow(unsigned i) __attribute__((noinline));
	static unsigned assign_index();

public:
	// The pthread key destructor (thread exit).
	static void release_index(void *);

private:
	static ReaderRecord records_[kMaxReaderRecords];
	static std::atomic<uint32_t> overflow_;
	static std::atomic<unsigned> high_water_;
	static bool asymmetric_;
};

// What a read section tells the code it runs (CacheLock::read). Owned: the
// thread's outermost section, on a record of its own. On read()'s inline
// path that is known when compiling, so the code inside is compiled once
// without the tests; its general path tests it.
template <bool Owned>
class ReadSection {
public:
	MRN_HOT_INLINE ReadSection(unsigned idx, uint32_t prev) : idx_(idx), prev_(prev) {}
	// At most kMaxReaderRecords (the overflow record's, shared by the
	// threads beyond the records): a place in a table of that many + 1.
	MRN_HOT_INLINE unsigned index() const { return idx_; }
	// Not nested in another section of this thread (a signal handler's
	// section may be nested in the code it interrupted), and with a record
	// of its own: only such a section may write the thread's per-cache
	// state (RefDeltas).
	MRN_HOT_INLINE bool owns_record() const
	{
		return Owned || (prev_ == 0 && idx_ < kMaxReaderRecords);
	}

private:
	unsigned idx_;
	uint32_t prev_;
};

class CacheLock {
public:
	// Runs fn(section) in a read section (section: a ReadSection<true> or
	// <false>) and returns what fn returns. The common case, the
	// thread's outermost section with no writer, is inline; the rest
	// (nesting, the overflow record, a writer to wait for, the thread's
	// first section) is one out-of-line instance of fn.
	// fn should capture by value: read_general takes a copy, made on
	// that path only, so that nothing on the inline path need live in
	// memory (captures by reference cost 27 instructions a get + put).
	template <typename Fn>
	MRN_HOT_INLINE auto read(const Fn &fn)
	{
		const unsigned idx = tls_reader.index;
		if (__builtin_expect(idx < kMaxReaderRecords, 1)) {
			std::atomic<uint32_t> &a = tls_reader.record->active;
			// Only this thread (and its signal handlers) write it.
			if (__builtin_expect(a.load(std::memory_order_relaxed) == 0, 1) &&
			    __builtin_expect(enter(a), 1)) {
				auto r = fn(ReadSection<true>(idx, 0));
				a.store(0, std::memory_order_release);
				return r;
			}
		}
		return read_general(fn);
	}

	// Returns what unlock_shared() must restore. The common case (no
	// section open on this thread, no writer) is inline; nesting and
	// waiting for a writer are out of line.
	MRN_HOT_INLINE uint32_t lock_shared(unsigned idx)
	{
		if (__builtin_expect(idx < kMaxReaderRecords, 1)) {
			std::atomic<uint32_t> &a = ReaderRecords::record(idx).active;
			if (__builtin_expect(a.load(std::memory_order_relaxed) == 0, 1) &&
			    __builtin_expect(enter(a), 1))
				return 0;
			return lock_record_slow(a);
		}
		return lock_overflow();
	}
	MRN_HOT_INLINE void unlock_shared(unsigned idx, uint32_t prev)
	{
		if (__builtin_expect(idx < kMaxReaderRecords, 1))
			ReaderRecords::record(idx).active.store(prev, std::memory_order_release);
		else
			unlock_overflow(prev);
	}

	// Writers hold writer_mutex(); work that readers may watch (inserting
	// into the index) needs only that, work that readers must not watch
	// (removing, freeing) also needs exclude_readers().
	std::mutex &writer_mutex()
	{
		return writer_mutex_;
	}
	void exclude_readers();
	void admit_readers()
	{
		writer_.store(false, std::memory_order_release);
	}
	void reset_after_fork()
	{
		writer_.store(false, std::memory_order_relaxed);
	}

private:
	// The outermost section on record a (0): validated (true), or retreated
	// from a writer (false, a back to 0).
	MRN_HOT_INLINE bool enter(std::atomic<uint32_t> &a)
	{
#ifdef MRN_TSAN
		a.exchange(kEntering, std::memory_order_seq_cst);
		if (!writer_.load(std::memory_order_seq_cst)) {
#else
		a.store(kEntering, std::memory_order_relaxed);
		// Paired with the writer's membarrier (or, without it, the fence
		// in exclude_readers): either the writer sees this record active,
		// or we see its flag.
		if (ReaderRecords::asymmetric())
			std::atomic_signal_fence(std::memory_order_seq_cst);
		else
			std::atomic_thread_fence(std::memory_order_seq_cst);
		if (__builtin_expect(!writer_.load(std::memory_order_acquire), 1)) {
#endif
			a.store(kValidated, std::memory_order_relaxed);
			return true;
		}
		// A writer: retreat; the release pairs with the writer's acquire
		// load of the record.
		a.store(0, std::memory_order_release);
		return false;
	}
	template <typename Fn>
	__attribute__((noinline)) auto read_general(Fn fn);
	void wait_for_writer() const;
	// Nested sections, and waiting for a writer (see the top of the file).
	uint32_t lock_record_slow(std::atomic<uint32_t> &a) __attribute__((noinline));
	// Threads beyond the record table share a counter; the same nesting
	// rules, with this thread's part kept in tls_reader.overflow_state.
	uint32_t lock_overflow();
	void unlock_overflow(uint32_t prev);

	// Every hit reads the flag; every miss writes the mutex: one line
	// each, so that misses do not steal the flag's line from hitting
	// threads.
	alignas(64) std::atomic<bool> writer_{false};
	alignas(64) std::mutex writer_mutex_;
};

class SharedGuard {
public:
	explicit MRN_HOT_INLINE SharedGuard(CacheLock &l)
	    : lock_(l), idx_(ReaderRecords::my_index()), prev_(lock_.lock_shared(idx_))
	{}
	MRN_HOT_INLINE ~SharedGuard() { lock_.unlock_shared(idx_, prev_); }
	SharedGuard(const SharedGuard &) = delete;
	SharedGuard &operator=(const SharedGuard &) = delete;
	MRN_HOT_INLINE ReadSection<false> section() const { return {idx_, prev_}; }

private:
	CacheLock &lock_;
	unsigned idx_;
	uint32_t prev_;
};

template <typename Fn>
auto CacheLock::read_general(Fn fn)
{
	SharedGuard g(*this);
	return fn(g.section());
}

// Readers kept out for as long as it lives; the writer mutex must be held.
class ExclusiveGuard {
public:
	explicit ExclusiveGuard(CacheLock &l) : lock_(l) { lock_.exclude_readers(); }
	~ExclusiveGuard() { lock_.admit_readers(); }
	ExclusiveGuard(const ExclusiveGuard &) = delete;
	ExclusiveGuard &operator=(const ExclusiveGuard &) = delete;

private:
	CacheLock &lock_;
};

} // namespace mrn

#endif

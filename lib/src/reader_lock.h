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
#ifndef MRN_READER_LOCK_H
#define MRN_READER_LOCK_H

#include <atomic>
#include <cstdint>
#include <mutex>

namespace mrn {

constexpr unsigned kMaxReaderRecords = 256;

// Per-thread state read on every hit: __thread (no dynamic initialisation,
// so no init wrapper) in the initial-exec model (one %fs-relative load, no
// __tls_get_addr call). Eight bytes of the static TLS surplus.
struct ReaderThreadState {
	unsigned index_plus_one;
	uint32_t sequence;
};
extern __thread ReaderThreadState tls_reader __attribute__((tls_model("initial-exec")));

struct alignas(64) ReaderRecord {
	std::atomic<uint32_t> active{0};
};

// The process-wide table of reader records.
class ReaderRecords {
public:
	// The calling thread's record index; kMaxReaderRecords when all are
	// taken (such threads share the counted overflow record).
	static unsigned my_index()
	{
		const unsigned i = tls_reader.index_plus_one;
		return __builtin_expect(i != 0, 1) ? i - 1 : assign_index();
	}
	// A number that grows with each call in this thread (LRU stamps).
	static uint32_t next_sequence() { return ++tls_reader.sequence; }
	static ReaderRecord &record(unsigned i) { return records_[i]; }
	static std::atomic<uint32_t> &overflow() { return overflow_; }
	// How many records have ever been handed out (a writer scans these).
	static unsigned high_water() { return high_water_.load(std::memory_order_acquire); }
	// True when readers may rely on the writer's membarrier.
	static bool asymmetric() { return asymmetric_; }
	// Full barrier on every thread of the process (or this one only).
	static void barrier_all_threads();
	// In a forked child only the forking thread runs: its parent's other
	// threads' records are void.
	static void reset_after_fork();

private:
	// Gives the record back when the thread exits.
	struct Holder {
		~Holder();
		unsigned index = kMaxReaderRecords;
	};
	static unsigned assign_index();
	static ReaderRecord records_[kMaxReaderRecords];
	static std::atomic<uint32_t> overflow_;
	static std::atomic<unsigned> high_water_;
	static bool asymmetric_;
};

class CacheLock {
public:
	void lock_shared(unsigned idx)
	{
		if (__builtin_expect(idx < kMaxReaderRecords, 1)) {
			std::atomic<uint32_t> &a = ReaderRecords::record(idx).active;
			for (;;) {
				a.store(1, std::memory_order_relaxed);
				if (ReaderRecords::asymmetric())
					std::atomic_signal_fence(std::memory_order_seq_cst);
				else
					std::atomic_thread_fence(std::memory_order_seq_cst);
				if (!writer_.load(std::memory_order_acquire))
					return;
				a.store(0, std::memory_order_release);
				wait_for_writer();
			}
		}
		for (;;) {
			ReaderRecords::overflow().fetch_add(1, std::memory_order_seq_cst);
			if (!writer_.load(std::memory_order_seq_cst))
				return;
			ReaderRecords::overflow().fetch_sub(1, std::memory_order_release);
			wait_for_writer();
		}
	}
	void unlock_shared(unsigned idx)
	{
		if (__builtin_expect(idx < kMaxReaderRecords, 1))
			ReaderRecords::record(idx).active.store(0, std::memory_order_release);
		else
			ReaderRecords::overflow().fetch_sub(1, std::memory_order_release);
	}

	// Writers hold writer_mutex(); work that readers may watch (inserting
	// into the index) needs only that, work that readers must not watch
	// (removing, freeing) also needs exclude_readers().
	std::mutex &writer_mutex() { return writer_mutex_; }
	void exclude_readers();
	void admit_readers() { writer_.store(false, std::memory_order_release); }
	void reset_after_fork() { writer_.store(false, std::memory_order_relaxed); }

private:
	void wait_for_writer() const;

	alignas(64) std::atomic<bool> writer_{false};
	std::mutex writer_mutex_;
};

class SharedGuard {
public:
	explicit SharedGuard(CacheLock &l) : lock_(l), idx_(ReaderRecords::my_index())
	{
		lock_.lock_shared(idx_);
	}
	~SharedGuard() { lock_.unlock_shared(idx_); }
	SharedGuard(const SharedGuard &) = delete;
	SharedGuard &operator=(const SharedGuard &) = delete;
	unsigned index() const { return idx_; }

private:
	CacheLock &lock_;
	unsigned idx_;
};

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

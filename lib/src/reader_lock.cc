// SPDX-License-Identifier: BSD-3-Clause
#include "reader_lock.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace mrn {

namespace {

long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

bool register_membarrier()
{
#ifdef MRN_TSAN
	return false; // see MRN_TSAN in reader_lock.h
#endif
	const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return false;
	return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

std::mutex &free_list_mutex()
{
	static std::mutex m;
	return m;
}

// Records given back by exited threads: a fixed stack, so that thread exit
// never allocates.
struct FreeRecords {
	unsigned index[kMaxReaderRecords];
	unsigned count;
};
FreeRecords free_records;

} // namespace

std::atomic<uint32_t> ReaderRecords::overflow_{0};
std::atomic<unsigned> ReaderRecords::high_water_{0};
bool ReaderRecords::asymmetric_ = register_membarrier();

__thread ReaderThreadState tls_reader __attribute__((tls_model("initial-exec"))) = {
	kUnassignedIndex, 0, nullptr, 0};
ReaderRecord ReaderRecords::records_[kMaxReaderRecords];

// A thread whose record was given back at exit uses the overflow record.
constexpr unsigned kExitedIndex = kMaxReaderRecords;

pthread_key_t &exit_key()
{
	static pthread_key_t key;
	static const int rc = pthread_key_create(&key, &ReaderRecords::release_index);
	(void)rc; // without a key, records of exited threads are simply not reused
	return key;
}

unsigned ReaderRecords::index_slow(unsigned i)
{
	return i == kUnassignedIndex ? assign_index() : kMaxReaderRecords;
}

unsigned ReaderRecords::assign_index()
{
	unsigned index = kMaxReaderRecords;
	{
		std::lock_guard<std::mutex> g(free_list_mutex());
		if (free_records.count) {
			index = free_records.index[--free_records.count];
		} else if (high_water_.load(std::memory_order_relaxed) < kMaxReaderRecords) {
			index = high_water_.load(std::memory_order_relaxed);
			high_water_.store(index + 1, std::memory_order_release);
		}
	}
	tls_reader.index = index;
	tls_reader.record = index < kMaxReaderRecords ? &records_[index] : nullptr;
	// A pthread key rather than a thread_local object: its destructor runs
	// after the thread's C++ thread_local destructors, which may still
	// use a cache, and the state it leaves is plain __thread data that is
	// never destroyed.
	if (index < kMaxReaderRecords)
		(void)pthread_setspecific(exit_key(),
					  reinterpret_cast<void *>(uintptr_t(index) + 1));
	return index;
}

void ReaderRecords::release_index(void *value)
{
	const unsigned index = unsigned(reinterpret_cast<uintptr_t>(value) - 1);
	// Calls after this one (other key destructors) use the overflow record.
	tls_reader.index = kExitedIndex;
	tls_reader.record = nullptr;
	if (index >= kMaxReaderRecords)
		return;
	records_[index].active.store(0, std::memory_order_release);
	std::lock_guard<std::mutex> g(free_list_mutex());
	free_records.index[free_records.count++] = index;
}

void ReaderRecords::barrier_all_threads()
{
	if (!asymmetric_) {
#ifndef MRN_TSAN
		std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
		return;
	}
	// Readers rely on this barrier instead of a fence of their own: without
	// it a writer could free what a reader is reading. It cannot fail once
	// registered; if it does, stop rather than corrupt memory.
	if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
		std::fprintf(stderr, "libmrnotify: membarrier(PRIVATE_EXPEDITED) failed: %s\n",
			     std::strerror(errno));
		std::abort();
	}
}

void ReaderRecords::reset_after_fork()
{
	for (unsigned i = 0; i < kMaxReaderRecords; i++)
		records_[i].active.store(0, std::memory_order_relaxed);
	overflow_.store(0, std::memory_order_relaxed);
	// The registration belongs to the address space: the child's is new.
	if (asymmetric_)
		asymmetric_ = register_membarrier();
}

void CacheLock::exclude_readers()
{
	writer_.store(true, std::memory_order_seq_cst);
	// Paired with the readers' fence (or compiler barrier) in lock_shared.
	ReaderRecords::barrier_all_threads();
	const unsigned n = ReaderRecords::high_water();
#ifdef MRN_TSAN
	constexpr auto order = std::memory_order_seq_cst;
#else
	constexpr auto order = std::memory_order_acquire;
#endif
	for (unsigned i = 0; i < n; i++)
		while (ReaderRecords::record(i).active.load(order))
			std::this_thread::yield();
	while (ReaderRecords::overflow().load(std::memory_order_acquire))
		std::this_thread::yield();
}

void CacheLock::wait_for_writer() const
{
	while (writer_.load(std::memory_order_acquire))
		std::this_thread::yield();
}

uint32_t CacheLock::lock_record_slow(std::atomic<uint32_t> &a)
{
	const uint32_t prev = a.load(std::memory_order_relaxed);
	if (prev >= kValidated) {
		// Nested in a validated section: the writer waits for that one.
		a.store(prev + kValidated, std::memory_order_relaxed);
		return prev;
	}
	// Announce (again, after a retreat: for an interrupted entering
	// section too, which re-checks the writer flag itself when it
	// resumes), then check for a writer.
	for (;;) {
#ifdef MRN_TSAN
		a.exchange(kEntering, std::memory_order_seq_cst);
		if (!writer_.load(std::memory_order_seq_cst)) {
#else
		a.store(kEntering, std::memory_order_relaxed);
		std::atomic_thread_fence(std::memory_order_seq_cst);
		if (!writer_.load(std::memory_order_acquire)) {
#endif
			a.store(kValidated, std::memory_order_relaxed);
			return prev;
		}
		// Retreat (for the interrupted section too, if any) and wait.
		a.store(0, std::memory_order_release);
		wait_for_writer();
	}
}

// The overflow record counts sections of many threads, so it cannot hold a
// thread's state: each thread adds kEntering while entering and kValidated
// per validated section, and remembers how much in tls_reader.
uint32_t CacheLock::lock_overflow()
{
	std::atomic<uint32_t> &o = ReaderRecords::overflow();
	uint32_t &mine = tls_reader.overflow_state;
	const uint32_t prev = mine;
	if (prev >= kValidated) {
		o.fetch_add(kValidated, std::memory_order_relaxed);
		mine = prev + kValidated;
		return prev;
	}
	if (prev == 0) {
		o.fetch_add(kEntering, std::memory_order_seq_cst);
		mine = kEntering;
	}
	// This thread has kEntering on the record: its own, or that of the
	// section this one interrupted.
	for (;;) {
		if (!writer_.load(std::memory_order_seq_cst)) {
			const uint32_t now = prev == 0 ? kValidated : kEntering + kValidated;
			o.fetch_add(now - kEntering, std::memory_order_relaxed);
			mine = now;
			return prev;
		}
		o.fetch_sub(kEntering, std::memory_order_release);
		mine = 0;
		wait_for_writer();
		o.fetch_add(kEntering, std::memory_order_seq_cst);
		mine = kEntering;
	}
}

void CacheLock::unlock_overflow(uint32_t prev)
{
	uint32_t &mine = tls_reader.overflow_state;
	ReaderRecords::overflow().fetch_sub(mine - prev, std::memory_order_release);
	mine = prev;
}

} // namespace mrn

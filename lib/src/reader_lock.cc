// SPDX-License-Identifier: BSD-3-Clause
#include "reader_lock.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace mrn {

namespace {

long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

bool register_membarrier()
{
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

std::vector<unsigned> &free_list()
{
	static std::vector<unsigned> v;
	return v;
}

} // namespace

std::atomic<uint32_t> ReaderRecords::overflow_{0};
std::atomic<unsigned> ReaderRecords::high_water_{0};
bool ReaderRecords::asymmetric_ = register_membarrier();

__thread ReaderThreadState tls_reader __attribute__((tls_model("initial-exec")));
ReaderRecord ReaderRecords::records_[kMaxReaderRecords];

unsigned ReaderRecords::assign_index()
{
	thread_local Holder holder;
	unsigned index = kMaxReaderRecords;
	{
		std::lock_guard<std::mutex> g(free_list_mutex());
		auto &fl = free_list();
		if (!fl.empty()) {
			index = fl.back();
			fl.pop_back();
		} else if (high_water_.load(std::memory_order_relaxed) < kMaxReaderRecords) {
			index = high_water_.load(std::memory_order_relaxed);
			high_water_.store(index + 1, std::memory_order_release);
		}
	}
	holder.index = index;
	tls_reader.index_plus_one = index + 1;
	return index;
}

ReaderRecords::Holder::~Holder()
{
	tls_reader.index_plus_one = 0;
	if (index >= kMaxReaderRecords)
		return;
	std::lock_guard<std::mutex> g(free_list_mutex());
	free_list().push_back(index);
}

void ReaderRecords::barrier_all_threads()
{
	if (asymmetric_ && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return;
	std::atomic_thread_fence(std::memory_order_seq_cst);
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
	ReaderRecords::barrier_all_threads();
	const unsigned n = ReaderRecords::high_water();
	for (unsigned i = 0; i < n; i++)
		while (ReaderRecords::record(i).active.load(std::memory_order_acquire))
			std::this_thread::yield();
	while (ReaderRecords::overflow().load(std::memory_order_acquire))
		std::this_thread::yield();
}

void CacheLock::wait_for_writer() const
{
	while (writer_.load(std::memory_order_acquire))
		std::this_thread::yield();
}

} // namespace mrn

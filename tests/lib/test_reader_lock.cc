// SPDX-License-Identifier: BSD-3-Clause
//
// The reader lock (#10): read sections nest (a signal handler's hit inside
// a section of the thread it interrupted must not end that section), and a
// thread's record survives its C++ thread_local destructors and is given
// back at exit.
#include "reader_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

namespace mrn {
namespace {

CacheLock lock;

// True if a writer gets past exclude_readers() within the time given (it
// must not while a read section is open).
bool writer_passes_within(std::chrono::milliseconds ms, std::thread *writer,
			  std::atomic<bool> *passed)
{
	*writer = std::thread([passed] {
		std::lock_guard<std::mutex> g(lock.writer_mutex());
		lock.exclude_readers();
		passed->store(true);
		lock.admit_readers();
	});
	std::this_thread::sleep_for(ms);
	return passed->load();
}

void hit_in_handler(int)
{
	SharedGuard g(lock);
}

TEST(ReaderLock, SignalHandlerSectionKeepsTheInterruptedOneOpen)
{
	struct sigaction sa = {};
	sa.sa_handler = hit_in_handler;
	ASSERT_EQ(0, sigaction(SIGUSR1, &sa, nullptr));
	std::thread writer;
	std::atomic<bool> passed{false};
	{
		SharedGuard outer(lock);
		ASSERT_EQ(0, raise(SIGUSR1)); // a hit from a handler, nested
		EXPECT_FALSE(writer_passes_within(std::chrono::milliseconds(100), &writer, &passed))
			<< "the handler's section ended the interrupted one";
	}
	writer.join();
	EXPECT_TRUE(passed.load());
	signal(SIGUSR1, SIG_DFL);
}

TEST(ReaderLock, NestedSectionsAndAWaitingWriter)
{
	std::thread writer;
	std::atomic<bool> passed{false};
	{
		SharedGuard outer(lock);
		EXPECT_FALSE(writer_passes_within(std::chrono::milliseconds(50), &writer, &passed));
		// The writer waits for us: a nested section must not wait for it.
		{
			SharedGuard inner(lock);
		}
		EXPECT_FALSE(passed.load());
	}
	writer.join();
	EXPECT_TRUE(passed.load());
}

// Used from a thread_local destructor that runs after the library's own
// per-thread state was set up, the lock used to take a new record that was
// never given back: 256 such threads exhausted the table.
struct LateUser {
	~LateUser() { SharedGuard g(lock); }
	void touch() {}
};

TEST(ReaderLock, RecordsOfExitedThreadsAreReused)
{
	for (unsigned i = 0; i < kMaxReaderRecords + 50; i++) {
		std::thread([] {
			thread_local LateUser late; // constructed before the record
			late.touch();
			SharedGuard g(lock);
		}).join();
	}
	unsigned index = kMaxReaderRecords;
	std::thread([&] { index = ReaderRecords::my_index(); }).join();
	EXPECT_LT(index, kMaxReaderRecords) << "records leaked at thread exit";
}

} // namespace
} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
//
// Fork: the child starts with empty caches. Before fork every cache's writer
// mutex is taken, so that no cache is caught half-modified; the child then
// marks each cache forked (its next use resets it and opens a new monitor)
// and voids the reader records of the threads it did not inherit.
#include "cache.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace mrn {

namespace {

std::mutex &registry_mutex()
{
	static std::mutex m;
	return m;
}

std::vector<Cache *> &registry()
{
	static std::vector<Cache *> caches;
	return caches;
}

void prepare()
{
	registry_mutex().lock();
	for (Cache *c : registry())
		c->fork_prepare();
}

void parent()
{
	for (Cache *c : registry())
		c->fork_parent();
	registry_mutex().unlock();
}

void child()
{
	ReaderRecords::reset_after_fork();
	for (Cache *c : registry())
		c->fork_child();
	registry_mutex().unlock();
}

} // namespace

void register_for_fork(Cache *c)
{
	static std::once_flag once;
	std::call_once(once, [] { pthread_atfork(prepare, parent, child); });
	std::lock_guard<std::mutex> g(registry_mutex());
	registry().push_back(c);
}

void unregister_for_fork(Cache *c)
{
	std::lock_guard<std::mutex> g(registry_mutex());
	auto &r = registry();
	r.erase(std::remove(r.begin(), r.end(), c), r.end());
}

} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
//
// Fork: the pthread_atfork handlers that drive the sequence described in
// cache.h, and what the fork policy `auto` means on the running kernel.
#include "cache.h"

#include <pthread.h>
#include <sys/utsname.h>

#include <cstdio>

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

// Since Linux 5.13 fork() gives the child copies of pages pinned for DMA
// (anonymous and hugetlb) at once instead of sharing them copy-on-write, so
// the parent keeps the pages its NIC uses whatever either process writes
// afterwards; rdma-core's ibv_is_fork_initialized() reports
// IBV_FORK_UNNEEDED there. Older kernels need MADV_DONTFORK.
mrn_fork_policy_t resolve_fork_policy(mrn_fork_policy_t configured)
{
	if (configured != MRN_FORK_AUTO)
		return configured;
	utsname u{};
	unsigned major = 0, minor = 0;
	if (uname(&u) != 0 || std::sscanf(u.release, "%u.%u", &major, &minor) != 2)
		return MRN_FORK_DONTFORK; // cannot tell: the safe choice
	return (major > 5 || (major == 5 && minor >= 13)) ? MRN_FORK_NONE : MRN_FORK_DONTFORK;
}

} // namespace mrn

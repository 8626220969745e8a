// SPDX-License-Identifier: BSD-3-Clause
// UCX's registration cache (ucs_rcache, UCX 1.13 public API) driven the way
// the benchmark drives ours: same dummy register function, same ranges.
#ifndef MRN_BENCH_UCS_BASELINE_H
#define MRN_BENCH_UCS_BASELINE_H

#include <cstddef>
#include <string>

struct ucs_rcache;
struct ucs_rcache_region;

namespace mrn::bench {

class UcsRcache {
public:
	// Throws std::runtime_error when the cache cannot be created.
	UcsRcache();
	~UcsRcache();
	UcsRcache(const UcsRcache &) = delete;
	UcsRcache &operator=(const UcsRcache &) = delete;

	// ucs_rcache_get and ucs_rcache_region_put: calls into libucs, under
	// the cache's lock (what UCT's caches and UCP before 1.14 use).
	ucs_rcache_region *get(void *addr, size_t len);
	void put(ucs_rcache_region *r);
	// UCP's own hit from 1.14 on: ucs_rcache_lookup_unsafe and
	// ucs_rcache_region_put_unsafe, inlined, no lock and no atomic (UCP
	// holds its context's lock, which is nothing in a single-threaded
	// context); a lookup that finds nothing falls back to get(), as UCP
	// does. Only with UCX's source (configure --with-ucx-source); see
	// unsafe_missing().
	ucs_rcache_region *get_unsafe(void *addr, size_t len);
	void put_unsafe(ucs_rcache_region *r);
	// Why get_unsafe() cannot be measured here, or empty.
	static std::string unsafe_missing();
	const std::string &description() const { return description_; }
	size_t registrations() const { return registrations_; }

private:
	ucs_rcache *rcache_ = nullptr;
	std::string description_;
	size_t registrations_ = 0;
	friend struct UcsOps;
};

} // namespace mrn::bench

#endif

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

	ucs_rcache_region *get(void *addr, size_t len);
	void put(ucs_rcache_region *r);
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

// SPDX-License-Identifier: BSD-3-Clause
//
// The benchmarks' caches: the MRNOTIFY_* environment, then what each
// benchmark sets; throws when the cache cannot be made.
#ifndef MRN_BENCH_CACHE_H
#define MRN_BENCH_CACHE_H

#include "cache.h"

#include <memory>
#include <stdexcept>
#include <string>

namespace mrn::bench {

struct CacheOptions {
	const char *name = "bench";
	mrn_register_fn reg = nullptr;
	mrn_deregister_fn dereg = nullptr;
	size_t payload_size = 8;
	// ucs_rcache does not madvise either; DONTFORK per 4 KiB entry would
	// also split the mapping into a million VMAs.
	mrn_fork_policy_t fork_policy = MRN_FORK_NONE;
	uint64_t max_entries = 0;
	// The hit path is the same for every monitor. Nothing reports unmaps to
	// an external one, so its counter never moves, and benchmarks need
	// neither the module nor uffd registrations.
	mrn_monitor_t monitor = MRN_MONITOR_EXTERNAL;
	// Opens the monitor instead of `monitor` when set.
	Cache::MonitorFactory open;
};

inline std::unique_ptr<Cache> make_cache(const CacheOptions &o)
{
	mrn_config c;
	if (mrn_config_init(&c) < 0)
		throw std::runtime_error("bad MRNOTIFY_* environment");
	c.name = o.name;
	c.reg = o.reg;
	c.dereg = o.dereg;
	c.payload_size = o.payload_size;
	c.fork_policy = o.fork_policy;
	c.max_entries = o.max_entries;
	c.monitor = o.monitor;
	std::unique_ptr<Cache> cache;
	const mrn_monitor_t monitor = o.monitor;
	Cache::MonitorFactory open = o.open;
	if (!open)
		open = [monitor](std::unique_ptr<Monitor> *m, std::string *why) {
			return open_monitor(monitor, m, why);
		};
	const int rc = Cache::create(c, open, &cache);
	if (rc < 0)
		throw std::runtime_error(std::string("cannot create the cache ") + o.name);
	return cache;
}

} // namespace mrn::bench

#endif

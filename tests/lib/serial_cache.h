// SPDX-License-Identifier: BSD-3-Clause
//
// A cache through the public API whose register function numbers its
// registrations, so that a test can tell a hit (the same serial) from a
// new registration.
#ifndef MRN_TESTS_SERIAL_CACHE_H
#define MRN_TESTS_SERIAL_CACHE_H

#include "mrnotify.h"

#include <gtest/gtest.h>

namespace mrn::test {

class SerialCache {
public:
	struct Books {
		int registered = 0, deregistered = 0;
	};

	SerialCache() = default;
	SerialCache(const SerialCache &) = delete;
	SerialCache &operator=(const SerialCache &) = delete;
	~SerialCache() { destroy(); }

	// 0, or what mrn_cache_create returned.
	int create(mrn_monitor_t monitor)
	{
		mrn_config cfg;
		if (const int rc = mrn_config_init(&cfg); rc != 0)
			return rc;
		cfg.monitor = monitor;
		cfg.payload_size = sizeof(int);
		cfg.context = &books;
		cfg.reg = [](void *ctx, void *, void *, size_t, uint32_t, void *payload) {
			*static_cast<int *>(payload) = ++static_cast<Books *>(ctx)->registered;
			return 0;
		};
		cfg.dereg = [](void *ctx, void *) {
			static_cast<Books *>(ctx)->deregistered++;
			return 0;
		};
		return mrn_cache_create(&cfg, &cache);
	}
	void destroy()
	{
		if (cache)
			mrn_cache_destroy(cache);
		cache = nullptr;
	}
	// get + put; returns the registration's serial.
	int use(void *p, size_t len)
	{
		mrn_entry_t *e = nullptr;
		EXPECT_EQ(0, mrn_get(cache, p, len, 1, nullptr, &e));
		if (!e)
			return -1;
		const int serial = *static_cast<int *>(mrn_entry_payload(e));
		mrn_put(cache, e);
		return serial;
	}
	mrn_stats stats()
	{
		mrn_stats s{};
		EXPECT_EQ(0, mrn_cache_stats(cache, &s, sizeof(s)));
		return s;
	}

	Books books;
	mrn_cache_t *cache = nullptr;
};

} // namespace mrn::test

#endif

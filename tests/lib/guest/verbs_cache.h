// SPDX-License-Identifier: BSD-3-Clause
//
// libmrnotify driving real ibv_reg_mr on rxe0, for guest tests and the demo.
// Each registration's payload keeps the ibv_mr and the page frames it
// pinned (the pagemap oracle's snapshot, taken right after the pin).
#ifndef MRN_TESTS_VERBS_CACHE_H
#define MRN_TESTS_VERBS_CACHE_H

#include "mrnotify.h"
#include "harness/pagemap_oracle.h"
#include "harness/rc_loopback.h"

#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

namespace mrn::test {

struct VerbsReg {
	ibv_mr *mr;
	std::unique_ptr<PinnedSnapshot> pinned;
	uint64_t serial;
};

class VerbsCache {
public:
	VerbsCache(ibv_pd *pd, mrn_monitor_t monitor, bool leave_pinned = true) : pd_(pd)
	{
		mrn_config c;
		if (mrn_config_init(&c) < 0)
			throw std::runtime_error("bad MRNOTIFY_* environment");
		c.name = "verbs-test";
		c.monitor = monitor;
		c.leave_pinned = leave_pinned;
		c.payload_size = sizeof(VerbsReg);
		c.context = this;
		c.reg = reg;
		c.dereg = dereg;
		const int rc = mrn_cache_create(&c, &cache_);
		if (rc < 0)
			throw std::runtime_error("mrn_cache_create: " + std::to_string(rc));
	}
	~VerbsCache() { destroy(); }
	// Destroys the cache now (live() then tells whether anything leaked).
	void destroy()
	{
		if (cache_)
			mrn_cache_destroy(cache_);
		cache_ = nullptr;
	}
	VerbsCache(const VerbsCache &) = delete;
	VerbsCache &operator=(const VerbsCache &) = delete;

	// A referenced entry covering [addr, addr + len); throws on failure.
	mrn_entry_t *get(void *addr, size_t len, uint32_t access = kFullAccess)
	{
		mrn_entry_t *e = nullptr;
		const int rc = mrn_get(cache_, addr, len, access, nullptr, &e);
		if (rc < 0)
			throw std::runtime_error("mrn_get: " + std::to_string(rc));
		return e;
	}
	void put(mrn_entry_t *e) { mrn_put(cache_, e); }
	static VerbsReg &reg_of(mrn_entry_t *e)
	{
		return *static_cast<VerbsReg *>(mrn_entry_payload(e));
	}
	mrn_cache_t *raw() const { return cache_; }
	mrn_stats stats() const
	{
		mrn_stats s{};
		mrn_cache_stats(cache_, &s, sizeof(s));
		return s;
	}
	uint64_t registrations() const { return serial_.load(); }
	int64_t live() const { return live_.load(); }

private:
	static int reg(void *ctx, void *, void *addr, size_t len, uint32_t access, void *payload)
	{
		auto *self = static_cast<VerbsCache *>(ctx);
		ibv_mr *mr = ibv_reg_mr(self->pd_, addr, len, int(access));
		if (!mr)
			return -errno;
		try {
			auto *r = new (payload) VerbsReg{
				mr, std::make_unique<PinnedSnapshot>(addr, len), ++self->serial_};
			(void)r;
		} catch (...) {
			ibv_dereg_mr(mr);
			return -ENOMEM;
		}
		self->live_++;
		return 0;
	}
	static int dereg(void *ctx, void *payload)
	{
		auto *self = static_cast<VerbsCache *>(ctx);
		auto *r = static_cast<VerbsReg *>(payload);
		const int rc = ibv_dereg_mr(r->mr);
		r->~VerbsReg();
		self->live_--;
		return rc ? -rc : 0;
	}

	ibv_pd *pd_;
	mrn_cache_t *cache_ = nullptr;
	std::atomic<uint64_t> serial_{0};
	std::atomic<int64_t> live_{0};
};

} // namespace mrn::test

#endif

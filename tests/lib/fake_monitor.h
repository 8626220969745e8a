// SPDX-License-Identifier: BSD-3-Clause
//
// Test doubles for the cache: a monitor that behaves like mrnotify.ko
// (one-shot registrations, a generation, a dirty list drained by cookie) or,
// in range mode, like the uffd monitor; and a register function that keeps
// books on what is registered.
#ifndef MRN_TESTS_FAKE_MONITOR_H
#define MRN_TESTS_FAKE_MONITOR_H

#include "cache.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace mrn::test {

class FakeMonitor final : public Monitor {
public:
	explicit FakeMonitor(bool range_mode = false, bool keeps_idle = true)
	    : range_mode_(range_mode), keeps_idle_(keeps_idle)
	{}
	mrn_monitor_t kind() const override { return MRN_MONITOR_KERNEL; }
	const uint64_t *generation() const override { return &gen_; }
	bool keeps_idle_entries() const override { return keeps_idle_; }
	void abandon_after_fork() override { abandoned = true; }

	int watch(uintptr_t s, uintptr_t e, uint64_t cookie, uint64_t *id) override
	{
		std::lock_guard<std::mutex> g(m_);
		if (fail_track)
			return fail_track;
		// The kernel's cap on registrations (ENOSPC).
		if (max_tracked && tracked_.size() + dirty_.size() >= max_tracked)
			return -ENOSPC;
		*id = next_id_++;
		tracked_[*id] = Reg{s, e, cookie};
		return 0;
	}
	int unwatch(uint64_t id) override
	{
		std::lock_guard<std::mutex> g(m_);
		if (tracked_.erase(id))
			return 0;
		for (auto it = dirty_.begin(); it != dirty_.end(); ++it)
			if (it->id == id) {
				dirty_.erase(it);
				return 1;
			}
		return -ENOENT;
	}
	int drain(InvalidationSink &sink, uint64_t *gen) override
	{
		std::vector<Dirty> d;
		std::vector<std::pair<uintptr_t, uintptr_t>> r;
		{
			std::lock_guard<std::mutex> g(m_);
			// A failed drain leaves the dirty list as it was.
			if (fail_drain)
				return fail_drain;
			d.swap(dirty_);
			r.swap(ranges_);
			*gen = __atomic_load_n(&gen_, __ATOMIC_ACQUIRE);
			drains++;
		}
		for (const Dirty &x : d)
			sink.invalidate_cookie(x.cookie, x.id, x.start, x.end);
		for (auto [s, e] : r)
			sink.invalidate_range(s, e);
		return 0;
	}

	// What the kernel does when [s, e) is unmapped: every overlapping
	// registration goes to the dirty list once, and the generation moves.
	void unmap(uintptr_t s, uintptr_t e)
	{
		std::lock_guard<std::mutex> g(m_);
		if (range_mode_) {
			ranges_.emplace_back(s, e);
			__atomic_fetch_add(&gen_, 1, __ATOMIC_RELEASE);
			return;
		}
		for (auto it = tracked_.begin(); it != tracked_.end();) {
			if (it->second.start < e && s < it->second.end) {
				dirty_.push_back(Dirty{it->second.cookie, it->first,
						       it->second.start, it->second.end});
				it = tracked_.erase(it);
				__atomic_fetch_add(&gen_, 1, __ATOMIC_RELEASE);
			} else {
				++it;
			}
		}
	}
	size_t watched() const
	{
		std::lock_guard<std::mutex> g(m_);
		return tracked_.size() + dirty_.size();
	}

	int fail_track = 0;
	int fail_drain = 0;
	size_t max_tracked = 0;
	std::atomic<int> drains{0};
	bool abandoned = false;

private:
	struct Reg {
		uintptr_t start, end;
		uint64_t cookie;
	};
	struct Dirty {
		uint64_t cookie, id;
		uintptr_t start, end;
	};
	mutable std::mutex m_;
	bool range_mode_;
	bool keeps_idle_;
	uint64_t gen_ = 0;
	uint64_t next_id_ = 1;
	std::map<uint64_t, Reg> tracked_;
	std::vector<Dirty> dirty_;
	std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
};

// The payload the fake register function fills in.
struct FakeReg {
	uint64_t serial;
	uintptr_t addr;
	size_t len;
	uint32_t access;
	uint64_t made; // FakeRegistrar::clock() when it was registered
};

// Books of registrations: live ones by serial, counts, and hooks.
struct FakeRegistrar {
	std::mutex m;
	uint64_t next = 1;
	std::map<uint64_t, FakeReg> live;
	uint64_t registered = 0, deregistered = 0;
	std::function<int(const FakeReg &)> on_register; // may fail or unmap
	std::function<uint64_t()> clock;                 // stamps FakeReg::made
	std::set<uint64_t> dereg_errors;                 // serials deregistered twice

	static int reg(void *ctx, void *, void *addr, size_t len, uint32_t access, void *payload)
	{
		auto *self = static_cast<FakeRegistrar *>(ctx);
		FakeReg r{0, reinterpret_cast<uintptr_t>(addr), len, access,
			  self->clock ? self->clock() : 0};
		if (self->on_register) {
			const int rc = self->on_register(r);
			if (rc)
				return rc;
		}
		std::lock_guard<std::mutex> g(self->m);
		r.serial = self->next++;
		self->live[r.serial] = r;
		self->registered++;
		*static_cast<FakeReg *>(payload) = r;
		return 0;
	}
	static int dereg(void *ctx, void *payload)
	{
		auto *self = static_cast<FakeRegistrar *>(ctx);
		const auto *r = static_cast<FakeReg *>(payload);
		std::lock_guard<std::mutex> g(self->m);
		if (!self->live.erase(r->serial))
			self->dereg_errors.insert(r->serial);
		self->deregistered++;
		return 0;
	}
	size_t live_count()
	{
		std::lock_guard<std::mutex> g(m);
		return live.size();
	}
};

} // namespace mrn::test

#endif

// SPDX-License-Identifier: BSD-3-Clause
#include "monitor.h"

#include <cerrno>

namespace mrn {

namespace {

// `none` hears of nothing, so the cache keeps no idle entry. `external` keeps
// them because the caller reports unmaps through mrn_invalidate_range(); the
// test-only variant keeps them with nobody reporting anything, to show what a
// cache without invalidation does.
class NullMonitor final : public Monitor {
public:
	explicit NullMonitor(mrn_monitor_t kind) : kind_(kind) {}
	mrn_monitor_t kind() const override { return kind_; }
	const uint64_t *generation() const override { return &generation_; }
	int watch(uintptr_t, uintptr_t, uint64_t, uint64_t *id) override
	{
		*id = 0;
		return 0;
	}
	int unwatch(uint64_t) override { return 0; }
	int drain(InvalidationSink &, uint64_t *generation) override
	{
		*generation = generation_;
		return 0;
	}
	bool keeps_idle_entries() const override { return kind_ != MRN_MONITOR_NONE; }
	void abandon_after_fork() override {}

private:
	mrn_monitor_t kind_;
	const uint64_t generation_ = 0;
};

} // namespace

std::unique_ptr<Monitor> make_null_monitor(mrn_monitor_t kind)
{
	return std::make_unique<NullMonitor>(kind);
}

int open_monitor(mrn_monitor_t want, std::unique_ptr<Monitor> *out, std::string *why)
{
	int err = 0;
	switch (want) {
	case MRN_MONITOR_KERNEL:
		*out = make_kernel_monitor(&err, why);
		return *out ? 0 : err;
	case MRN_MONITOR_UFFD:
		*out = make_uffd_monitor(&err, why);
		return *out ? 0 : err;
	case MRN_MONITOR_NONE:
		*out = make_external_monitor(want);
		*why = "no monitor: idle registrations are not kept";
		return 0;
	case MRN_MONITOR_EXTERNAL:
		*out = make_external_monitor(want);
		*why = "external: idle registrations are kept, the caller reports unmaps";
		return 0;
	case MRN_MONITOR_AUTO:
	case MRN_MONITOR_AUTO_EXTERNAL: {
		const bool external = want == MRN_MONITOR_AUTO_EXTERNAL;
		const std::string name = external ? "auto-external" : "auto";
		std::string kernel_why, uffd_why;
		if ((*out = make_kernel_monitor(&err, &kernel_why))) {
			*why = name + ": kernel, " + kernel_why;
			return 0;
		}
		if ((*out = make_uffd_monitor(&err, &uffd_why))) {
			*why = name + ": uffd (" + uffd_why +
			       "), kernel unavailable: " + kernel_why;
			return 0;
		}
		*out = make_external_monitor(external ? MRN_MONITOR_EXTERNAL : MRN_MONITOR_NONE);
		*why = name +
		       (external ? ": external (idle registrations are kept, the caller reports "
				   "unmaps)"
				 : ": none (idle registrations are not kept)") +
		       "; kernel unavailable: " + kernel_why + "; uffd unavailable: " + uffd_why;
		return 0;
	}
	}
	*why = "unknown monitor";
	return -EINVAL;
}

} // namespace mrn

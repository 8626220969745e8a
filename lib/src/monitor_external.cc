// SPDX-License-Identifier: BSD-3-Clause
//
// Monitors `none` and `external`: the kernel tells nothing, the caller's
// memory hooks report unmaps through mrn_report_unmap() (or
// mrn_invalidate_range()). Reports go to a HookQueue that the cache drains
// through the generation check, as it drains the kernel's list.
#include "hook_queue.h"
#include "monitor.h"

namespace mrn {

namespace {

class ExternalMonitor final : public Monitor {
public:
	explicit ExternalMonitor(mrn_monitor_t kind) : kind_(kind) {}
	mrn_monitor_t kind() const override { return kind_; }
	const uint64_t *generation() const override { return queue_.generation(); }
	int watch(uintptr_t start, uintptr_t end, uint64_t, uint64_t *id) override
	{
		queue_.extend(start, end);
		*id = 0;
		return 0;
	}
	int unwatch(uint64_t) override { return 0; }
	int drain(InvalidationSink &sink, uint64_t *generation) override
	{
		*generation = queue_.drain(
			[&sink](uintptr_t start, uintptr_t end) { sink.invalidate_range(start, end); });
		return 0;
	}
	// `none`: nothing would report unmaps of idle entries. Entries in use
	// are still invalidated by what the hooks report.
	bool keeps_idle_entries() const override { return kind_ != MRN_MONITOR_NONE; }
	bool report_unmap(uintptr_t start, size_t len) override
	{
		return queue_.push(start, len);
	}
	void add_stats(mrn_stats *s) override
	{
		s->hook_reports += queue_.queued();
		s->hook_overflows += queue_.overflows();
	}
	// Its state is plain memory, valid in the child.
	void abandon_after_fork() override {}

private:
	const mrn_monitor_t kind_;
	HookQueue queue_;
};

} // namespace

std::unique_ptr<Monitor> make_external_monitor(mrn_monitor_t kind)
{
	return std::make_unique<ExternalMonitor>(kind);
}

} // namespace mrn

// SPDX-License-Identifier: BSD-3-Clause
#include "uffd_ranges.h"

#include <algorithm>
#include <cerrno>
#include <utility>

namespace mrn {

namespace {

// The kernel's answers that mean "not this memory": a VMA uffd cannot watch
// (file mappings, VM_PFNMAP, beyond TASK_SIZE), or one another userfaultfd
// of the process owns.
bool not_watchable(int rc)
{
	return rc == -EINVAL || rc == -EBUSY;
}

} // namespace

UffdRanges::UffdRanges(size_t granule, size_t page, uint64_t max_ranges, Syscall reg,
		       Syscall unreg)
    : granule_(std::max(granule, page)), page_(page), max_ranges_(max_ranges),
      reg_(std::move(reg)), unreg_(std::move(unreg))
{
}

std::map<uint64_t, UffdRanges::Run>::iterator UffdRanges::run_of(uint64_t g)
{
	auto it = runs_.upper_bound(g);
	if (it == runs_.begin())
		return runs_.end();
	--it;
	return it->second.end > g ? it : runs_.end();
}

uint64_t UffdRanges::runs_touching(uint64_t gs, uint64_t ge) const
{
	uint64_t n = 0;
	// Runs overlapping [gs, ge) or ending at gs or starting at ge.
	for (auto it = runs_.upper_bound(ge); it != runs_.begin();) {
		--it;
		if (it->second.end < gs)
			break;
		n++;
	}
	return n;
}

void UffdRanges::hold_whole(uint64_t gs, uint64_t ge)
{
	Run joined{ge, 0};
	uint64_t first = gs;
	for (uint64_t g = gs; g < ge; g++)
		if (granules_[g].whole++ == 0)
			joined.held++;
	for (auto it = runs_.upper_bound(ge); it != runs_.begin();) {
		--it;
		if (it->second.end < gs)
			break;
		first = std::min(first, it->first);
		joined.end = std::max(joined.end, it->second.end);
		joined.held += it->second.held;
		it = runs_.erase(it);
	}
	runs_[first] = joined;
}

void UffdRanges::hold_exact(uint64_t g, uintptr_t start, uintptr_t end)
{
	Granule &x = granules_[g];
	if (x.page_refs.empty())
		x.page_refs.assign(granule_ / page_, 0);
	x.exact++;
	for (uintptr_t a = start; a < end; a += page_)
		x.page_refs[(a - granule_start(g)) / page_]++;
	exact_pieces_++;
}

int UffdRanges::add(uintptr_t start, uintptr_t end, uint64_t *id)
{
	const uint64_t gs = first_granule(start), ge = end_granule(end);
	Holder h;
	h.start = start;
	h.end = end;
	// Held whole, [gs, ge) joins whatever runs touch it into one.
	if (runs_touching(gs, ge) == 0 && at_bound(1)) {
		refused_++;
		return -EOPNOTSUPP;
	}
	const int rc = reg_(granule_start(gs), granule_start(ge));
	if (rc == 0)
		hold_whole(gs, ge);
	else if (!not_watchable(rc))
		return rc;
	else if (const int prc = add_piecewise(start, end, &h); prc != 0)
		return prc;
	h.live = true;
	uint64_t slot;
	if (!free_holders_.empty()) {
		slot = free_holders_.back();
		free_holders_.pop_back();
		holders_[slot] = std::move(h);
	} else {
		slot = holders_.size();
		holders_.push_back(std::move(h));
	}
	*id = slot + 1;
	return 0;
}

// Granule by granule: whole where the kernel takes it, else the range's own
// pages in it.
int UffdRanges::add_piecewise(uintptr_t start, uintptr_t end, Holder *h)
{
	const uint64_t gs = first_granule(start), ge = end_granule(end);
	for (uint64_t g = gs; g < ge; g++) {
		const uintptr_t gstart = granule_start(g), gend = granule_start(g + 1);
		int rc = -EOPNOTSUPP;
		if (runs_touching(g, g + 1) > 0 || !at_bound(1))
			rc = reg_(gstart, gend);
		if (rc == 0) {
			hold_whole(g, g + 1);
			h->whole.push_back(true);
			continue;
		}
		const uintptr_t ps = std::max(start, gstart), pe = std::min(end, gend);
		if (not_watchable(rc) || rc == -EOPNOTSUPP) {
			if (at_bound(1)) {
				refused_++;
				rc = -EOPNOTSUPP;
			} else {
				rc = reg_(ps, pe);
			}
		}
		if (rc == 0) {
			hold_exact(g, ps, pe);
			h->whole.push_back(false);
			continue;
		}
		// Undo the granules before this one.
		Holder partial = *h;
		partial.end = std::min(end, gstart);
		if (partial.end > partial.start)
			release(partial);
		h->whole.clear();
		return not_watchable(rc) ? -EOPNOTSUPP : rc;
	}
	return 0;
}

void UffdRanges::remove(uint64_t id)
{
	if (id == 0 || id > holders_.size() || !holders_[id - 1].live)
		return;
	Holder &h = holders_[id - 1];
	release(h);
	h = Holder{};
	free_holders_.push_back(id - 1);
}

void UffdRanges::release(const Holder &h)
{
	const uint64_t gs = first_granule(h.start), ge = end_granule(h.end);
	for (uint64_t g = gs; g < ge; g++) {
		if (h.whole.empty() || (g - gs < h.whole.size() && h.whole[g - gs]))
			release_whole(g);
		else
			release_exact(g, std::max(h.start, granule_start(g)),
				      std::min(h.end, granule_start(g + 1)));
	}
}

void UffdRanges::release_whole(uint64_t g)
{
	const auto it = granules_.find(g);
	if (it == granules_.end() || --it->second.whole > 0)
		return;
	// Idle now, but left registered while its run is held: unregistering
	// it alone would split the run's mapping.
	if (it->second.exact == 0)
		granules_.erase(it);
	const auto run = run_of(g);
	if (run != runs_.end() && --run->second.held == 0)
		unregister_run(run);
}

void UffdRanges::release_exact(uint64_t g, uintptr_t start, uintptr_t end)
{
	const auto it = granules_.find(g);
	if (it == granules_.end())
		return;
	Granule &x = it->second;
	for (uintptr_t a = start; a < end; a += page_)
		x.page_refs[(a - granule_start(g)) / page_]--;
	x.exact--;
	exact_pieces_--;
	// Inside a run the granule stays registered whole.
	if (run_of(g) == runs_.end())
		unregister_unneeded(g, start, end);
	if (x.whole == 0 && x.exact == 0)
		granules_.erase(it);
}

// One call for the whole run, less the granules that still hold exact
// pieces (their pages stay registered).
void UffdRanges::unregister_run(std::map<uint64_t, Run>::iterator run)
{
	const uint64_t first = run->first, end = run->second.end;
	runs_.erase(run);
	uint64_t from = first;
	for (auto it = granules_.lower_bound(first); it != granules_.end() && it->first < end;) {
		const uint64_t g = it->first;
		if (it->second.exact == 0) {
			it = granules_.erase(it); // not held (the run is not)
			continue;
		}
		if (g > from)
			(void)unreg_(granule_start(from), granule_start(g));
		unregister_unneeded(g, granule_start(g), granule_start(g + 1));
		from = g + 1;
		++it;
	}
	if (end > from)
		(void)unreg_(granule_start(from), granule_start(end));
}

void UffdRanges::unregister_unneeded(uint64_t g, uintptr_t start, uintptr_t end)
{
	const Granule &x = granules_.at(g);
	bool in_run = false;
	uintptr_t run = 0;
	for (uintptr_t a = start; a < end; a += page_) {
		const bool unneeded = x.page_refs[(a - granule_start(g)) / page_] == 0;
		if (unneeded && !in_run)
			run = a, in_run = true;
		else if (!unneeded && in_run)
			(void)unreg_(run, a), in_run = false;
	}
	if (in_run)
		(void)unreg_(run, end);
}

void UffdRanges::forget()
{
	granules_.clear();
	holders_.clear();
	free_holders_.clear();
	runs_.clear();
	exact_pieces_ = 0;
}

} // namespace mrn

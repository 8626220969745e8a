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

bool UffdRanges::held_whole(uint64_t g) const
{
	const auto it = granules_.find(g);
	return it != granules_.end() && it->second.whole > 0;
}

uint64_t UffdRanges::runs_around(uint64_t gs, uint64_t ge) const
{
	uint64_t runs = 0;
	bool in_run = false;
	uint64_t prev = 0;
	for (auto it = granules_.lower_bound(gs > 0 ? gs - 1 : 0);
	     it != granules_.end() && it->first <= ge; ++it) {
		if (it->second.whole == 0) {
			in_run = false;
			continue;
		}
		if (!in_run || it->first != prev + 1)
			runs++;
		in_run = true;
		prev = it->first;
	}
	return runs;
}

void UffdRanges::hold_whole(uint64_t g)
{
	Granule &x = granules_[g];
	if (x.whole++ == 0) {
		const bool left = g > 0 && held_whole(g - 1), right = held_whole(g + 1);
		// A new run, an extended one, or two joined into one.
		granule_runs_ = granule_runs_ + 1 - uint64_t(left) - uint64_t(right);
	}
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
	const uint64_t around = runs_around(gs, ge);
	if (around == 0 && at_bound(1)) {
		refused_++;
		return -EOPNOTSUPP;
	}
	const int rc = reg_(granule_start(gs), granule_start(ge));
	if (rc == 0) {
		for (uint64_t g = gs; g < ge; g++)
			hold_whole(g);
	} else if (!not_watchable(rc)) {
		return rc;
	} else if (const int prc = add_piecewise(start, end, &h); prc != 0) {
		return prc;
	}
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
		const uint64_t around = runs_around(g, g + 1);
		int rc = -EOPNOTSUPP;
		if (around > 0 || !at_bound(1))
			rc = reg_(gstart, gend);
		if (rc == 0) {
			hold_whole(g);
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
	// Granules nothing needs any more, unregistered run by run.
	uint64_t run_start = 0, run_end = 0;
	auto flush = [&] {
		if (run_end > run_start)
			(void)unreg_(granule_start(run_start), granule_start(run_end));
		run_start = run_end = 0;
	};
	for (uint64_t g = gs; g < ge; g++) {
		const auto it = granules_.find(g);
		if (it == granules_.end())
			continue; // not reached by a piecewise add() that failed
		Granule &x = it->second;
		const bool whole = h.whole.empty() || (g - gs < h.whole.size() && h.whole[g - gs]);
		const uintptr_t gstart = granule_start(g);
		const uintptr_t ps = std::max(h.start, gstart),
				pe = std::min(h.end, granule_start(g + 1));
		if (whole) {
			if (--x.whole == 0) {
				const bool left = g > 0 && held_whole(g - 1), right = held_whole(g + 1);
				granule_runs_ = granule_runs_ + uint64_t(left) + uint64_t(right) - 1;
			}
		} else {
			for (uintptr_t a = ps; a < pe; a += page_)
				x.page_refs[(a - gstart) / page_]--;
			x.exact--;
			exact_pieces_--;
		}
		if (x.whole > 0)
			continue;
		if (x.page_refs.empty()) {
			// Only ever held whole: unregistered whole, with its
			// neighbours in one call.
			granules_.erase(it);
			if (run_end != g)
				flush(), run_start = g;
			run_end = g + 1;
			continue;
		}
		// A granule with exact pieces: the pages that only the released
		// range needed (a whole granule call would fail on the page
		// that made the pieces exact).
		unregister_unneeded(g, whole ? gstart : ps, whole ? granule_start(g + 1) : pe);
		if (x.exact == 0)
			granules_.erase(it);
	}
	flush();
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
	granule_runs_ = exact_pieces_ = 0;
}

} // namespace mrn

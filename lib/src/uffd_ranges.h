// SPDX-License-Identifier: BSD-3-Clause
//
// Which memory the userfaultfd monitor has registered with its uffd, and
// why, so that registering many small cached ranges does not use up the
// process's mappings.
//
// A userfaultfd registration sets flags on the VMAs it covers; the kernel
// splits a VMA at each end of a registered range that falls inside it. One
// registration per cached range would turn 40,000 one-page ranges into
// about 80,000 VMAs, past vm.max_map_count, after which every mmap (and
// every malloc that needs one) of the application fails (issue #21).
//
// So the monitor registers whole aligned granules (2 MiB: a THP, which the
// split at a granule boundary never breaks), shared by every cached range
// over them and counted. Adjacent registered granules form a run, which the
// kernel keeps as one VMA (or as the application's own VMAs, unsplit). A
// run is unregistered in one call once no range holds any granule of it:
// unregistering granule by granule would leave the mapping split where the
// kernel does not merge back (Linux 6.1 leaves one VMA per granule
// unregistered from the middle of a run; 6.18 merges them). So a
// granule nothing needs stays registered while its run is held, and
// unregistration never splits a mapping.
//
// Where a granule cannot be registered whole (part of it is a file mapping
// uffd cannot watch, or another userfaultfd of the process owns part of it:
// EINVAL, EBUSY), the range's pages in that granule are registered exactly,
// counted per page, and unregistered as soon as no range needs them.
//
// Runs and exact pieces are the ranges that can split a mapping at both
// ends; their number is bounded (`max_ranges`). Past it, add() refuses
// with -EOPNOTSUPP and the cache registers that range uncached, as it does
// with its fork advice.
//
// add() always issues the registration, also over granules already
// registered: the application may have unmapped and remapped memory in a
// granule since (the new VMA is not registered), and registering what this
// uffd already watches is a no-op for the kernel.
//
// Not thread-safe: the monitor calls it under its own mutex.
#ifndef MRN_UFFD_RANGES_H
#define MRN_UFFD_RANGES_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace mrn {

class UffdRanges {
public:
	// Each returns 0 or -errno for [start, end).
	using Syscall = std::function<int(uintptr_t start, uintptr_t end)>;

	// granule: a power of two, a multiple of page. The granule of one page
	// with no bound is what the monitor did before: every range exact.
	UffdRanges(size_t granule, size_t page, uint64_t max_ranges, Syscall reg, Syscall unreg);

	// [start, end) (whole pages) needs watching. 0 and *id (for remove()),
	// -EOPNOTSUPP when it cannot be watched or the bound is reached, or
	// another -errno from the kernel (nothing then changed).
	int add(uintptr_t start, uintptr_t end, uint64_t *id);

	// The range add() returned id for needs no watching any more.
	void remove(uint64_t id);

	// In a forked child: forget everything, without system calls (the
	// uffd is the parent's).
	void forget();

	// Now: runs of registered granules plus exact pieces, the ranges that
	// can each split a mapping at both ends.
	uint64_t ranges() const { return runs_.size() + exact_pieces_; }
	// add() calls refused because ranges() was at the bound.
	uint64_t refused() const { return refused_; }

private:
	struct Granule {
		uint32_t whole = 0; // ranges holding it registered whole
		uint32_t exact = 0; // ranges holding pages of it registered exactly
		// Per page, how many ranges hold it exactly (sized once exact > 0).
		std::vector<uint32_t> page_refs;
	};
	// Granules [first, end) registered whole, held > 0 of them by a range.
	struct Run {
		uint64_t end = 0;
		uint64_t held = 0;
	};
	// One add(): its range, and per granule (from the first) whether it
	// holds it whole; empty when it holds every granule whole.
	struct Holder {
		uintptr_t start = 0, end = 0;
		std::vector<bool> whole;
		bool live = false;
	};

	uint64_t first_granule(uintptr_t a) const { return a / granule_; }
	uint64_t end_granule(uintptr_t a) const { return (a + granule_ - 1) / granule_; }
	uintptr_t granule_start(uint64_t g) const { return uintptr_t(g * granule_); }
	// The run that holds granule g, or runs_.end().
	std::map<uint64_t, Run>::iterator run_of(uint64_t g);
	// Runs that [gs, ge) registered whole would join into one.
	uint64_t runs_touching(uint64_t gs, uint64_t ge) const;
	// [gs, ge) is now registered whole, and held once more by a range.
	void hold_whole(uint64_t gs, uint64_t ge);
	void hold_exact(uint64_t g, uintptr_t start, uintptr_t end);
	int add_piecewise(uintptr_t start, uintptr_t end, Holder *h);
	// Undoes what h holds and unregisters what nothing needs any more.
	void release(const Holder &h);
	void release_whole(uint64_t g);
	void release_exact(uint64_t g, uintptr_t start, uintptr_t end);
	void unregister_run(std::map<uint64_t, Run>::iterator run);
	void unregister_unneeded(uint64_t g, uintptr_t start, uintptr_t end);
	bool at_bound(uint64_t more) const { return ranges() + more > max_ranges_; }

	size_t granule_;
	size_t page_;
	uint64_t max_ranges_;
	Syscall reg_, unreg_;
	std::map<uint64_t, Granule> granules_; // held, whole or in pieces
	std::map<uint64_t, Run> runs_;         // by first granule
	std::vector<Holder> holders_;
	std::vector<uint64_t> free_holders_;
	uint64_t exact_pieces_ = 0;
	uint64_t refused_ = 0;
};

} // namespace mrn

#endif

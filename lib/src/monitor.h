// SPDX-License-Identifier: BSD-3-Clause
//
// How a cache hears that the pages under its registrations changed.
#ifndef MRN_MONITOR_H
#define MRN_MONITOR_H

#include "mrnotify.h"

#include <linux/mrnotify.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mrn {

// The generation word is written by someone else (the kernel through the
// status page, or the uffd monitor's thread) and only ever read here, always
// with this acquire load: it pairs with the writer's release (the kernel's
// smp_store_release, the uffd thread's __atomic_fetch_add) so that whoever
// sees the new value also sees what the drain will report.
inline uint64_t load_generation(const uint64_t *word)
{
	return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

// Whether the registration watch() returned `id` for is live and clean by
// its validity word (acquire: the kernel changes the word before it moves
// the generation). Slots beyond the words are never valid.
inline bool valid_by_word(const uint32_t *words, uint64_t id)
{
	const uint32_t slot = static_cast<uint32_t>(id);
	return slot < MRN_VALIDITY_SLOTS &&
	       __atomic_load_n(&words[slot], __ATOMIC_ACQUIRE) == MRN_VALID_WORD(id);
}

// What a drain reports: registrations by the cookie given to watch(), or
// address ranges (monitors that only know ranges).
class InvalidationSink {
public:
	// [start, end) is the range given to watch().
	virtual void invalidate_cookie(uint64_t cookie, uint64_t watch_id, uintptr_t start,
				       uintptr_t end) = 0;
	virtual void invalidate_range(uintptr_t start, uintptr_t end) = 0;

protected:
	~InvalidationSink() = default;
};

class Monitor {
public:
	virtual ~Monitor() = default;
	Monitor() = default;
	Monitor(const Monitor &) = delete;
	Monitor &operator=(const Monitor &) = delete;

	virtual mrn_monitor_t kind() const = 0;

	// The word that moves whenever something became invalid; the cache
	// compares it (acquire load) with the value its last drain returned.
	virtual const uint64_t *generation() const = 0;

	// The kernel's validity words (MRN_VALIDITY_SLOTS in
	// <linux/mrnotify.h>), or nullptr. With them a cache may serve a hit
	// on an entry whose word is valid while the generation moved, without
	// a drain, as long as *deferred_word() has not moved since it was
	// read before the last drain (see valid_by_word()).
	virtual const uint32_t *validity_words() const { return nullptr; }
	virtual const uint64_t *deferred_word() const { return nullptr; }

	// Start watching [start, end) (whole pages) for the entry known by
	// cookie. On success *id is the handle for unwatch(). Returns 0,
	// -EOPNOTSUPP when this memory cannot be watched (the cache then
	// keeps the entry only while in use), or another negative errno.
	virtual int watch(uintptr_t start, uintptr_t end, uint64_t cookie, uint64_t *id) = 0;

	// Stop watching the registration watch() returned id for. Returns 0,
	// 1 if it had become invalid and was not drained yet, or -errno.
	virtual int unwatch(uint64_t id) = 0;

	// Report what became invalid since the last drain; returns the
	// generation value that everything reported so far corresponds to.
	virtual int drain(InvalidationSink &sink, uint64_t *generation) = 0;

	// Called once [start, end) is registered (its pages pinned): may idle
	// entries over it be kept? The uffd monitor says no for shared and
	// file-backed pages, whose hole punches and truncations it never hears
	// of; the cache then registers the range uncached.
	virtual bool can_cache(uintptr_t start, uintptr_t end)
	{
		return (void)start, (void)end, true;
	}

	// False: idle entries must not be kept (nothing would tell us if they
	// went stale).
	virtual bool keeps_idle_entries() const = 0;

	// A file descriptor that polls readable (POLLIN) while something
	// became invalid and was not drained yet, or -1 (none).
	virtual int wait_fd() const { return -1; }

	// Adds what the monitor counts to *s (the cache fills the rest).
	virtual void add_stats(mrn_stats *s) { (void)s; }

	// In a forked child: forget the parent's resources without touching
	// them (no syscalls on the parent's state, no thread joins).
	virtual void abandon_after_fork() = 0;

	// An unmap reported by the caller's memory hooks: async-signal-safe.
	// False when this monitor takes no reports (it hears unmaps itself)
	// or the range cannot matter to the cache.
	virtual bool report_unmap(uintptr_t start, size_t len)
	{
		return (void)start, (void)len, false;
	}
};

// Opens the monitor the configuration asks for. For MRN_MONITOR_AUTO it tries
// kernel, then uffd, then none; `why` says what was chosen and why.
int open_monitor(mrn_monitor_t want, std::unique_ptr<Monitor> *out, std::string *why);

std::unique_ptr<Monitor> make_kernel_monitor(int *err, std::string *why);
// Whether a module that speaks ABI `module_abi` serves this library, built
// for MRN_ABI_VERSION: that one and every later one (<linux/mrnotify.h>
// says why). Sets *why to the reason when not.
bool kernel_abi_serves(uint32_t module_abi, std::string *why);
// How the uffd monitor registers memory (uffd_ranges.h). The defaults are
// what every cache gets; tests also build the old behaviour (one page, no
// bound) to show what it did.
struct UffdOptions {
	size_t granule = 0;      // registered in aligned granules of this size
	uint64_t max_ranges = 0; // ranges that can split a mapping, at most
	static UffdOptions defaults();
};

std::unique_ptr<Monitor> make_uffd_monitor(int *err, std::string *why);
std::unique_ptr<Monitor> make_uffd_monitor(const UffdOptions &options, int *err,
					   std::string *why);
std::unique_ptr<Monitor> make_null_monitor(mrn_monitor_t kind);
// `none` and `external`: reports from the caller's hooks, queued
// (hook_queue.h) and drained through the generation check.
std::unique_ptr<Monitor> make_external_monitor(mrn_monitor_t kind);

} // namespace mrn

#endif

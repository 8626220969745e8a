/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify's libfabric monitor: mrnotify.ko as the memory monitor of libfabric's
 * registration cache (the MR cache of prov/util, used by verbs, efa, psm3,
 * cxi and others), through libfabric's public import interface
 * (rdma/fi_ext.h: fi_import "mr_cache", struct fid_mem_monitor).
 *
 * The cache asks the monitor on every hit whether the range is still valid;
 * the answer costs one load and compare of the kernel's counter while
 * nothing died. When something died, the hit that finds out drains the
 * kernel's dirty list and says false for what died, and a thread of ours
 * tells every cache of the process (notify), outside libfabric's locks.
 * Unlike libfabric's memhooks and userfaultfd monitors, nothing depends on
 * glibc's entry points or on the kind of memory: raw system calls, static
 * binaries, shared memory hole punches and truncation are all seen, and a
 * hit that starts after munmap() returned cannot find the old pages.
 *
 * Two ways in:
 *  - call mrn_ofi_import() once, before the first fi_domain() (link
 *    -lmrnotify);
 *  - or run the program under mrnotify-ofi-run(1), which preloads
 *    libmrnotify-ofi-preload.so: it imports the monitor at the process's
 *    first fi_getinfo(), fi_fabric() or fi_open(), and does nothing in a
 *    process that never calls them.
 * See mrnotify-ofi(3) and docs/libfabric.md.
 */
#ifndef MRNOTIFY_OFI_H
#define MRNOTIFY_OFI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MRN_OFI_API_VERSION 1

/*
 * Makes mrnotify.ko the default memory monitor of libfabric's MR caches
 * for system memory. Returns 0 (also when already imported), or:
 *   -ENODEV    /dev/mrnotify cannot be used (missing, or a module of
 *              another ABI): libfabric keeps its own monitor; one warning
 *              on stderr says why
 *   -EBUSY     another monitor was imported first (Open MPI's, when its
 *              memory hooks are active), or a cache already runs
 *   -ENOSYS    libfabric is not loaded in this process (libmrnotify
 *              finds it at run time and never links it), or is older than
 *              1.13 (no import interface), or libmrnotify was built
 *              without libfabric's headers
 *   -ECANCELED FI_MR_CACHE_MONITOR=disabled: no MR cache is wanted
 *   -EINVAL    a bad MRNOTIFY_* value (mrn_config_init names it)
 * Thread safe; the first call decides.
 */
int mrn_ofi_import(void);

/* Counts since the import (for tests and MRNOTIFY_STATS=1). */
struct mrn_ofi_stats {
	uint64_t subscribes;   /* ranges a cache asked to watch */
	uint64_t unsubscribes; /* ... and let go of (libfabric >= 2.0) */
	uint64_t valid_slow;   /* hits that found the counter moved */
	uint64_t valid_false;  /* hits refused: the range died */
	uint64_t deaths;       /* watched ranges the kernel invalidated */
	uint64_t notified;     /* deaths told to every cache */
	uint64_t ranges;       /* distinct ranges known now */
	uint64_t watched;      /* of them, watched by the kernel now */
};

/*
 * Fills *stats (size = sizeof(struct mrn_ofi_stats) as the caller was
 * built). 0, -EINVAL, or -ENODEV when the monitor is not running (not
 * imported, or no cache started it).
 */
int mrn_ofi_monitor_stats(struct mrn_ofi_stats *stats, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* MRNOTIFY_OFI_H */

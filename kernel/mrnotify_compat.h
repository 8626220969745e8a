/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels mrnotify.ko builds for: 5.10 (Debian 11)
 * to 7.3 (trixie-backports). Each line names the release that changed the API.
 * Everything else the module uses is in 5.10 already: mmu_notifier_get()
 * (5.4), copy_struct_from_user (5.4),
 * XA_FLAGS_ACCOUNT, DEFINE_DEBUGFS_ATTRIBUTE, refcount_dec_and_lock.
 */
#ifndef MRNOTIFY_COMPAT_H
#define MRNOTIFY_COMPAT_H

#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/nodemask.h>
#include <linux/stringify.h>
#include <linux/version.h>

/*
 * By version, each naming the release that changed: the kernels this builds
 * for (Debian's) carry none of these changes as backports.
 */
#define MRN_LINUX_AT_LEAST_SUB(major, minor, sub) \
	(LINUX_VERSION_CODE >= KERNEL_VERSION(major, minor, sub))
#define MRN_LINUX_AT_LEAST(major, minor) MRN_LINUX_AT_LEAST_SUB(major, minor, 0)

#if !MRN_LINUX_AT_LEAST(5, 10)
#error "mrnotify needs Linux 5.10 or later"
#endif

/*
 * Until "mm/mmu_notifier.c: fix race in mmu_interval_notifier_remove()"
 * (319561669a59, 5.18; 5.10.113 in the 5.10.y series), remove() could
 * return while the notifier was still deferred. The module's first design
 * freed a registration right after remove(); the current one uses no
 * interval notifier, but 5.10.113 stays the floor: nothing older was ever
 * tested (Debian's kernel headers carry the stable release in
 * LINUX_VERSION_CODE: 5.10.223 in Debian 11, the 5.10 that is).
 */
#if !MRN_LINUX_AT_LEAST(5, 11) && !MRN_LINUX_AT_LEAST_SUB(5, 10, 113)
#error "mrnotify needs 5.10.113+: older 5.10.y lack the mmu_interval_notifier_remove() race fix"
#endif

/*
 * The newest release the module's tests ran on (make check-kernels): a
 * later one builds and loads, and says at load that it is untried there.
 */
#define MRN_NEWEST_TESTED_MAJOR	7
#define MRN_NEWEST_TESTED_MINOR	3
#define MRN_NEWEST_TESTED \
	__stringify(MRN_NEWEST_TESTED_MAJOR) "." __stringify(MRN_NEWEST_TESTED_MINOR)
#define MRN_BEYOND_TESTED \
	MRN_LINUX_AT_LEAST(MRN_NEWEST_TESTED_MAJOR, MRN_NEWEST_TESTED_MINOR + 1)

/*
 * 4.20 to 5.13: NUMA balancing migrates a PMD-mapped anonymous THP in
 * migrate_misplaced_transhuge_page() without any notifier; the last event
 * the module sees is the PROTECTION_VMA of the hinting scan before it
 * (change_huge_pmd()), which the range does not tell from mprotect's. 5.14
 * ("mm: thp: refactor NUMA fault handling", c5b5a3dd2c1f) moved it to the
 * generic migration, which sends CLEAR. Until then, such an event can
 * replace pages wherever NUMA balancing can run: an anonymous mapping on a
 * machine of more than one possible node (nr_node_ids, fixed at boot, so
 * that a change's start and end always agree). (Pinned pages cannot
 * migrate; an unpinned registration would have lost the event.)
 */
static inline bool
mrn_protection_may_migrate(const struct mmu_notifier_range *range)
{
#if !MRN_LINUX_AT_LEAST(5, 14) && IS_ENABLED(CONFIG_NUMA_BALANCING)
	return nr_node_ids > 1 && range->vma && vma_is_anonymous(range->vma);
#else
	return false;
#endif
}

/* 5.14 added MMU_NOTIFY_EXCLUSIVE (make_device_exclusive_range). */
#define MRN_HAVE_NOTIFY_EXCLUSIVE	MRN_LINUX_AT_LEAST(5, 14)

/* 6.3 made vma->vm_flags read-only; vm_flags_mod() writes it since then. */
static inline void mrn_vm_flags_mod(struct vm_area_struct *vma,
				    vm_flags_t set, vm_flags_t clear)
{
#if MRN_LINUX_AT_LEAST(6, 3)
	vm_flags_mod(vma, set, clear);
#else
	vma->vm_flags = (vma->vm_flags | set) & ~clear;
#endif
}

#endif /* MRNOTIFY_COMPAT_H */

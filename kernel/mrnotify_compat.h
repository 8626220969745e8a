/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels mrnotify.ko builds for: 5.10 (Debian 11)
 * to 6.12 (Debian 13). Each line names the release that changed the API.
 * Everything else the module uses is in 5.10 already: interval notifiers
 * (5.5), copy_struct_from_user (5.4), compat_ptr_ioctl (5.5),
 * XA_FLAGS_ACCOUNT, DEFINE_DEBUGFS_ATTRIBUTE, refcount_dec_and_lock.
 */
#ifndef MRNOTIFY_COMPAT_H
#define MRNOTIFY_COMPAT_H

#include <linux/mm.h>
#include <linux/version.h>

/*
 * By version, each naming the release that changed: the kernels this builds
 * for (Debian's) carry none of these changes as backports.
 */
#define MRN_LINUX_AT_LEAST(major, minor) \
	(LINUX_VERSION_CODE >= KERNEL_VERSION(major, minor, 0))

#if !MRN_LINUX_AT_LEAST(5, 10)
#error "mrnotify needs Linux 5.10 or later"
#endif

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

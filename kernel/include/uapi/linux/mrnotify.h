/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * mrnotify: tell user space when the memory under its RDMA registrations
 * changes.
 *
 * Open /dev/mrnotify once per registration cache. The open file is a
 * "context" bound to the opener's address space. REGISTER a byte range with
 * a cookie; when a mapping change can replace the pages under that range
 * (munmap, mremap, madvise(DONTNEED/FREE/REMOVE), brk, shmdt, MAP_FIXED over
 * it, truncation of a shared file, migration, copy-on-write break, exit), the
 * kernel marks the registration dirty, links it on the context's dirty list
 * and increments the 64-bit generation in the status page (mmap offset 0,
 * one page, read-only) before the system call that changed the mapping
 * returns. A cache compares the generation with the value its last DRAIN
 * returned; when it moved, DRAIN tells it which registrations died.
 *
 * Every ioctl argument begins with __u32 size (set it to sizeof the struct)
 * and __u32 flags. The command encodes the same size (_IOWR); the kernel
 * decodes type, number, direction and size strictly (ENOTTY), and requires
 * the size field to equal the command's size (EINVAL). Newer headers may
 * append fields; the kernel accepts a larger struct if the bytes it does not
 * know are zero (else E2BIG).
 *
 * See docs/kernel-abi.md and mrnotify(4) for the guarantees and errnos.
 */
#ifndef _UAPI_LINUX_MRNOTIFY_H
#define _UAPI_LINUX_MRNOTIFY_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define MRN_DEVICE_PATH		"/dev/mrnotify"
/*
 * 2: the final form of the first ABI (ioctl magic 0xB9, ids that name one
 * registration, per-user limits, counters in debugfs). 1 was the development ABI
 * (magic 0xB7); the *_SIZE_VER1 sizes name the first layout of each struct.
 *
 * A later version only adds: new ioctls, fields at the end of size-versioned
 * structs, flags that older modules refuse. Every call of version V works
 * unchanged on a module that speaks V or later, so a program built for V
 * accepts a module whose abi_version is >= V. A change that breaks a call
 * takes a new ioctl magic, never only a new number.
 */
#define MRN_ABI_VERSION		2
/* Whether a module speaking module_abi serves a program built for this header. */
#define MRN_ABI_SERVES(module_abi)	((module_abi) >= MRN_ABI_VERSION)

/**
 * struct mrn_status - the status page
 * @generation: increases by one each time a registration becomes dirty,
 *	and by one when a change had more registrations to mark than one
 *	notifier callback marks (the rest are marked by the next DRAIN, which
 *	reports them); written after the registration is on the dirty list.
 *	Never decreases. Read it with one 64-bit acquire load (e.g.
 *	__atomic_load_n(&st->generation, __ATOMIC_ACQUIRE)).
 * @abi_version: MRN_ABI_VERSION of the running module
 * @features: MRN_FEATURE_* (0 from a module before features)
 * @deferred: increases by one, before @generation, each time a change
 *	left marks to the next DRAIN: while it has not moved since it was
 *	read before a DRAIN, the validity words are exact
 *
 * mmap(NULL, page size, PROT_READ, MAP_SHARED, fd, 0). The kernel writes it;
 * it never reads it back.
 */
struct mrn_status {
	__aligned_u64 generation;
	__u32 abi_version;
	__u32 features;
	__aligned_u64 deferred;
};

/* The validity words are there (see MRN_VALIDITY_SLOTS). */
#define MRN_FEATURE_VALIDITY	(1U << 0)

/*
 * The validity words: mmap(NULL, len, PROT_READ, MAP_SHARED, fd, page size)
 * maps, from the file's second page on, one __u32 per slot (the low 32 bits
 * of an id), slot 0 first, for the slots below MRN_VALIDITY_SLOTS (len at
 * most 4 * MRN_VALIDITY_SLOTS, rounded up to pages). A slot's word is
 * MRN_VALID_WORD(id) while the registration with that id is live and clean;
 * it changes, before the generation moves, when that registration becomes
 * dirty or goes. So a cache that finds the generation moved may still use
 * an entry whose word is valid, without a DRAIN, as long as @deferred has
 * not moved since it read it before its last DRAIN (registrations owed a
 * deferred mark keep a valid word until a DRAIN makes the mark). Read each
 * word with an acquire load.
 */
#define MRN_VALIDITY_SLOTS	(1U << 20)
#define MRN_VALID_WORD(id)	((__u32)((id) >> 32) | 0x80000000U)

/**
 * struct mrn_register - MRN_IOC_REGISTER: watch [addr, addr + length)
 * @size: in: sizeof(struct mrn_register)
 * @flags: in: none defined, must be 0
 * @addr: in: start of the range (any alignment: byte granular)
 * @length: in: bytes, > 0
 * @cookie: in: returned by DRAIN, never interpreted
 * @id: out: the handle for UNREGISTER, valid when REGISTER returns 0;
 *	opaque: a slot (reused) and its generation, so that no id names two
 *	registrations of the context (until a slot is reused 2^31 times)
 */
struct mrn_register {
	__u32 size;
	__u32 flags;
	__aligned_u64 addr;
	__aligned_u64 length;
	__aligned_u64 cookie;
	__aligned_u64 id;
};
#define MRN_REGISTER_SIZE_VER1	40

/**
 * struct mrn_unregister - MRN_IOC_UNREGISTER: stop watching
 * @size: in: sizeof(struct mrn_unregister)
 * @flags: in: none defined, must be 0
 * @id: in: from REGISTER
 *
 * Returns 0, or MRN_UNREGISTER_WAS_DIRTY (a positive value) when the
 * registration had already been invalidated but not yet drained: it is then
 * reported here instead of by a later DRAIN.
 */
struct mrn_unregister {
	__u32 size;
	__u32 flags;
	__aligned_u64 id;
};
#define MRN_UNREGISTER_SIZE_VER1	16
#define MRN_UNREGISTER_WAS_DIRTY	1

/**
 * struct mrn_dirty_entry - one invalidated registration, as DRAIN writes it
 * @cookie: the registration's cookie
 * @id: its id, stale from now on
 * @addr: the start of its range
 * @length: the length of its range
 * @reason: why its pages may have been replaced: MRN_REASON_*, the core
 *	mm's reason for the change; 0 (MRN_REASON_UNKNOWN) from a module that
 *	does not say (before reasons, which zero-fills the field)
 * @flags: MRN_ENTRY_*
 *
 * DRAIN writes the first @entry_size bytes of this layout and zeroes the
 * rest of each slot: entry_size 32 (MRN_DIRTY_ENTRY_SIZE_VER1) gets no
 * reason, 40 (VER2) gets it.
 */
struct mrn_dirty_entry {
	__aligned_u64 cookie;
	__aligned_u64 id;
	__aligned_u64 addr;
	__aligned_u64 length;
	__u32 reason;
	__u32 flags;
};
#define MRN_DIRTY_ENTRY_SIZE_VER1	32
#define MRN_DIRTY_ENTRY_SIZE_VER2	40

/* mrn_dirty_entry.reason: the core mm's reason for the change. */
#define MRN_REASON_UNKNOWN	0	/* the module did not say */
#define MRN_REASON_UNMAP	1	/* munmap, mremap, brk, shmdt, MAP_FIXED over it */
#define MRN_REASON_CLEAR	2	/* zap: madvise, truncate, hole punch, COW break,
					 * reclaim, migration, THP split or collapse, KSM */
#define MRN_REASON_RELEASE	3	/* the address space ended (exit, exec) */
#define MRN_REASON_MIGRATE	4	/* device memory migration */
#define MRN_REASON_EXCLUSIVE	5	/* device exclusive access */
#define MRN_REASON_PROTECTION	6	/* a protection change that may move pages */
#define MRN_REASON_OTHER	7	/* a reason newer than the module */

/* mrn_dirty_entry.flags */
/* Registered while the change ran: marked at the change's end. */
#define MRN_ENTRY_AT_END	(1U << 0)
/*
 * The change had more registrations than one notifier callback marks; this
 * one was marked by DRAIN, against the change's range, which may have been
 * merged with other such ranges (then the registration may not have met it).
 */
#define MRN_ENTRY_DEFERRED	(1U << 1)

/**
 * struct mrn_drain - MRN_IOC_DRAIN: take invalidated registrations
 * @size: in: sizeof(struct mrn_drain)
 * @flags: in: none defined, must be 0
 * @entries: in: user pointer to @capacity entries of @entry_size bytes
 * @capacity: in: the number of entries at @entries
 * @entry_size: in: sizeof(struct mrn_dirty_entry): 40, or 32 without the
 *	reason; any multiple of 8 from 32 to the page size
 * @count: out: the entries written
 * @out_flags: out: MRN_DRAIN_MORE
 * @generation: out: the generation when the batch was taken
 *
 * Takes up to @capacity (at most MRN_DRAIN_MAX_BATCH) dirty registrations,
 * in slot order. Each drained registration is released by the
 * kernel: its id is stale and it is reported exactly once. On EFAULT
 * nothing is taken.
 */
struct mrn_drain {
	__u32 size;
	__u32 flags;
	__aligned_u64 entries;
	__u32 capacity;
	__u32 entry_size;
	__u32 count;
	__u32 out_flags;
	__aligned_u64 generation;
};
#define MRN_DRAIN_SIZE_VER1	40
/* More registrations were dirty than fitted; call DRAIN again. */
#define MRN_DRAIN_MORE		(1U << 0)
/* The most entries one DRAIN call writes, whatever the capacity. */
#define MRN_DRAIN_MAX_BATCH	1024

/**
 * struct mrn_query - MRN_IOC_QUERY: the limits and state of this context
 * @size: in: sizeof(struct mrn_query)
 * @flags: in: none defined, must be 0
 * @abi_version: out: MRN_ABI_VERSION of the running module
 * @reg_bytes: out: the slab object size of one registration
 * @max_registrations: out: the per-context cap (ENOSPC beyond it)
 * @registrations: out: live registrations
 * @dirty: out: dirty registrations not yet drained
 * @generation: out: the same value as the status page
 * @max_user_registrations: out: the per-user cap across contexts (ENOSPC
 *	beyond it)
 * @user_registrations: out: live registrations of the opener's user, all
 *	contexts
 *
 * Per-reason counters are kernel internals: see /sys/kernel/debug/mrnotify/;
 * module-wide usage is in /sys/class/misc/mrnotify/ (docs/kernel-abi.md).
 */
struct mrn_query {
	__u32 size;
	__u32 flags;
	__u32 abi_version;
	__u32 reg_bytes;
	__aligned_u64 max_registrations;
	__aligned_u64 registrations;
	__aligned_u64 dirty;
	__aligned_u64 generation;
	__aligned_u64 max_user_registrations;
	__aligned_u64 user_registrations;
};
#define MRN_QUERY_SIZE_VER1	64

/*
 * 0xB9 is unassigned in Documentation/userspace-api/ioctl/ioctl-number.rst
 * up to Linux 6.12 (0xB7: nsfs, remoteproc_cdev; 0xB8: mshv, mrvl_cn10k_dpi).
 * Numbers 1-4 are used; the size bits are sizeof the struct.
 */
#define MRN_IOC_MAGIC		0xB9
#define MRN_IOC_REGISTER	_IOWR(MRN_IOC_MAGIC, 1, struct mrn_register)
#define MRN_IOC_UNREGISTER	_IOWR(MRN_IOC_MAGIC, 2, struct mrn_unregister)
#define MRN_IOC_DRAIN		_IOWR(MRN_IOC_MAGIC, 3, struct mrn_drain)
#define MRN_IOC_QUERY		_IOWR(MRN_IOC_MAGIC, 4, struct mrn_query)

#endif /* _UAPI_LINUX_MRNOTIFY_H */

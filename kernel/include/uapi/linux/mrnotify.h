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
 * and __u32 flags. Newer headers may append fields; the kernel accepts a
 * larger struct if the bytes it does not know are zero (else E2BIG), and a
 * smaller one down to the first version's size (else EINVAL).
 *
 * See docs/kernel-abi.md and mrnotify(4) for the guarantees and errnos.
 */
#ifndef _UAPI_LINUX_MRNOTIFY_H
#define _UAPI_LINUX_MRNOTIFY_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define MRN_DEVICE_PATH		"/dev/mrnotify"
#define MRN_ABI_VERSION		1

/*
 * The status page: mmap(NULL, page size, PROT_READ, MAP_SHARED, fd, 0).
 * The kernel writes it; it never reads it back.
 */
struct mrn_status {
	/*
	 * Increases by one each time a registration becomes dirty; written
	 * after the registration is on the dirty list. Read it with an acquire
	 * load (e.g. __atomic_load_n(&st->generation, __ATOMIC_ACQUIRE)).
	 */
	__aligned_u64 generation;
	__u32 abi_version;	/* MRN_ABI_VERSION of the running module */
	__u32 reserved;		/* zero */
};

/* MRN_IOC_REGISTER: watch [addr, addr + length) (byte granular). */
struct mrn_register {
	__u32 size;		/* in: sizeof(struct mrn_register) */
	__u32 flags;		/* in: none defined, must be 0 */
	__aligned_u64 addr;		/* in: start of the range (any alignment) */
	__aligned_u64 length;		/* in: bytes, > 0 */
	__aligned_u64 cookie;		/* in: returned by DRAIN, never interpreted */
	__aligned_u64 id;		/* out: handle for UNREGISTER; never 0 */
};
#define MRN_REGISTER_SIZE_VER1	40

/*
 * MRN_IOC_UNREGISTER: stop watching. Returns 0, or MRN_UNREGISTER_WAS_DIRTY
 * (a positive value) when the registration had already been invalidated but
 * not yet drained: it is then reported here instead of by a later DRAIN.
 */
struct mrn_unregister {
	__u32 size;		/* in: sizeof(struct mrn_unregister) */
	__u32 flags;		/* in: none defined, must be 0 */
	__aligned_u64 id;		/* in: from REGISTER */
};
#define MRN_UNREGISTER_SIZE_VER1	16
#define MRN_UNREGISTER_WAS_DIRTY	1

/* One invalidated registration, as written by DRAIN. */
struct mrn_dirty_entry {
	__aligned_u64 cookie;
	__aligned_u64 id;
	__aligned_u64 addr;
	__aligned_u64 length;
};
#define MRN_DIRTY_ENTRY_SIZE_VER1	32

/*
 * MRN_IOC_DRAIN: take up to capacity dirty registrations, oldest first.
 * Each drained registration is released by the kernel: its id is gone and
 * it is reported exactly once. On EFAULT nothing is taken.
 */
struct mrn_drain {
	__u32 size;		/* in: sizeof(struct mrn_drain) */
	__u32 flags;		/* in: none defined, must be 0 */
	__aligned_u64 entries;		/* in: user pointer to capacity entries */
	__u32 capacity;		/* in: number of entries at .entries */
	__u32 entry_size;	/* in: sizeof(struct mrn_dirty_entry), >= 32 */
	__u32 count;		/* out: entries written */
	__u32 out_flags;	/* out: MRN_DRAIN_MORE */
	__aligned_u64 generation;	/* out: the generation when the batch was taken */
};
#define MRN_DRAIN_SIZE_VER1	40
/* More registrations were dirty than fitted; call DRAIN again. */
#define MRN_DRAIN_MORE		(1U << 0)

/* Indexes of mrn_query.callbacks: the kernel's reason for a callback. */
enum mrn_event {
	MRN_EV_UNMAP = 0,		/* munmap, mremap, exit's unmap */
	MRN_EV_CLEAR,			/* zap: madvise, truncate, COW, reclaim */
	MRN_EV_PROTECTION_VMA,		/* mprotect, NUMA hinting: ignored */
	MRN_EV_PROTECTION_PAGE,		/* fork write-protect, mkclean: ignored */
	MRN_EV_SOFT_DIRTY,		/* clear_refs: ignored */
	MRN_EV_RELEASE,			/* the address space is torn down */
	MRN_EV_MIGRATE,			/* device migration */
	MRN_EV_EXCLUSIVE,		/* device exclusive access */
	MRN_EV_OTHER,			/* reasons newer than this header */
	MRN_EV_SLOTS = 16		/* size of the array */
};

/* MRN_IOC_QUERY: limits and statistics of this context. */
struct mrn_query {
	__u32 size;		/* in: sizeof(struct mrn_query) */
	__u32 flags;		/* in: none defined, must be 0 */
	__u32 abi_version;	/* MRN_ABI_VERSION */
	__u32 reg_bytes;	/* slab object size of one registration */
	__aligned_u64 max_registrations;/* per-context cap (ENOSPC beyond it) */
	__aligned_u64 registrations;	/* live registrations */
	__aligned_u64 dirty;		/* dirty registrations not yet drained */
	__aligned_u64 generation;	/* same value as the status page */
	__aligned_u64 invalidated;	/* registrations that became dirty */
	__aligned_u64 already_dirty;	/* invalidating callbacks on a dirty one */
	__aligned_u64 ignored;		/* callbacks ignored (protection changes) */
	__aligned_u64 drained;		/* entries reported by DRAIN */
	__aligned_u64 unregistered_dirty;/* UNREGISTERs that returned WAS_DIRTY */
	__aligned_u64 callbacks[MRN_EV_SLOTS];	/* notifier callbacks, by mrn_event */
};
#define MRN_QUERY_SIZE_VER1	(88 + 8 * MRN_EV_SLOTS)

#define MRN_IOC_MAGIC		0xB7
/*
 * The kernel decodes the command without its size bits: the size field of
 * the struct is what counts, so a program built with a newer (larger) struct
 * still reaches an older module.
 */
#define MRN_IOC_REGISTER	_IOWR(MRN_IOC_MAGIC, 1, struct mrn_register)
#define MRN_IOC_UNREGISTER	_IOWR(MRN_IOC_MAGIC, 2, struct mrn_unregister)
#define MRN_IOC_DRAIN		_IOWR(MRN_IOC_MAGIC, 3, struct mrn_drain)
#define MRN_IOC_QUERY		_IOWR(MRN_IOC_MAGIC, 4, struct mrn_query)

#endif /* _UAPI_LINUX_MRNOTIFY_H */

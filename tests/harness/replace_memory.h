/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * replace_memory: every way an application can replace the memory under a
 * buffer that a transport registered and cached, for the storms
 * (tests/ucx/mpi_unmap_storm.c, tests/ofi/ofi_unmap_storm.c):
 *   reuse     nothing replaced (the cache should hit)
 *   free      free() and malloc() again (glibc unmaps and maps)
 *   munmap    raw munmap(2) and mmap(2) at the same address (if still free)
 *   map_fixed raw mmap(2) MAP_FIXED over the live mapping
 *   mremap    raw mremap(2) of the pages away, fresh pages mapped back
 *   dontneed  raw madvise(2) MADV_DONTNEED (fresh zero pages on next touch)
 *   shm       raw shmat(2) SHM_REMAP of a new System V segment over it
 *   punch     a hole punched in the shared memfd under it (fallocate(2)):
 *             the mapping stays, its pages are new on the next touch
 * "raw" means a system call no memory hook in libc sees. A kind that needs
 * memory of its own (a mapping, a memfd) first replaces the buffer by such
 * memory, which is itself a replacement.
 */
#ifndef MRN_TESTS_REPLACE_MEMORY_H
#define MRN_TESTS_REPLACE_MEMORY_H

#include <stdatomic.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mrn_kind {
	MRN_KIND_REUSE,
	MRN_KIND_FREE,
	MRN_KIND_MUNMAP,
	MRN_KIND_MAP_FIXED,
	MRN_KIND_MREMAP,
	MRN_KIND_DONTNEED,
	MRN_KIND_SHM,
	MRN_KIND_PUNCH,
	MRN_NKINDS
};
extern const char *const mrn_kind_name[MRN_NKINDS];

struct mrn_buf {
	unsigned char *p;
	size_t size; /* a multiple of the page size */
	enum {
		MRN_FROM_MALLOC,
		MRN_FROM_MMAP,
		MRN_FROM_SHM,
		MRN_FROM_MEMFD
	} from;
	int memfd; /* MRN_FROM_MEMFD */
};

/* Called with what failed (errno set); must not return. */
extern void (*mrn_replace_die)(const char *what);
/* mremap refused with EFAULT, MAP_FIXED used instead. */
extern atomic_int mrn_mremap_refused;

/* A fresh private mapping of size bytes. */
void mrn_buf_init(struct mrn_buf *b, size_t size);
/* Replaces the memory under b, at the same address where the kind can. */
void mrn_buf_replace(struct mrn_buf *b, enum mrn_kind k);

#ifdef __cplusplus
}
#endif

#endif

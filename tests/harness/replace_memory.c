/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "replace_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *const mrn_kind_name[MRN_NKINDS] = {"reuse",  "free",     "munmap", "map_fixed",
					       "mremap", "dontneed", "shm",    "punch"};
void (*mrn_replace_die)(const char *what);
atomic_int mrn_mremap_refused;

static void die(const char *what)
{
	mrn_replace_die(what);
	abort();
}

/*
 * How a fresh mapping is placed: anywhere; over [at, +size), which the
 * caller owns; or at `at` if that is still free, else anywhere (another
 * thread, ours or the transport's, may have taken the hole meanwhile).
 */
enum place {
	ANYWHERE,
	OVER,
	AT_IF_FREE
};

static void *raw_mmap(void *at, size_t size, enum place how)
{
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	void *p;

	if (how == OVER) {
		p = (void *)syscall(SYS_mmap, at, size, prot, flags | MAP_FIXED, -1, 0);
		if (p != at)
			die("mmap MAP_FIXED");
		return p;
	}
	if (how == AT_IF_FREE) {
		p = (void *)syscall(SYS_mmap, at, size, prot, flags | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == at)
			return p;
		if (p != MAP_FAILED) /* a kernel without MAP_FIXED_NOREPLACE */
			syscall(SYS_munmap, p, size);
	}
	p = (void *)syscall(SYS_mmap, NULL, size, prot, flags, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

void mrn_buf_init(struct mrn_buf *b, size_t size)
{
	b->size = size;
	b->p = raw_mmap(NULL, size, ANYWHERE);
	b->from = MRN_FROM_MMAP;
	b->memfd = -1;
}

/* The memfd of a buffer that no longer maps it (the mapping, if still
 * there, keeps the file alive until it goes). */
static void forget_memfd(struct mrn_buf *b)
{
	if (b->from == MRN_FROM_MEMFD) {
		close(b->memfd);
		b->memfd = -1;
	}
}

/* Leaves [b->p, +size) unmapped, whatever it was. */
static void release(struct mrn_buf *b)
{
	if (b->from == MRN_FROM_SHM) {
		if (syscall(SYS_shmdt, b->p) != 0)
			die("shmdt");
	} else if (syscall(SYS_munmap, b->p, b->size) != 0) {
		die("munmap");
	}
	forget_memfd(b);
}

/* A shared memfd mapped over the buffer (MAP_FIXED), for punch. */
static void map_memfd_over(struct mrn_buf *b)
{
	const int fd = memfd_create("replace_memory", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, (off_t)b->size) != 0)
		die("memfd");
	if (b->from == MRN_FROM_MALLOC) {
		free(b->p);
		b->p = raw_mmap(NULL, b->size, ANYWHERE);
	} else {
		forget_memfd(b);
	}
	if ((void *)syscall(SYS_mmap, b->p, b->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			    fd, 0) != b->p)
		die("mmap memfd");
	b->from = MRN_FROM_MEMFD;
	b->memfd = fd;
}

void mrn_buf_replace(struct mrn_buf *b, enum mrn_kind k)
{
	const size_t size = b->size;
	void *tmp;
	int id;

	if (k == MRN_KIND_REUSE)
		return;
	if (k == MRN_KIND_PUNCH && b->from != MRN_FROM_MEMFD) {
		map_memfd_over(b);
		return;
	}
	if (b->from == MRN_FROM_MALLOC && k != MRN_KIND_FREE) {
		/* The other kinds work on mappings of our own: start one. */
		free(b->p);
		b->p = raw_mmap(NULL, size, ANYWHERE);
		b->from = MRN_FROM_MMAP;
		return;
	}
	switch (k) {
	case MRN_KIND_FREE:
		if (b->from == MRN_FROM_MALLOC)
			free(b->p);
		else
			release(b);
		b->p = malloc(size);
		if (!b->p)
			die("malloc");
		b->from = MRN_FROM_MALLOC;
		break;
	case MRN_KIND_MUNMAP:
		release(b);
		b->p = raw_mmap(b->p, size, AT_IF_FREE);
		b->from = MRN_FROM_MMAP;
		break;
	case MRN_KIND_MAP_FIXED:
		forget_memfd(b);
		b->p = raw_mmap(b->p, size, OVER);
		b->from = MRN_FROM_MMAP;
		break;
	case MRN_KIND_MREMAP:
		tmp = raw_mmap(NULL, size, ANYWHERE);
		if ((void *)syscall(SYS_mremap, b->p, size, size, MREMAP_MAYMOVE | MREMAP_FIXED,
				    tmp) != tmp) {
			/*
			 * EFAULT: the buffer spans more than one VMA (seen once
			 * with stock UCX, whose fork protection madvises
			 * registered ranges; not confirmed). Replace it anyway.
			 */
			if (errno != EFAULT)
				die("mremap");
			atomic_fetch_add(&mrn_mremap_refused, 1);
			syscall(SYS_munmap, tmp, size);
			b->p = raw_mmap(b->p, size, OVER);
		} else {
			b->p = raw_mmap(b->p, size, AT_IF_FREE);
			if (syscall(SYS_munmap, tmp, size) != 0)
				die("munmap");
		}
		forget_memfd(b);
		b->from = MRN_FROM_MMAP;
		break;
	case MRN_KIND_DONTNEED:
		/* Frees private pages; shared pages stay (a memfd's too). */
		if (syscall(SYS_madvise, b->p, size, MADV_DONTNEED) != 0)
			die("madvise");
		break;
	case MRN_KIND_SHM:
		id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600);
		if (id < 0)
			die("shmget");
		if ((void *)syscall(SYS_shmat, id, b->p, SHM_REMAP) != b->p)
			die("shmat");
		shmctl(id, IPC_RMID, NULL); /* destroyed at the last detach */
		forget_memfd(b);
		b->from = MRN_FROM_SHM;
		break;
	case MRN_KIND_PUNCH:
		if (fallocate(b->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      (off_t)size) != 0)
			die("fallocate");
		break;
	case MRN_KIND_REUSE:
	case MRN_NKINDS:
		break;
	}
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libregcount.so: counts the memory registrations a process makes through
 * libibverbs (LD_PRELOAD it under any MPI or UCX stack), and prints one line
 * at exit in every process that registered something:
 *   regcount: pid N: R registrations, D deregistrations
 * A registration cache that works registers far fewer times than the
 * application sends; one that misses re-registers on every message.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static atomic_ulong registrations, deregistrations;

/*
 * The real function. UCX loads libibverbs with dlopen(RTLD_LOCAL) (through
 * its IB transport module), outside the global scope RTLD_NEXT searches:
 * look it up in the library itself.
 */
static void *next(const char *name)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *f = h ? dlsym(h, name) : NULL;

	if (!f)
		f = dlsym(RTLD_NEXT, name);
	if (!f) {
		static const char msg[] = "regcount: libibverbs not found\n";

		if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
			_exit(127);
		_exit(127);
	}
	return f;
}

/* rdma-core's ibv_reg_mr() is a macro over these entry points (1.13+ UCX
 * calls ibv_reg_mr_iova2, older code ibv_reg_mr). */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);

	if (!real)
		real = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, uint64_t,
					    unsigned int)) next("ibv_reg_mr_iova2");
	atomic_fetch_add(&registrations, 1);
	return real(pd, addr, length, iova, access);
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, int);

	if (!real)
		real = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int)) next("ibv_reg_mr");
	atomic_fetch_add(&registrations, 1);
	return real(pd, addr, length, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	static int (*real)(struct ibv_mr *);

	if (!real)
		real = (int (*)(struct ibv_mr *))next("ibv_dereg_mr");
	atomic_fetch_add(&deregistrations, 1);
	return real(mr);
}

__attribute__((destructor)) static void report(void)
{
	char line[128];
	const unsigned long r = atomic_load(&registrations), d = atomic_load(&deregistrations);
	int n;

	if (!r && !d)
		return;
	/* One write(2): the ranks share stderr. */
	n = snprintf(line, sizeof(line), "regcount: pid %d: %lu registrations, %lu deregistrations\n",
		     (int)getpid(), r, d);
	if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

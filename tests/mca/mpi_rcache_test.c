/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An MPI job that drives a transport's registration cache: point-to-point
 * messages of many sizes around a ring (buffers reused, so a leave-pinned
 * cache hits, and buffers unmapped and mapped again, so it must notice),
 * one-sided put/get/accumulate (osc rdma), system() and fork() while
 * registrations are cached, and several threads at once (MPI_THREAD_MULTIPLE). Every byte
 * received is checked.
 *
 * Usage: mpi_rcache_test [--iters N] [--no-p2p] [--no-remap] [--no-osc]
 *                        [--fork] [--threads N]
 * Prints "mpi_rcache_test: rank R ok" per rank; exits non-zero (MPI_Abort)
 * on the first wrong byte.
 */
#include <mpi.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int rank, nranks;
static int iters = 20;

static const size_t sizes[] = {
	1, 7, 64, 1000, 4096, 8191, 65536, 100003, 262144, 1048576, 4194304 + 3,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void fail(const char *what, size_t size, size_t at, unsigned got, unsigned want)
{
	fprintf(stderr, "mpi_rcache_test: rank %d: %s: size %zu byte %zu is %#x, expected %#x\n",
		rank, what, size, at, got, want);
	MPI_Abort(MPI_COMM_WORLD, 2);
}

static inline unsigned char pattern(int from, size_t size, int iter, int salt, size_t i)
{
	return (unsigned char)((from * 131 + size * 7 + (size_t)iter * 31 + (size_t)salt * 17 + i) ^
			       (i >> 8));
}

static void fill(unsigned char *b, int from, size_t size, int iter, int salt)
{
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(from, size, iter, salt, i);
}

static void check(const char *what, const unsigned char *b, int from, size_t size, int iter,
		  int salt)
{
	for (size_t i = 0; i < size; i++)
		if (b[i] != pattern(from, size, iter, salt, i))
			fail(what, size, i, b[i], pattern(from, size, iter, salt, i));
}

static void *map(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	return p;
}

/* One exchange around the ring: send to rank+1, receive from rank-1. */
static void ring_exchange(unsigned char *sbuf, unsigned char *rbuf, size_t size, int iter, int tag,
			  MPI_Comm comm, const char *what)
{
	const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;

	fill(sbuf, rank, size, iter, tag);
	memset(rbuf, 0xee, size);
	MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, next, tag, rbuf, (int)size, MPI_BYTE, prev, tag,
		     comm, MPI_STATUS_IGNORE);
	check(what, rbuf, prev, size, iter, tag);
}

/* The same buffers again and again: a leave-pinned cache hits. */
static void p2p_reuse(int tag, MPI_Comm comm)
{
	for (size_t s = 0; s < NSIZES; s++) {
		unsigned char *sbuf = map(sizes[s]), *rbuf = map(sizes[s]);

		for (int it = 0; it < iters; it++)
			ring_exchange(sbuf, rbuf, sizes[s], it, tag, comm, "p2p");
		munmap(sbuf, sizes[s]);
		munmap(rbuf, sizes[s]);
	}
}

/*
 * Buffers unmapped and mapped again (usually at the same address) between
 * messages: a cache that hands out the old registration sends stale pages
 * on a real NIC; here the data check and the transport's key checks catch
 * a registration that no longer matches.
 */
static void p2p_remap(int tag, MPI_Comm comm)
{
	for (size_t s = 0; s < NSIZES; s++) {
		for (int it = 0; it < iters / 2 + 1; it++) {
			unsigned char *sbuf = map(sizes[s]), *rbuf = map(sizes[s]);

			ring_exchange(sbuf, rbuf, sizes[s], it, tag + 1, comm, "p2p-remap");
			munmap(sbuf, sizes[s]);
			munmap(rbuf, sizes[s]);
		}
	}
}

/* One-sided: put, get and accumulate on a window over user memory. */
static void osc(void)
{
	const size_t n = 1 << 16; /* doubles per rank's window */
	const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
	double *win_mem = map(n * sizeof(double));
	double *src = map(n * sizeof(double));
	double *dst = map(n * sizeof(double));
	MPI_Win win;

	MPI_Win_create(win_mem, (MPI_Aint)(n * sizeof(double)), sizeof(double), MPI_INFO_NULL,
		       MPI_COMM_WORLD, &win);
	for (int it = 0; it < iters; it++) {
		const size_t cnt = (size_t)1 << (4 + it % 13); /* 16 .. 64Ki doubles */

		for (size_t i = 0; i < n; i++)
			win_mem[i] = -1.0;
		for (size_t i = 0; i < cnt; i++)
			src[i] = rank * 1e6 + it * 1e3 + (double)i;
		MPI_Win_fence(0, win);
		MPI_Put(src, (int)cnt, MPI_DOUBLE, next, 0, (int)cnt, MPI_DOUBLE, win);
		MPI_Win_fence(0, win);
		for (size_t i = 0; i < cnt; i++)
			if (win_mem[i] != prev * 1e6 + it * 1e3 + (double)i)
				fail("put", cnt * sizeof(double), i * sizeof(double),
				     (unsigned)win_mem[i],
				     (unsigned)(prev * 1e6 + it * 1e3 + (double)i));
		MPI_Win_fence(0, win);
		MPI_Get(dst, (int)cnt, MPI_DOUBLE, next, 0, (int)cnt, MPI_DOUBLE, win);
		MPI_Win_fence(0, win);
		/* next's window holds what rank (its prev) put there. */
		for (size_t i = 0; i < cnt; i++)
			if (dst[i] != rank * 1e6 + it * 1e3 + (double)i)
				fail("get", cnt * sizeof(double), i * sizeof(double),
				     (unsigned)dst[i],
				     (unsigned)(rank * 1e6 + it * 1e3 + (double)i));
		for (size_t i = 0; i < cnt; i++)
			src[i] = 1.0;
		MPI_Accumulate(src, (int)cnt, MPI_DOUBLE, next, 0, (int)cnt, MPI_DOUBLE, MPI_SUM,
			       win);
		MPI_Win_fence(0, win);
		for (size_t i = 0; i < cnt; i++)
			if (win_mem[i] != prev * 1e6 + it * 1e3 + (double)i + 1.0)
				fail("accumulate", cnt * sizeof(double), i * sizeof(double),
				     (unsigned)win_mem[i],
				     (unsigned)(prev * 1e6 + it * 1e3 + (double)i + 1.0));
		MPI_Win_fence(0, win);
	}
	MPI_Win_free(&win);
	munmap(win_mem, n * sizeof(double));
	munmap(src, n * sizeof(double));
	munmap(dst, n * sizeof(double));
}

struct thread_arg {
	int id;
	MPI_Comm comm;
};

static void *thread_main(void *p)
{
	const struct thread_arg *a = p;

	p2p_reuse(100 + 2 * a->id, a->comm);
	p2p_remap(200 + 2 * a->id, a->comm);
	return NULL;
}

int main(int argc, char **argv)
{
	int do_p2p = 1, do_remap = 1, do_osc = 1, do_fork = 0, threads = 0, provided;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-p2p"))
			do_p2p = 0;
		else if (!strcmp(argv[i], "--no-remap"))
			do_remap = 0;
		else if (!strcmp(argv[i], "--no-osc"))
			do_osc = 0;
		else if (!strcmp(argv[i], "--fork"))
			do_fork = 1;
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else {
			fprintf(stderr, "mpi_rcache_test: unknown argument %s\n", argv[i]);
			return 1;
		}
	}
	if (threads > 0) {
		MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
		if (provided < MPI_THREAD_MULTIPLE) {
			fprintf(stderr, "mpi_rcache_test: MPI_THREAD_MULTIPLE not provided (%d)\n",
				provided);
			MPI_Abort(MPI_COMM_WORLD, 4);
		}
	} else {
		MPI_Init(&argc, &argv);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);

	if (do_p2p)
		p2p_reuse(1, MPI_COMM_WORLD);
	if (do_fork) {
		/*
		 * Registrations are cached now (leave pinned). system() (which
		 * glibc runs with posix_spawn, no fork handlers), then a real
		 * fork() whose child exits at once and one that execs: the
		 * atfork handlers of the cache run, and the parent's cached
		 * registrations must keep working.
		 */
		int status;
		pid_t pid;

		if (system("true") != 0) {
			fprintf(stderr, "mpi_rcache_test: rank %d: system() failed\n", rank);
			MPI_Abort(MPI_COMM_WORLD, 5);
		}
		for (int how = 0; how < 2; how++) {
			pid = fork();
			if (pid == 0) {
				if (how)
					execl("/bin/true", "true", (char *)NULL);
				_exit(0);
			}
			if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
			    WEXITSTATUS(status) != 0) {
				fprintf(stderr, "mpi_rcache_test: rank %d: fork %d failed\n", rank,
					how);
				MPI_Abort(MPI_COMM_WORLD, 5);
			}
		}
		p2p_reuse(3, MPI_COMM_WORLD);
	}
	if (do_remap)
		p2p_remap(5, MPI_COMM_WORLD);
	if (do_osc)
		osc();
	if (threads > 0) {
		pthread_t tid[16];
		struct thread_arg args[16];

		if (threads > 16)
			threads = 16;
		for (int t = 0; t < threads; t++) {
			args[t].id = t;
			MPI_Comm_dup(MPI_COMM_WORLD, &args[t].comm);
		}
		for (int t = 0; t < threads; t++)
			pthread_create(&tid[t], NULL, thread_main, &args[t]);
		for (int t = 0; t < threads; t++)
			pthread_join(tid[t], NULL);
		for (int t = 0; t < threads; t++)
			MPI_Comm_free(&args[t].comm);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	printf("mpi_rcache_test: rank %d ok\n", rank);
	fflush(stdout);
	MPI_Finalize();
	return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mpi_unmap_storm: two MPI ranks exchange rendezvous-sized messages (so the
 * transport registers the buffers and caches the registrations) while the
 * buffers' memory is replaced between rounds in every way an application
 * can replace it (tests/harness/replace_memory.h: every kind but punch).
 * Optionally a
 * second thread does the same on its own communicator at the same time
 * (MPI_THREAD_MULTIPLE), and every fourth round runs system() and fork().
 * Every byte received is checked.
 *
 * With --osc the bytes go one-sided: each round the receive buffer becomes a
 * window (MPI_Win_create, which registers it with the transport's cache
 * under osc/rdma) and the peer MPI_Puts into it between two fences; the
 * window is freed before the memory is replaced, as MPI requires, and a
 * cache that still hands out the old registration lets the put land in the
 * old pages.
 *
 * Usage: mpirun -np 2 ... mpi_unmap_storm [--size=BYTES] [--rounds=N]
 *            [--threads=1|2] [--fork] [--osc] [--expect=correct|corrupt]
 * Rank 0 prints wrong rank-rounds per kind and the result; the exit status is
 * 0 when the result is the one expected (default: correct).
 */
#define _GNU_SOURCE
#include <mpi.h>

#include "../harness/storm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kinds this storm cycles through: every one before punch. */
#define NKINDS MRN_KIND_PUNCH

static struct mrn_storm_options opt = {256 << 10, 28, 1, 0, "correct"};
static int one_sided; /* --osc */

static void die(const char *what)
{
	fprintf(stderr, "mpi_unmap_storm: %s: %s\n", what, strerror(errno));
	MPI_Abort(MPI_COMM_WORLD, 2);
}

static unsigned char pattern(int thread, int round, int from, size_t i)
{
	return (unsigned char)(thread * 59 + round * 37 + from * 101 + 1 + i * 7 + (i >> 12));
}

struct worker {
	int thread, rank;
	MPI_Comm comm;
	int wrong[NKINDS]; /* rounds with a wrong byte, per kind */
};

/* s's bytes into the peer's r, through a window over r made for this round. */
static void put_into_window(const struct mrn_buf *s, const struct mrn_buf *r, int peer,
			    MPI_Comm comm)
{
	MPI_Win win;

	MPI_Win_create(r->p, (MPI_Aint)opt.size, 1, MPI_INFO_NULL, comm, &win);
	MPI_Win_fence(0, win);
	MPI_Put(s->p, (int)opt.size, MPI_BYTE, peer, 0, (int)opt.size, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	MPI_Win_free(&win);
}

static void *exchange(void *arg)
{
	struct worker *w = arg;
	struct mrn_buf s, r;
	const int peer = 1 - w->rank;

	mrn_buf_init(&s, opt.size);
	mrn_buf_init(&r, opt.size);
	for (int round = 0; round < opt.rounds; round++) {
		/* Both threads cycle through every kind, out of step. */
		const enum mrn_kind k = (enum mrn_kind)((round + 3 * w->thread) % NKINDS);
		size_t wrong = 0;

		if (round >= NKINDS) { /* the first pass fills the cache */
			mrn_buf_replace(&s, k);
			mrn_buf_replace(&r, k);
		}
		for (size_t i = 0; i < opt.size; i++)
			s.p[i] = pattern(w->thread, round, w->rank, i);
		memset(r.p, 0, opt.size);
		if (one_sided)
			put_into_window(&s, &r, peer, w->comm);
		else
			MPI_Sendrecv(s.p, (int)opt.size, MPI_BYTE, peer, round, r.p,
				     (int)opt.size, MPI_BYTE, peer, round, w->comm,
				     MPI_STATUS_IGNORE);
		for (size_t i = 0; i < opt.size; i++)
			wrong += r.p[i] != pattern(w->thread, round, peer, i);
		if (wrong) {
			printf("mpi_unmap_storm: rank %d thread %d round %d (%s): %zu of %zu bytes "
			       "wrong\n",
			       w->rank, w->thread, round, mrn_kind_name[k], wrong, opt.size);
			/* Out now: a transport reading stale pages may
			 * crash the rank later, and the line must survive. */
			fflush(stdout);
			w->wrong[k]++;
		}
		if (opt.fork && w->thread == 0 && round % 4 == 3)
			mrn_fork_and_system();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int provided, rank, nranks;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--osc"))
			one_sided = 1;
		else if (!mrn_storm_option(&opt, argv[i])) {
			fprintf(stderr, "mpi_unmap_storm: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (mrn_storm_options_check(&opt) < 0) {
		fprintf(stderr, "mpi_unmap_storm: bad arguments\n");
		return 2;
	}
	mrn_replace_die = die;
	MPI_Init_thread(&argc, &argv, opt.threads > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
			&provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2 || (opt.threads > 1 && provided < MPI_THREAD_MULTIPLE)) {
		if (rank == 0)
			fprintf(stderr, "mpi_unmap_storm: needs 2 ranks%s\n",
				opt.threads > 1 ? " and MPI_THREAD_MULTIPLE" : "");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	struct worker w[2];
	pthread_t tid;

	memset(w, 0, sizeof(w));
	for (int t = 0; t < opt.threads; t++) {
		w[t].thread = t;
		w[t].rank = rank;
		MPI_Comm_dup(MPI_COMM_WORLD, &w[t].comm);
	}
	if (opt.threads > 1 && pthread_create(&tid, NULL, exchange, &w[1]) != 0)
		die("pthread_create");
	exchange(&w[0]);
	if (opt.threads > 1)
		pthread_join(tid, NULL);

	int mine[NKINDS + 1], total[NKINDS + 1], sum = 0, ok = 1;

	for (int k = 0; k < NKINDS; k++)
		mine[k] = w[0].wrong[k] + w[1].wrong[k];
	mine[NKINDS] = atomic_load(&mrn_mremap_refused);
	MPI_Reduce(mine, total, NKINDS + 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		enum mrn_kind kinds[NKINDS];
		char line[256];

		for (int k = 0; k < NKINDS; k++) {
			kinds[k] = (enum mrn_kind)k;
			sum += total[k];
		}
		mrn_kinds_summary(line, sizeof(line), kinds, NKINDS, total);
		const char *result = sum ? "corrupt" : "correct";

		ok = !strcmp(result, opt.expect);
		printf("mpi_unmap_storm: %d rounds x %d thread(s) of %zu bytes each way%s%s; wrong "
		       "rank-rounds: %s (mremap refused, MAP_FIXED instead: %d); result: %s "
		       "(expected %s) "
		       "%s\n",
		       opt.rounds, opt.threads, opt.size, one_sided ? " by MPI_Put" : "",
		       opt.fork ? ", fork and system()" : "",
		       line, total[NKINDS], result, opt.expect, ok ? "PASS" : "FAIL");
		fflush(stdout);
	}
	MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	for (int t = 0; t < opt.threads; t++)
		MPI_Comm_free(&w[t].comm);
	MPI_Finalize();
	return ok ? 0 : 1;
}

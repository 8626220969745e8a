/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx_mpi_remap: two MPI ranks exchange large messages (rendezvous, so the
 * buffers are registered through UCX's caches) from and into buffers whose
 * mappings are replaced every other round by raw munmap/mmap system calls,
 * which no memory hook sees. Every byte is checked.
 *
 * Usage: mpirun -np 2 --mca pml ucx ... [mrnotify-ucx-run] ucx_mpi_remap
 *            [--size=BYTES] [--rounds=N] [--declare-external] [--expect=correct|corrupt]
 *   --declare-external  tell UCM that VM_UNMAPPED events come from elsewhere
 *                       and never send one (shows what the test catches)
 * Rank 0 prints the result; the exit status is 0 when it is the one
 * expected (default: correct).
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <ucm/api/ucm.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static size_t size = 1 << 20;

static unsigned char pattern(int round, int from, size_t i)
{
	return (unsigned char)(round * 37 + from * 101 + 1 + i * 7 + (i >> 12));
}

static void remap(unsigned char *p, unsigned char fill)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;

	if (syscall(SYS_munmap, p, size) != 0 ||
	    (void *)syscall(SYS_mmap, p, size, prot, flags, -1, 0) != p) {
		fprintf(stderr, "ucx_mpi_remap: remap failed: %s\n", strerror(errno));
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	memset(p, fill, size);
}

int main(int argc, char **argv)
{
	const char *expect = "correct";
	int rounds = 6, declare_external = 0, rank, nranks;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--size=", 7))
			size = strtoul(argv[i] + 7, NULL, 0);
		else if (!strncmp(argv[i], "--rounds=", 9))
			rounds = atoi(argv[i] + 9);
		else if (!strncmp(argv[i], "--expect=", 9))
			expect = argv[i] + 9;
		else if (!strcmp(argv[i], "--declare-external"))
			declare_external = 1;
		else {
			fprintf(stderr, "ucx_mpi_remap: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	/* Before MPI_Init, which creates UCX's caches. */
	if (declare_external)
		ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2) {
		if (rank == 0)
			fprintf(stderr, "ucx_mpi_remap: needs exactly 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	const int peer = 1 - rank;
	unsigned char *sbuf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				   -1, 0);
	unsigned char *rbuf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				   -1, 0);
	int bad = 0;

	if (sbuf == MAP_FAILED || rbuf == MAP_FAILED)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (int r = 0; r < rounds; r++) {
		const int remapped = r > 0 && (r % 2) == 1;
		size_t wrong = 0, first = 0;

		if (remapped) {
			remap(sbuf, 0x5a);
			remap(rbuf, 0);
		}
		for (size_t i = 0; i < size; i++)
			sbuf[i] = pattern(r, rank, i);
		memset(rbuf, 0, size);
		MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, peer, r, rbuf, (int)size, MPI_BYTE, peer, r,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (size_t i = 0; i < size; i++) {
			if (rbuf[i] != pattern(r, peer, i) && wrong++ == 0)
				first = i;
		}
		if (wrong) {
			printf("ucx_mpi_remap: rank %d round %d%s: %zu of %zu bytes wrong, first "
			       "at %zu\n",
			       rank, r, remapped ? " (remapped)" : "", wrong, size, first);
			bad++;
		}
	}

	int total = 0;

	MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	int ok = 1;

	if (rank == 0) {
		const char *result = total ? "corrupt" : "correct";

		ok = !strcmp(result, expect);
		printf("ucx_mpi_remap: %d rounds of %zu bytes each way%s: result: %s (%d "
		       "rank-rounds wrong; expected %s) %s\n",
		       rounds, size, declare_external ? ", external-never-reported" : "", result,
		       total, expect, ok ? "PASS" : "FAIL");
		fflush(stdout);
	}
	MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Finalize();
	return ok ? 0 : 1;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mpi_sweep: ping-pong latency and windowed bandwidth between two ranks over
 * message sizes from 1 byte to 4 MiB, on buffers allocated once (the steady
 * state a registration cache is for). Rank 0 prints one line per size:
 *   mpi_sweep: SIZE bytes: latency L us, bandwidth B MB/s
 * and checks the last message of every size byte by byte.
 *
 * Usage: mpirun -np 2 ... mpi_sweep [--max=BYTES] [--iters=N]
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 16

int main(int argc, char **argv)
{
	size_t max = 4 << 20;
	int iters = 40, rank, nranks, bad = 0;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--max=", 6))
			max = strtoul(argv[i] + 6, NULL, 0);
		else if (!strncmp(argv[i], "--iters=", 8))
			iters = atoi(argv[i] + 8);
		else {
			fprintf(stderr, "mpi_sweep: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2 || iters < 1 || max < 1) {
		if (rank == 0)
			fprintf(stderr, "mpi_sweep: needs 2 ranks and positive arguments\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	unsigned char *buf = malloc(max * WINDOW);
	MPI_Request req[WINDOW];
	const int peer = 1 - rank;

	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 2);
	memset(buf, rank + 1, max * WINDOW);
	for (size_t size = 1; size <= max; size *= 4) {
		const int n = size >= (1 << 20) ? iters / 4 + 1 : iters;
		double t0, lat, bw;

		/* One untimed round: connections and registrations. */
		for (int pass = 0; pass < 2; pass++) {
			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
			for (int i = 0; i < (pass ? n : 1); i++) {
				if (rank == 0) {
					MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
					MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
						 MPI_STATUS_IGNORE);
				} else {
					MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
						 MPI_STATUS_IGNORE);
					MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
				}
			}
			lat = (MPI_Wtime() - t0) / (2.0 * n) * 1e6;
		}
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = MPI_Wtime();
		for (int i = 0; i < n; i++) {
			for (int w = 0; w < WINDOW; w++) {
				unsigned char *p = buf + (size_t)w * size;

				if (rank == 0) {
					memset(p, (int)(i + w + size) & 0xff, size < 64 ? size : 64);
					MPI_Isend(p, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD,
						  &req[w]);
				} else {
					MPI_Irecv(p, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD,
						  &req[w]);
				}
			}
			MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
			if (rank == 1) {
				for (int w = 0; w < WINDOW; w++) {
					const unsigned char want = (unsigned char)((i + w + size) & 0xff);
					const unsigned char *p = buf + (size_t)w * size;

					for (size_t b = 0; b < (size < 64 ? size : 64); b++)
						bad += p[b] != want;
				}
			}
		}
		MPI_Barrier(MPI_COMM_WORLD);
		bw = (double)size * WINDOW * n / (MPI_Wtime() - t0) / 1e6;
		if (rank == 0)
			printf("mpi_sweep: %zu bytes: latency %.2f us, bandwidth %.1f MB/s\n", size, lat,
			       bw);
	}
	int total = 0;

	MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 1, MPI_COMM_WORLD);
	MPI_Bcast(&total, 1, MPI_INT, 1, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_sweep: %s (%d wrong bytes)\n", total ? "FAIL" : "ok", total);
	free(buf);
	MPI_Finalize();
	return total ? 1 : 0;
}

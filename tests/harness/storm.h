/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * storm: what the unmap storms (tests/ucx/mpi_unmap_storm.c,
 * tests/ofi/ofi_unmap_storm.c) share beyond the ways to replace memory
 * (replace_memory.h): their common options, the fork and system() between
 * rounds, and the line of wrong rounds per kind.
 */
#ifndef MRN_TESTS_STORM_H
#define MRN_TESTS_STORM_H

#include "replace_memory.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mrn_storm_options {
	size_t size;        /* --size=BYTES, a multiple of 4096 */
	int rounds;         /* --rounds=N */
	int threads;        /* --threads=1|2 */
	int fork;           /* --fork: system() and fork() every fourth round */
	const char *expect; /* --expect=correct|corrupt */
};

/* 1 when arg is one of the options above (stored in *o), else 0. */
int mrn_storm_option(struct mrn_storm_options *o, const char *arg);
/* 0 when the options make sense, else -1. */
int mrn_storm_options_check(const struct mrn_storm_options *o);

/* system("true"), then fork() a child that exits at once; waits for both. */
void mrn_fork_and_system(void);

/* "reuse 0, free 2, ..." for kinds[0..n), wrong[kind] each, into line. */
void mrn_kinds_summary(char *line, size_t size, const enum mrn_kind *kinds, int n,
		       const int *wrong);

#ifdef __cplusplus
}
#endif

#endif

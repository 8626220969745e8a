/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx_rcache_bench: what a hit in UCX's registration cache costs with and
 * without libmrnotify-ucx's generation check, in the same process.
 *
 * Creates a UCS rcache (the structure UCP and the IB memory domain use) with
 * a registration callback that does nothing, fills it with N one-page
 * regions, then times ucs_rcache_get() + ucs_rcache_region_put() hits on
 * random regions through two entry points, alternating: the
 * ucs_rcache_get every UCX library calls (the plugin's, when it is
 * preloaded) and libucs's own (what UCX calls without the plugin). Prints
 * the median ns per hit of each and the median ratio of back-to-back pairs.
 *
 * Usage: ucx_rcache_bench [--regions=N[,N...]] [--hits=M] [--reps=R] [--max-ratio=X]
 * With --max-ratio, exits 1 when a ratio is above X (default: no limit).
 */
#define _GNU_SOURCE
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "ucx_versions.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef mrn_rcache_get_fn get_fn;

static ucs_status_t reg_nothing(void *context, ucs_rcache_t *rcache, void *arg,
				ucs_rcache_region_t *region, uint16_t flags)
{
	(void)context, (void)rcache, (void)arg, (void)region, (void)flags;
	return UCS_OK;
}

static void dereg_nothing(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
	(void)context, (void)rcache, (void)region;
}

static const ucs_rcache_ops_t ops = {
	.mem_reg = reg_nothing, .mem_dereg = dereg_nothing, MRN_RCACHE_OPS_MERGE};

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void die(const char *what)
{
	fprintf(stderr, "ucx_rcache_bench: %s\n", what);
	exit(2);
}

/* ns per get+put hit over the index sequence. */
static double run(get_fn get, ucs_rcache_t *rc, char *buf, size_t page, const uint32_t *idx,
		  size_t hits)
{
	ucs_rcache_region_t *r;
	const double t0 = now_ns();

	for (size_t i = 0; i < hits; i++) {
		if (MRN_RCACHE_GET(get, rc, buf + (size_t)idx[i] * page + 64, 128,
				   PROT_READ | PROT_WRITE, NULL, &r) != UCS_OK)
			die("ucs_rcache_get failed");
		ucs_rcache_region_put(rc, r);
	}
	return (now_ns() - t0) / (double)hits;
}

int main(int argc, char **argv)
{
	const char *regions_list = "1,1024,65536";
	size_t hits = 50000;
	int reps = 31;
	double max_ratio = 0;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--regions=", 10))
			regions_list = argv[i] + 10;
		else if (!strncmp(argv[i], "--hits=", 7))
			hits = strtoul(argv[i] + 7, NULL, 0);
		else if (!strncmp(argv[i], "--reps=", 7))
			reps = atoi(argv[i] + 7);
		else if (!strncmp(argv[i], "--max-ratio=", 12))
			max_ratio = atof(argv[i] + 12);
		else
			die("usage: ucx_rcache_bench [--regions=N[,N...]] [--hits=M] [--reps=R] "
			    "[--max-ratio=X]");
	}
	if (hits == 0 || reps < 1)
		die("--hits and --reps must be positive");

	void *libucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD);
	get_fn plain, interposed;

	if (libucs == NULL)
		die("libucs.so.0 is not loaded");
	/* A handle lookup finds libucs's own definition, a default one the first in the process. */
	plain = (get_fn)dlsym(libucs, "ucs_rcache_get");
	interposed = (get_fn)dlsym(RTLD_DEFAULT, "ucs_rcache_get");
	if (plain == NULL || interposed == NULL)
		die("ucs_rcache_get not found");

	Dl_info info;
	const char *who = "libucs (no plugin loaded)";

	if (interposed != plain && dladdr((void *)interposed, &info) && info.dli_fname)
		who = info.dli_fname;
	printf("ucx_rcache_bench: interposed ucs_rcache_get from %s\n", who);

	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	int over = 0;

	for (const char *s = regions_list; *s;) {
		char *end;
		const size_t n = strtoul(s, &end, 0);

		if (n == 0 || end == s)
			die("bad --regions");
		s = *end == ',' ? end + 1 : end;

		ucs_rcache_params_t p = {
			.region_struct_size = sizeof(ucs_rcache_region_t),
			.ucm_events = UCM_EVENT_VM_UNMAPPED,
			.ucm_event_priority = 1000,
			.ops = &ops,
			.context = NULL,
			.flags = 0,
			.max_regions = ULONG_MAX,
			.max_size = SIZE_MAX,
			.max_unreleased = SIZE_MAX,
		};
		ucs_rcache_t *rc;
		char *buf;

		MRN_RCACHE_PARAMS_ALIGN(&p, UCS_RCACHE_MIN_ALIGNMENT, page);
		buf = mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			   0);
		uint32_t *idx = malloc(hits * sizeof(*idx));
		double *t_plain = calloc(reps, sizeof(double)),
		       *t_int = calloc(reps, sizeof(double));
		double *pair = calloc(reps, sizeof(double));
		uint64_t x = 88172645463325252ull;

		if (buf == MAP_FAILED || idx == NULL || t_plain == NULL || t_int == NULL ||
		    pair == NULL)
			die("out of memory");
		memset(buf, 1, n * page);
		if (ucs_rcache_create(&p, "bench", NULL, &rc) != UCS_OK)
			die("ucs_rcache_create failed (are UCM's events available?)");
		/* One region per page, so every lookup finds its own. */
		for (size_t i = 0; i < n; i++) {
			ucs_rcache_region_t *r;

			if (MRN_RCACHE_GET(ucs_rcache_get, rc, buf + i * page, page,
					   PROT_READ | PROT_WRITE, NULL, &r) != UCS_OK)
				die("registration failed");
			ucs_rcache_region_put(rc, r);
		}
		for (size_t i = 0; i < hits; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			idx[i] = (uint32_t)(x % n);
		}
		run(plain, rc, buf, page, idx, hits < 10000 ? hits : 10000); /* warm */
		run(interposed, rc, buf, page, idx, hits < 10000 ? hits : 10000);
		for (int r = 0; r < reps; r++) {
			/* Alternate which goes first, against drift. */
			if (r & 1) {
				t_int[r] = run(interposed, rc, buf, page, idx, hits);
				t_plain[r] = run(plain, rc, buf, page, idx, hits);
			} else {
				t_plain[r] = run(plain, rc, buf, page, idx, hits);
				t_int[r] = run(interposed, rc, buf, page, idx, hits);
			}
			pair[r] = t_int[r] / t_plain[r];
		}
		qsort(t_plain, reps, sizeof(double), cmp_double);
		qsort(t_int, reps, sizeof(double), cmp_double);
		qsort(pair, reps, sizeof(double), cmp_double);

		/* The ratio is the median of back-to-back pairs: load from
		 * other processes moves both halves of a pair alike. */
		const double mp = t_plain[reps / 2], mi = t_int[reps / 2], ratio = pair[reps / 2];

		printf("ucx_rcache_bench: %zu regions: hit (get+put) %.1f ns without the plugin, "
		       "%.1f ns with it (medians; min %.1f / %.1f); ratio %.3f (%+.1f%%)\n",
		       n, mp, mi, t_plain[0], t_int[0], ratio, (ratio - 1) * 100);
		if (max_ratio > 0 && ratio > max_ratio)
			over = 1;
		ucs_rcache_destroy(rc);
		munmap(buf, n * page);
		free(idx);
		free(t_plain);
		free(t_int);
		free(pair);
	}
	return over;
}

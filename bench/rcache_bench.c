/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache_bench: the Open MPI component against the stock grdma through Open
 * MPI's own rcache API, in one process, the same callbacks for both
 * (tests/mca/rcache_harness.h, the harness of tests/mca/rcache_api_test).
 * Figures, not a test: the checks only say that every run was a clean one.
 *
 *   hits      the registration hit path (register hit + deregister), 1e2 /
 *             1e3 / 1e4 cached entries, random order; prints
 *             hit_speedup_vs_grdma=<lowest ratio> last
 *   patterns  bench/capi_bench's access patterns (its --dump file, named by
 *             MRN_PATTERNS_FILE) through grdma and mrnotify
 *
 * Usage: rcache_bench [MODE ...]   (default: hits), with the component in
 * the component path as for rcache_api_test:
 *   OMPI_MCA_mca_base_component_path=SYS_DEFAULT:_build/mca/components/.libs \
 *   OMPI_MCA_rcache_mrnotify_monitor=uffd _build/bench/rcache_bench
 * (make -C _build/bench bench-rcache).
 */
#include "mca/rcache_harness.h"

#include "opal/mca/rcache/base/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* The hit path's figure, printed as the very last line. */
static double hit_speedup = -1;

/* --- the hit path ----------------------------------------------------------------- */

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Hit path: register (a hit) + deregister, entries in random order. */
static double time_hits(mca_rcache_base_module_t *m, unsigned char *base, const unsigned *order,
			size_t n_order)
{
	double best = 1e30;

	for (int round = 0; round < 3; round++) {
		double t0 = now_ns(), t1;
		size_t ops = 0;

		do {
			for (size_t i = 0; i < n_order; i++) {
				mca_rcache_base_registration_t *reg;

				if (m->rcache_register(m, base + (size_t)order[i] * 2 * PAGE + 64,
						       256, 0, MCA_RCACHE_ACCESS_REMOTE_READ,
						       &reg) != OPAL_SUCCESS)
					return -1;
				m->rcache_deregister(m, reg);
			}
			ops += n_order;
			t1 = now_ns();
		} while (t1 - t0 < 1e8);
		if ((t1 - t0) / ops < best)
			best = (t1 - t0) / ops;
	}
	return best;
}

static void hits(void)
{
	static const size_t counts[] = {100, 1000, 10000};
	const size_t max = 10000, n_order = 4096;
	struct ctx cg = {.name = "bench-grdma"}, cm = {.name = "bench-mrnotify"};
	mca_rcache_base_module_t *g = create("grdma", "bench.grdma", &cg);
	mca_rcache_base_module_t *m = create("mrnotify", "bench.mrnotify", &cm);
	unsigned char *region;
	unsigned *order = malloc(n_order * sizeof(*order));
	unsigned seed = 12345;
	double lowest = 1e30;

	if (!g || !m || !order) {
		result(0, "hits", "cannot create the caches");
		return;
	}
	/* One page per entry with a gap page between, so none covers another. */
	region = mmap(NULL, 2 * max * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		      0);
	if (region == MAP_FAILED) {
		result(0, "hits", "mmap: %s", strerror(errno));
		return;
	}
	/*
	 * Where THP is "always", khugepaged may collapse the region into huge
	 * pages while the loop runs. That replaces the pages, and the kernel
	 * monitor rightly invalidates every registration on them (seen on
	 * Debian 13's 6.12: 200 re-registrations in the timed loop): this
	 * measures hits, so keep khugepaged away.
	 */
	madvise(region, 2 * max * PAGE, MADV_NOHUGEPAGE);
	printf("# hit path (register hit + deregister), ns per pair, random order, best of 3\n");
	printf("# %8s %12s %12s %8s\n", "entries", "grdma", "mrnotify", "speedup");
	size_t have = 0;

	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		const size_t n = counts[k];
		double tg, tm;

		for (; have < n; have++) {
			mca_rcache_base_registration_t *reg;

			region[have * 2 * PAGE] = 1;
			if (g->rcache_register(g, region + have * 2 * PAGE, PAGE, 0,
					       MCA_RCACHE_ACCESS_ANY, &reg) == OPAL_SUCCESS)
				g->rcache_deregister(g, reg);
			if (m->rcache_register(m, region + have * 2 * PAGE, PAGE, 0,
					       MCA_RCACHE_ACCESS_ANY, &reg) != OPAL_SUCCESS) {
				result(0, "hits", "mrnotify: registering entry %zu failed", have);
				return;
			}
			m->rcache_deregister(m, reg);
		}
		for (size_t i = 0; i < n_order; i++)
			order[i] = rand_r(&seed) % n;
		const long gr = cg.regs, mr = cm.regs;

		tg = time_hits(g, region, order, n_order);
		tm = time_hits(m, region, order, n_order);
		if (tg < 0 || tm < 0) {
			result(0, "hits", "a register failed in the timed loop (%s)",
			       tg < 0 ? "grdma" : "mrnotify");
			return;
		}
		if (cg.regs != gr || cm.regs != mr) {
			result(0, "hits",
			       "the timed loop registered (%ld grdma, %ld mrnotify): not all hits",
			       cg.regs - gr, cm.regs - mr);
			return;
		}
		printf("# %8zu %12.1f %12.1f %8.2f\n", n, tg, tm, tg / tm);
		if (tg / tm < lowest)
			lowest = tg / tm;
	}
	mca_rcache_base_module_destroy(g);
	mca_rcache_base_module_destroy(m);
	munmap(region, 2 * max * PAGE);
	free(order);
	result(cg.regs == cg.deregs && cm.regs == cm.deregs, "hits: every entry deregistered",
	       NULL);
	hit_speedup = lowest;
}

/* --- access patterns ------------------------------------------------------------------ */

/*
 * The access patterns of bench/capi_bench (its --dump file, named by
 * MRN_PATTERNS_FILE), replayed through Open MPI's rcache API into grdma and
 * into the component, with the same callbacks: ns per register +
 * deregister and how many times each called its register function.
 */
struct pattern {
	char name[32];
	size_t bytes, nprefill, nreq;
	int warm;
	size_t (*req)[2]; /* offset, length: the prefills, then the requests */
};

static int read_pattern(FILE *f, struct pattern *p)
{
	if (fscanf(f, " pattern %31s %zu %d %zu %zu", p->name, &p->bytes, &p->warm, &p->nprefill,
		   &p->nreq) != 5)
		return 0;
	if (p->nprefill > 10000000 || p->nreq > 10000000 || p->bytes > ((size_t)1 << 40))
		return -1;
	p->req = malloc((p->nprefill + p->nreq + 1) * sizeof(*p->req));
	if (!p->req)
		return -1;
	for (size_t i = 0; i < p->nprefill + p->nreq; i++)
		if (fscanf(f, "%zu %zu", &p->req[i][0], &p->req[i][1]) != 2 ||
		    p->req[i][0] > p->bytes || p->req[i][1] > p->bytes - p->req[i][0] ||
		    p->req[i][1] == 0) {
			free(p->req);
			return -1;
		}
	return 1;
}

/* One pass over requests [from, to); -1 if a register failed. */
static int replay(mca_rcache_base_module_t *m, unsigned char *base, const struct pattern *p,
		  size_t from, size_t to)
{
	for (size_t i = from; i < to; i++) {
		mca_rcache_base_registration_t *reg;

		if (m->rcache_register(m, base + p->req[i][0], p->req[i][1], 0,
				       MCA_RCACHE_ACCESS_ANY, &reg) != OPAL_SUCCESS)
			return -1;
		m->rcache_deregister(m, reg);
	}
	return 0;
}

/* ns per request as capi_bench times it; -1 on failure. */
static double time_pattern(const char *component, const struct pattern *p, long *regs)
{
	struct ctx c = {.name = component};
	mca_rcache_base_module_t *m = create(component, "patterns", &c);
	const size_t all = p->nprefill + p->nreq;
	double best = 1e30;
	unsigned char *base;

	if (!m)
		return -1;
	base = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		mca_rcache_base_module_destroy(m);
		return -1;
	}
	if (replay(m, base, p, p->warm ? p->nprefill : 0, p->warm ? all : p->nprefill) < 0)
		best = -1;
	for (int r = 0; best >= 0 && r < (p->warm ? 3 : 1); r++) {
		double t0 = now_ns(), ns;

		if (replay(m, base, p, p->nprefill, all) < 0) {
			best = -1;
			break;
		}
		ns = (now_ns() - t0) / (double)p->nreq;
		if (ns < best)
			best = ns;
	}
	*regs = c.regs;
	/* The cache goes before its memory: no invalidation is timed. */
	mca_rcache_base_module_destroy(m);
	munmap(base, p->bytes);
	return best;
}

static void patterns(void)
{
	const char *path = getenv("MRN_PATTERNS_FILE");
	FILE *f = path ? fopen(path, "r") : NULL;
	struct pattern p;
	int rc, n = 0;

	if (!f) {
		result(0, "patterns", "MRN_PATTERNS_FILE (capi_bench --dump FILE) is %s",
		       path ? "not readable" : "not set");
		return;
	}
	printf("# access patterns through the rcache API (register + deregister), ns per "
	       "request\n");
	printf("# %-12s %10s %12s %12s %8s %12s %12s\n", "pattern", "requests", "grdma ns",
	       "mrnotify ns", "speedup", "grdma regs", "our regs");
	while ((rc = read_pattern(f, &p)) > 0) {
		long rg = 0, rm = 0;
		const double tg = time_pattern("grdma", &p, &rg);
		const double tm = time_pattern("mrnotify", &p, &rm);

		free(p.req);
		if (tg < 0 || tm < 0) {
			result(0, "patterns", "%s: %s failed", p.name, tg < 0 ? "grdma" : "mrnotify");
			fclose(f);
			return;
		}
		printf("# %-12s %10zu %12.1f %12.1f %7.2fx %12ld %12ld\n", p.name, p.nreq, tg, tm,
		       tg / tm, rg, rm);
		n++;
	}
	fclose(f);
	if (rc == 0 && n > 0)
		result(1, "patterns: every pattern replayed through both caches", NULL);
	else
		result(0, "patterns", rc < 0 ? "%s is malformed" : "%s has no pattern", path);
}

/* --- main --------------------------------------------------------------------------------- */

static const struct rcache_mode modes[] = {
	{"hits", hits,
	 "the hit path (register hit + deregister) of grdma and mrnotify, 1e2 / 1e3 / 1e4 "
	 "cached entries, random order; hit_speedup_vs_grdma=<lowest ratio> last"},
	{"patterns", patterns,
	 "bench/capi_bench's access patterns (its --dump file, named by MRN_PATTERNS_FILE) "
	 "through grdma and mrnotify"},
};

static void print_speedup(void)
{
	if (hit_speedup >= 0)
		printf("hit_speedup_vs_grdma=%.2f\n", hit_speedup);
}

int main(int argc, char **argv)
{
	static const char *const defaults[] = {"hits", NULL};
	static const struct rcache_prog prog = {
		.name = "rcache_bench",
		.modes = modes,
		.nmodes = sizeof(modes) / sizeof(modes[0]),
		.defaults = defaults,
		.last = print_speedup,
	};

	return rcache_main(argc, argv, &prog);
}

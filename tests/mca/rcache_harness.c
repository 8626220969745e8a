/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The harness of tests/mca/rcache_api_test and bench/rcache_bench
 * (rcache_harness.h).
 */
#include "rcache_harness.h"

#include "opal/mca/base/base.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal.h"

#include "harness/pagemap_oracle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int passed, failed, skipped;

void result(int ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%s - %s", ok ? "ok" : "not ok", name);
	if (fmt) {
		printf(": ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	printf("\n");
	fflush(stdout);
	if (ok)
		passed++;
	else
		failed++;
}

void skip(const char *name, const char *why)
{
	printf("ok - %s # SKIP %s\n", name, why);
	fflush(stdout);
	skipped++;
}

/* --- the transport ---------------------------------------------------------- */

long live(struct ctx *c)
{
	return __atomic_load_n(&c->regs, __ATOMIC_RELAXED) -
	       __atomic_load_n(&c->deregs, __ATOMIC_RELAXED);
}

static int test_register(void *reg_data, void *base, size_t size,
			 mca_rcache_base_registration_t *breg)
{
	struct ctx *c = reg_data;
	struct test_reg *r = (struct test_reg *)breg;

	/* The cache fills these in before calling us (openib relies on it);
	 * host memory in whole pages, device memory as asked. */
	const uintptr_t mask = breg->flags & TEST_DEVICE_MEM ? 0 : PAGE - 1;

	if (breg->base != base || breg->bound != (unsigned char *)base + size - 1 ||
	    !breg->rcache || ((uintptr_t)base & mask) || (size & mask))
		__atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
	if (c->live_limit > 0 && live(c) >= c->live_limit)
		return OPAL_ERR_OUT_OF_RESOURCE;
	r->magic = MAGIC;
	r->ctx = c;
	r->npages = size / PAGE;
	r->pfns = NULL;
	if (c->record_pfns) {
		r->pfns = calloc(r->npages, sizeof(uint64_t));
		if (!r->pfns || mrn_oracle_read_pfns(base, size, r->pfns) < 0)
			__atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(&c->regs, 1, __ATOMIC_RELAXED);
	return OPAL_SUCCESS;
}

static int test_deregister(void *reg_data, mca_rcache_base_registration_t *breg)
{
	struct ctx *c = reg_data;
	struct test_reg *r = (struct test_reg *)breg;

	if (r->magic != MAGIC || r->ctx != c)
		__atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
	r->magic = DEAD;
	free(r->pfns);
	r->pfns = NULL;
	__atomic_fetch_add(&c->deregs, 1, __ATOMIC_RELAXED);
	return OPAL_SUCCESS;
}

mca_rcache_base_module_t *create(const char *component, const char *cache_name, struct ctx *c)
{
	mca_rcache_base_resources_t res = {
		.cache_name = (char *)cache_name,
		.reg_data = c,
		.sizeof_reg = sizeof(struct test_reg),
		.register_mem = test_register,
		.deregister_mem = test_deregister,
	};

	return mca_rcache_base_module_create(component, NULL, &res);
}

struct test_reg *reg_get(mca_rcache_base_module_t *m, void *addr, size_t len, uint32_t flags,
			 int32_t access, int *rc)
{
	mca_rcache_base_registration_t *reg = NULL;

	*rc = m->rcache_register(m, addr, len, flags, access, &reg);
	return (struct test_reg *)reg;
}

void reg_put(mca_rcache_base_module_t *m, struct test_reg *r)
{
	m->rcache_deregister(m, &r->base);
}

void *map_pages(size_t npages)
{
	void *p = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	memset(p, 1, npages * PAGE);
	return p;
}

const char *monitor_env(void)
{
	const char *m = getenv("OMPI_MCA_rcache_mrnotify_monitor");

	return m ? m : "auto";
}

/* --- main --------------------------------------------------------------------- */

static const struct rcache_mode *find_mode(const struct rcache_prog *prog, const char *name)
{
	for (size_t i = 0; i < prog->nmodes; i++)
		if (!strcmp(prog->modes[i].name, name))
			return &prog->modes[i];
	return NULL;
}

static void usage(FILE *f, const struct rcache_prog *prog)
{
	fprintf(f, "usage: %s [MODE ...]   (default:", prog->name);
	for (const char *const *d = prog->defaults; *d; d++)
		fprintf(f, " %s", *d);
	fprintf(f, ")\nmodes:\n");
	for (size_t i = 0; i < prog->nmodes; i++) {
		const char *d = prog->modes[i].description;

		fprintf(f, "  %-15s", prog->modes[i].name);
		/* Words wrapped at 78 columns, under the first one. */
		for (int col = 17; *d;) {
			const int len = (int)strcspn(d, " ");

			if (col > 17 && col + 1 + len > 78) {
				fprintf(f, "\n%17s", "");
				col = 17;
			}
			fprintf(f, " %.*s", len, d);
			col += 1 + len;
			d += len + strspn(d + len, " ");
		}
		fprintf(f, "\n");
	}
	fprintf(f, "The component is found through mca_base_component_path (in the environment:\n"
		   "OMPI_MCA_mca_base_component_path=SYS_DEFAULT:<dir>), the monitor through\n"
		   "OMPI_MCA_rcache_mrnotify_monitor.\n");
}

int rcache_main(int argc, char **argv, const struct rcache_prog *prog)
{
	const char *const *names = prog->defaults;
	int nnames = 0;

	if (argc > 1) {
		names = (const char *const *)argv + 1;
		nnames = argc - 1;
	} else {
		while (names[nnames])
			nnames++;
	}
	for (int i = 0; i < nnames; i++) {
		if (!strcmp(names[i], "-h") || !strcmp(names[i], "--help")) {
			usage(stdout, prog);
			return 0;
		}
		if (!find_mode(prog, names[i])) {
			fprintf(stderr, "%s: unknown mode %s\n", prog->name, names[i]);
			usage(stderr, prog);
			return 2;
		}
	}
	/* Full OPAL (memory hooks included), as in an MPI process. */
	if (opal_init(&argc, &argv) != OPAL_SUCCESS) {
		fprintf(stderr, "%s: opal_init failed\n", prog->name);
		return 2;
	}
	if (mca_base_framework_open(&opal_rcache_base_framework, 0) != OPAL_SUCCESS) {
		fprintf(stderr, "%s: cannot open the rcache framework\n", prog->name);
		return 2;
	}
	printf("# monitor %s, component path %s\n", monitor_env(),
	       getenv("OMPI_MCA_mca_base_component_path")
		       ? getenv("OMPI_MCA_mca_base_component_path")
		       : "(default)");
	for (int i = 0; i < nnames; i++)
		find_mode(prog, names[i])->run();
	printf("# %s: %d passed, %d failed, %d skipped\n", prog->name, passed, failed, skipped);
	/* TAP's plan: a run that stops before here (a crash) has none. */
	printf("1..%d\n", passed + failed + skipped);
	if (prog->last)
		prog->last();
	fflush(stdout);
	/* The framework's close deregisters what is left; OPAL is not torn down. */
	mca_base_framework_close(&opal_rcache_base_framework);
	if (failed)
		return 1;
	/* A proof that could not run is not a pass. */
	return skipped ? 77 : 0;
}

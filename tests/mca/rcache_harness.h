/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What tests/mca/rcache_api_test and bench/rcache_bench share: a transport
 * (register and deregister functions that count their calls and check
 * what the cache hands them), caches created through Open MPI's rcache
 * framework as a transport creates them, the result lines, and a main()
 * that runs the modes named on the command line from a table.
 *
 * Output: one "ok - NAME[: detail]" or "not ok - NAME: detail" line per
 * check, "ok - NAME # SKIP why" for a check that could not run, "# ..."
 * comments, and last "# PROG: N passed, N failed, N skipped". Exit status
 * 1 if any failed, else 77 if any was skipped (a proof that could not run
 * is not a pass), else 0; 2 for a bad mode or when Open MPI cannot start.
 */
#ifndef MRN_RCACHE_HARNESS_H
#define MRN_RCACHE_HARNESS_H

#include "opal_config.h"

#include "opal/mca/rcache/rcache.h"

#include <stddef.h>
#include <stdint.h>

#define PAGE  4096UL

/* The device-memory flag: Open MPI 4.1's name, and 5.0's (the same bit). */
#if OPAL_MAJOR_VERSION >= 5
#define TEST_DEVICE_MEM MCA_RCACHE_FLAGS_ACCELERATOR_MEM
#else
#define TEST_DEVICE_MEM MCA_RCACHE_FLAGS_CUDA_GPU_MEM
#endif
#define MAGIC 0x6d726e31u
#define DEAD  0xdeaddeadu

void result(int ok, const char *name, const char *fmt, ...);
void skip(const char *name, const char *why);

#define CHECK(name, cond, ...)                                                                     \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			result(0, name, __VA_ARGS__);                                              \
			return;                                                                    \
		}                                                                                  \
	} while (0)

/* --- the transport: a register function that counts and records frames --- */

struct ctx {
	const char *name;
	int record_pfns;   /* snapshot page frames at registration */
	long live_limit;   /* > 0: OUT_OF_RESOURCE beyond this many live */
	long regs, deregs; /* atomics */
	long bad;          /* callbacks that saw something wrong */
};

struct test_reg {
	mca_rcache_base_registration_t base;
	uint32_t magic;
	size_t npages;
	uint64_t *pfns;
	struct ctx *ctx;
};

long live(struct ctx *c);

/* Creates a cache through the framework, as a transport does. */
mca_rcache_base_module_t *create(const char *component, const char *cache_name, struct ctx *c);
struct test_reg *reg_get(mca_rcache_base_module_t *m, void *addr, size_t len, uint32_t flags,
			 int32_t access, int *rc);
void reg_put(mca_rcache_base_module_t *m, struct test_reg *r);
/* Private anonymous pages, touched; exits 2 if the mmap fails. */
void *map_pages(size_t npages);
/* OMPI_MCA_rcache_mrnotify_monitor, "auto" when unset. */
const char *monitor_env(void);

/* --- main ----------------------------------------------------------------- */

struct rcache_mode {
	const char *name;
	void (*run)(void);
	const char *description;
};

struct rcache_prog {
	const char *name;
	const struct rcache_mode *modes;
	size_t nmodes;
	const char *const *defaults; /* run without arguments; NULL-terminated */
	void (*last)(void);          /* prints after the count line, or NULL */
};

/*
 * Checks every MODE argument against the table (an unknown one: the
 * table on stderr, exit 2; -h or --help: the table, exit 0), starts OPAL
 * and the rcache framework, runs the modes in order, prints the count and
 * returns the exit status.
 */
int rcache_main(int argc, char **argv, const struct rcache_prog *prog);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx_stale: after munmap() and mmap(MAP_FIXED) at the same address, does
 * UCX's registration cache hand out the registration of the old pages?
 *
 * Registers a buffer through UCP (ucp_mem_map: the UCP rcache, and under it
 * each memory domain's) or UCT (uct_md_mem_reg on the IB memory domain: its
 * rcache, which pins with ibv_reg_mr), checks that a second registration is
 * a cache hit, snapshots the page frames the registration pinned
 * (/proc/self/pagemap), replaces the mapping, and registers again. Getting
 * the first handle back while the pages mapped now differ from the
 * snapshot is a stale hit. The first handle is held throughout, so a fresh
 * registration can never reuse its address. From UCX 1.14 on, ucp_mem_map()
 * of a user buffer returns a new handle each time, made from the cached
 * registration: there the same registration is the same packed remote key
 * (the memory domains' keys of the cached region), not the same handle.
 *
 * Usage: ucx_stale --api=ucp|uct --unmap=libc|raw --expect=fresh|stale|uncached
 *                  [--declare-external] [--pages=N] [--md=NAME]
 *                  [--fork[=before|after]]
 *   --unmap=raw        munmap and mmap with syscall(), which no hook sees
 *   --declare-external tell UCM that VM_UNMAPPED events come from elsewhere
 *                      and never send one: a cache that is never told
 *   --md=NAME          UCT memory domain (default: the first of component ib)
 *   --fork[=before]    run the whole check in a forked child, then in the parent
 *   --fork=after       register a buffer first (UCX used, the plugin active),
 *                      then fork: the check in the child (its own context),
 *                      then in the parent, with the context it had before
 * Prints one "ucx_stale: ... result: ..." line. Exit status: 0 when the
 * result is the one expected, 1 when not, 77 when it cannot be told (not
 * root: no real page frames; --api=uct without an IB device).
 */
#define _GNU_SOURCE
#include "harness/pagemap_oracle.h"

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "ucx_versions.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SKIP 77

static const char *api = "ucp", *unmap_how = "libc", *expect = NULL, *md_want = NULL;
static int declare_external;
static const char *fork_when; /* NULL, "before" or "after" (UCX's first use) */
static size_t npages = 4;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "ucx_stale: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(2);
}

/* Registration front ends: the same steps through UCP or UCT. */
struct regs {
	ucp_context_h ucp;
	uct_component_h *comps;
	uct_md_h md;
	char md_name[UCT_MD_NAME_MAX];
};

/*
 * Has this UCX the IB component (libuct_ib)? Not whether it sees a device:
 * a broken rxe0 must fail the cases, not skip them.
 */
static int have_ib_component(void)
{
	uct_component_h *comps;
	unsigned ncomps;
	int found = 0;

	if (uct_query_components(&comps, &ncomps) != UCS_OK)
		return 0;
	for (unsigned c = 0; c < ncomps && !found; c++) {
		uct_component_attr_t attr = {
			.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
				      UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

		found = uct_component_query(comps[c], &attr) == UCS_OK && !strcmp(attr.name, "ib");
	}
	uct_release_component_list(comps);
	return found;
}

static int regs_open(struct regs *r)
{
	memset(r, 0, sizeof(*r));
	if (!strcmp(api, "ucp")) {
		/*
		 * Registrations are told apart by their packed remote keys,
		 * which differ only through a memory domain that makes keys
		 * (IB's): without one a fresh registration packs the same as
		 * the old and would be called a stale hit. Debian forky's UCX
		 * 1.23.0~rc1 ships no IB transport.
		 */
		if (!have_ib_component()) {
			printf("ucx_stale: this UCX has no IB component (libuct_ib), so UCP's remote "
			       "keys cannot tell registrations apart; skipped\n");
			return SKIP;
		}
		ucp_params_t params = {
			.field_mask = UCP_PARAM_FIELD_FEATURES,
			.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG,
		};
		ucp_config_t *config;
		ucs_status_t st = ucp_config_read(NULL, NULL, &config);

		if (st != UCS_OK)
			die("ucp_config_read", ucs_status_string(st));
		st = ucp_init(&params, config, &r->ucp);
		ucp_config_release(config);
		if (st != UCS_OK)
			die("ucp_init", ucs_status_string(st));
		snprintf(r->md_name, sizeof(r->md_name), "ucp");
		return 0;
	}

	unsigned ncomps;
	ucs_status_t st = uct_query_components(&r->comps, &ncomps);

	if (st != UCS_OK)
		die("uct_query_components", ucs_status_string(st));
	for (unsigned c = 0; c < ncomps && r->md == NULL; c++) {
		uct_component_attr_t attr = {
			.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
				      UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

		if (uct_component_query(r->comps[c], &attr) != UCS_OK)
			continue;
		if (md_want == NULL && strcmp(attr.name, "ib"))
			continue;
		uct_md_resource_desc_t res[attr.md_resource_count ? attr.md_resource_count : 1];
		attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
		attr.md_resources = res;
		if (uct_component_query(r->comps[c], &attr) != UCS_OK)
			continue;
		for (unsigned m = 0; m < attr.md_resource_count; m++) {
			uct_md_config_t *cfg;

			if (md_want != NULL && strcmp(res[m].md_name, md_want))
				continue;
			if (uct_md_config_read(r->comps[c], NULL, NULL, &cfg) != UCS_OK)
				continue;
			st = uct_md_open(r->comps[c], res[m].md_name, cfg, &r->md);
			uct_config_release(cfg);
			if (st == UCS_OK) {
				snprintf(r->md_name, sizeof(r->md_name), "%s", res[m].md_name);
				break;
			}
			r->md = NULL;
		}
	}
	if (r->md == NULL) {
		printf("ucx_stale: no UCT memory domain %s to register with; skipped\n",
		       md_want ? md_want : "of component ib");
		return SKIP;
	}
	return 0;
}

static void *reg(struct regs *r, void *addr, size_t len)
{
	ucs_status_t st;
	void *h = NULL;

	if (r->ucp != NULL) {
		ucp_mem_map_params_t p = {
			.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
				      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
			.address = addr,
			.length = len,
		};
		ucp_mem_h memh;

		st = ucp_mem_map(r->ucp, &p, &memh);
		h = memh;
	} else {
		uct_mem_h memh;

		st = uct_md_mem_reg(r->md, addr, len, UCT_MD_MEM_ACCESS_ALL, &memh);
		h = memh;
	}
	if (st != UCS_OK)
		die("registration failed", ucs_status_string(st));
	return h;
}

/* Do handles a and b stand for the same cached registration? */
static int same_registration(struct regs *r, void *a, void *b)
{
#if MRN_UCX_MEMH_FROM_CACHE
	if (r->ucp != NULL) {
		void *ka, *kb;
		size_t la, lb;
		int same;

		if (a == b)
			return 1;
		if (ucp_rkey_pack(r->ucp, a, &ka, &la) != UCS_OK ||
		    ucp_rkey_pack(r->ucp, b, &kb, &lb) != UCS_OK)
			die("ucp_rkey_pack", NULL);
		same = la == lb && memcmp(ka, kb, la) == 0;
		ucp_rkey_buffer_release(ka);
		ucp_rkey_buffer_release(kb);
		return same;
	}
#endif
	(void)r;
	return a == b;
}

static void dereg(struct regs *r, void *h)
{
	ucs_status_t st = r->ucp ? ucp_mem_unmap(r->ucp, h) : uct_md_mem_dereg(r->md, h);

	if (st != UCS_OK)
		die("deregistration failed", ucs_status_string(st));
}

static void regs_close(struct regs *r)
{
	if (r->ucp)
		ucp_cleanup(r->ucp);
	if (r->md)
		uct_md_close(r->md);
	if (r->comps)
		uct_release_component_list(r->comps);
}

static void remap(char *p, size_t len)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;

	if (!strcmp(unmap_how, "raw")) {
		if (syscall(SYS_munmap, p, len) != 0)
			die("munmap (syscall)", strerror(errno));
		if ((void *)syscall(SYS_mmap, p, len, prot, flags, -1, 0) != p)
			die("mmap MAP_FIXED (syscall)", strerror(errno));
	} else {
		if (munmap(p, len) != 0)
			die("munmap", strerror(errno));
		if (mmap(p, len, prot, flags, -1, 0) != p)
			die("mmap MAP_FIXED", strerror(errno));
	}
	memset(p, 0x22, len);
}

static int scenario(void);
static int scenario_in(struct regs *r);
static int fork_before_use(void);
static int fork_after_use(void);

static int report(const char *result, const char *detail)
{
	const int ok = !strcmp(result, expect);

	printf("ucx_stale: api=%s unmap=%s%s result: %s%s%s (expected %s) %s\n", api, unmap_how,
	       declare_external ? " external-never-reported" : "", result, detail ? ", " : "",
	       detail ? detail : "", expect, ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strncmp(a, "--api=", 6))
			api = a + 6;
		else if (!strncmp(a, "--unmap=", 8))
			unmap_how = a + 8;
		else if (!strncmp(a, "--expect=", 9))
			expect = a + 9;
		else if (!strncmp(a, "--pages=", 8))
			npages = strtoul(a + 8, NULL, 0);
		else if (!strncmp(a, "--md=", 5))
			md_want = a + 5;
		else if (!strcmp(a, "--declare-external"))
			declare_external = 1;
		else if (!strcmp(a, "--fork") || !strcmp(a, "--fork=before"))
			fork_when = "before";
		else if (!strcmp(a, "--fork=after"))
			fork_when = "after";
		else
			die("unknown argument", a);
	}
	if (expect == NULL || (strcmp(api, "ucp") && strcmp(api, "uct")) ||
	    (strcmp(unmap_how, "libc") && strcmp(unmap_how, "raw")) ||
	    (strcmp(expect, "fresh") && strcmp(expect, "stale") && strcmp(expect, "uncached")) ||
	    npages == 0)
		die("usage",
		    "ucx_stale --api=ucp|uct --unmap=libc|raw --expect=fresh|stale|uncached "
		    "[--declare-external] [--pages=N] [--md=NAME] [--fork[=before|after]]");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!mrn_oracle_available()) {
		printf("ucx_stale: /proc/self/pagemap shows no page frames (not root?); skipped\n");
		return SKIP;
	}
	if (fork_when == NULL)
		return scenario();
	return !strcmp(fork_when, "before") ? fork_before_use() : fork_after_use();
}

/* Two results as one: a failure (1, 2) before a skip (77) before a pass. */
static int combined(int a, int b)
{
	if (a != 0 && a != SKIP)
		return a;
	if (b != 0 && b != SKIP)
		return b;
	return a != 0 ? a : b;
}

/* Wait for the child: its exit status, or 1 if it did not exit. */
static int child_result(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		die("waitpid", strerror(errno));
	if (!WIFEXITED(status))
		return 1;
	return WEXITSTATUS(status);
}

/*
 * A child forked after the plugin opened the device (at load) but before
 * UCX was used: the status page is not inherited, so the plugin must open
 * its own context there. Then the parent, whose context the fork must not
 * have disturbed.
 */
static int fork_before_use(void)
{
	fflush(stdout);
	const pid_t pid = fork();

	if (pid < 0)
		die("fork", strerror(errno));
	if (pid == 0) {
		printf("ucx_stale: in a forked child:\n");
		exit(scenario());
	}
	const int child_rc = child_result(pid);

	printf("ucx_stale: in the parent, after the fork:\n");
	const int rc = scenario();

	return combined(child_rc, rc);
}

/*
 * A fork after UCX was used, as an MPI rank's system() or a forked helper
 * does: the parent's caches hold a registration and the plugin watches for
 * them. The child inherits those caches and the parent's watch, which is
 * not its address space's; it must leave them and watch its own (a new
 * context there, UCX's rule for a child). The parent's caches must still be
 * told of its unmaps afterwards.
 */
static int fork_after_use(void)
{
	if (declare_external)
		ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);

	struct regs r;
	int rc = regs_open(&r);

	if (rc != 0)
		return rc;
	const size_t len = (size_t)sysconf(_SC_PAGESIZE);
	char *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (q == MAP_FAILED)
		die("mmap", strerror(errno));
	memset(q, 0x33, len);
	void *h0 = reg(&r, q, len);

	fflush(stdout);
	const pid_t pid = fork();

	if (pid < 0)
		die("fork", strerror(errno));
	if (pid == 0) {
		/* The parent's context is left alone: a child may not use it. */
		printf("ucx_stale: in a child forked after UCX was used:\n");
		exit(scenario());
	}
	const int child_rc = child_result(pid);

	printf("ucx_stale: in the parent, after the fork, with its context of before:\n");
	rc = scenario_in(&r);
	dereg(&r, h0);
	regs_close(&r);
	munmap(q, len);
	return combined(child_rc, rc);
}

static int scenario(void)
{
	/* Must precede the caches' creation, as a real external source's would. */
	if (declare_external)
		ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);

	struct regs r;
	int rc = regs_open(&r);

	if (rc != 0)
		return rc;
	rc = scenario_in(&r);
	regs_close(&r);
	return rc;
}

/* The check itself, on an open context r (left open). */
static int scenario_in(struct regs *r)
{
	int rc;
	const size_t len = npages * (size_t)sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap", strerror(errno));
	memset(p, 0x11, len);

	void *h1 = reg(r, p, len);
	uint64_t *pinned = calloc(mrn_oracle_page_count(p, len), sizeof(*pinned));

	if (pinned == NULL || mrn_oracle_read_pfns(p, len, pinned) != 0)
		die("reading pagemap", NULL);
	void *h1b = reg(r, p, len);
	char detail[200];

	if (!same_registration(r, h1b, h1)) {
		snprintf(detail, sizeof(detail),
			 "%s: a second registration of the same buffer is not a cache hit",
			 r->md_name);
		rc = report("uncached", detail);
		dereg(r, h1b);
		dereg(r, h1);
		free(pinned);
		munmap(p, len);
		return rc;
	}
	/*
	 * h1b stays held to the end: ucp_mem_unmap() would not just drop a
	 * reference but take the region out of the cache.
	 */
	remap(p, len);

	void *h2 = reg(r, p, len);

	if (same_registration(r, h2, h1)) {
		const long stale = mrn_oracle_count_stale(p, len, pinned);

		snprintf(detail, sizeof(detail),
			 "%s handed out the registration of the old mapping (%ld of %zu pages are "
			 "not the ones mapped now)",
			 r->md_name, stale, npages);
		rc = report(stale > 0 ? "stale" : "fresh", detail);
		dereg(r, h2);
	} else {
		void *h3 = reg(r, p, len);

		if (!same_registration(r, h3, h2)) {
			snprintf(detail, sizeof(detail),
				 "%s: new registration, but it is not cached", r->md_name);
			rc = report("uncached", detail);
		} else {
			snprintf(detail, sizeof(detail),
				 "%s registered the new pages, and caches them", r->md_name);
			rc = report("fresh", detail);
		}
		dereg(r, h3);
		dereg(r, h2);
	}
	dereg(r, h1b);
	dereg(r, h1);
	munmap(p, len);
	free(pinned);
	return rc;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rcache component through Open MPI's own rcache API, in one process,
 * next to the stock grdma. The modes are the table at the end (usage:
 * rcache_api_test --help); the one that matters most is replacement: after
 * a raw munmap (Open MPI's hooks do not see it) and an mmap MAP_FIXED at
 * the same address, grdma hands back the stale registration and mrnotify
 * does not; the register function records the page frames of each
 * registration (the pagemap oracle) to prove which is stale.
 *
 * Usage: rcache_api_test [MODE ...]   (default: semantics replacement
 * threads). The component is found through mca_base_component_path (the
 * environment: OMPI_MCA_mca_base_component_path=SYS_DEFAULT:<dir>), the
 * monitor through OMPI_MCA_rcache_mrnotify_monitor. Prints one "ok" or
 * "not ok" line per check; exits 1 if any failed, else 77 if any was
 * skipped (a proof that could not run is not a pass), else 0
 * (rcache_harness.h). The benchmarks on the same harness are
 * bench/rcache_bench.
 */
#include "rcache_harness.h"

#include "opal/mca/base/base.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal_params.h"

#include "harness/pagemap_oracle.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * The end of a case: destroys the cache, unmaps the buffer, and passes when
 * every registration was deregistered once and no callback saw anything
 * wrong.
 */
static void end_case(const char *T, mca_rcache_base_module_t *m, struct ctx *c, void *buf,
		     size_t pages)
{
	mca_rcache_base_module_destroy(m);
	munmap(buf, pages * PAGE);
	if (c->regs == c->deregs && c->bad == 0)
		result(1, T, NULL);
	else
		result(0, T, "%ld registered, %ld deregistered, %ld bad", c->regs, c->deregs,
		       c->bad);
}

/*
 * The monitor the cache will really use: auto means kernel when the device
 * opens. Named in the results, so a reader knows which monitor was proven.
 */
static const char *monitor_used(void)
{
	const char *m = monitor_env();

	if (strcmp(m, "auto"))
		return m;
	return access("/dev/mrnotify", R_OK | W_OK) == 0 ? "kernel" : "uffd";
}


/* --- semantics ---------------------------------------------------------------- */

static void t_leave_pinned_hit(void)
{
	const char *T = "leave_pinned on: a released registration is reused";
	struct ctx c = {.name = "hit"};
	mca_rcache_base_module_t *m = create("mrnotify", "sem.hit", &c);
	unsigned char *buf = map_pages(4);
	struct test_reg *a, *b;
	int rc;

	CHECK(T, m, "cannot create the cache");
	a = reg_get(m, buf + 100, 2 * PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a && rc == OPAL_SUCCESS, "register failed (%d)", rc);
	CHECK(T, a->base.base == buf && a->base.bound == buf + 3 * PAGE - 1,
	      "range [%p, %p] is not the page-aligned [%p, %p]", (void *)a->base.base,
	      (void *)a->base.bound, (void *)buf, (void *)(buf + 3 * PAGE - 1));
	CHECK(T, a->base.access_flags == MCA_RCACHE_ACCESS_ANY, "access_flags %#x",
	      a->base.access_flags);
	reg_put(m, a);
	CHECK(T, c.deregs == 0, "deregistered on release with leave_pinned on");
	b = reg_get(m, buf + 200, PAGE, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &rc);
	CHECK(T, b == a && c.regs == 1, "second register: reg %p (first %p), %ld register calls",
	      (void *)b, (void *)a, c.regs);
	reg_put(m, b);
	CHECK(T, m->rcache_invalidate_range == NULL || !strcmp(monitor_env(), "none"),
	      "invalidate_range set with monitor %s: memory hooks would be needed", monitor_env());
	end_case(T, m, &c, buf, 4);
}

static void t_flags(void)
{
	static const struct {
		uint32_t flag;
		const char *name;
	} flags[] = {
		{MCA_RCACHE_FLAGS_CACHE_BYPASS, "BYPASS"},
		{MCA_RCACHE_FLAGS_PERSIST, "PERSIST"},
		{MCA_RCACHE_FLAGS_INVALID, "INVALID"},
	};
	unsigned char *buf = map_pages(2);

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		char T[128];
		struct ctx c = {.name = "flags"};
		mca_rcache_base_module_t *m;
		struct test_reg *a, *b, *d;
		mca_rcache_base_registration_t *f = NULL;
		int rc;

		snprintf(T, sizeof(T), "%s: registered anew, never cached, deregistered on release",
			 flags[i].name);
		m = create("mrnotify", "sem.flags", &c);
		if (!m) {
			result(0, T, "cannot create the cache");
			continue;
		}
		a = reg_get(m, buf, PAGE, flags[i].flag, MCA_RCACHE_ACCESS_ANY, &rc);
		b = reg_get(m, buf, PAGE, flags[i].flag, MCA_RCACHE_ACCESS_ANY, &rc);
		if (!a || !b || a == b || c.regs != 2) {
			result(0, T, "two registers gave %p and %p with %ld register calls",
			       (void *)a, (void *)b, c.regs);
			mca_rcache_base_module_destroy(m);
			continue;
		}
		/* Not visible to lookups of cached registrations. */
		d = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
		if (d == a || d == b || c.regs != 3) {
			result(0, T, "a plain register returned the %s registration",
			       flags[i].name);
			mca_rcache_base_module_destroy(m);
			continue;
		}
		reg_put(m, d);
		reg_put(m, a);
		reg_put(m, b);
		if (c.deregs != 2) {
			result(0, T, "%ld deregistered after releasing both (expected 2)",
			       c.deregs);
			mca_rcache_base_module_destroy(m);
			continue;
		}
		/* The plain one is idle in the cache; find sees it, not the others. */
		rc = m->rcache_find(m, buf, PAGE, &f);
		if (rc != OPAL_SUCCESS || (struct test_reg *)f != d) {
			result(0, T, "find returned %p (rc %d), expected the cached %p", (void *)f,
			       rc, (void *)d);
			mca_rcache_base_module_destroy(m);
			continue;
		}
		m->rcache_deregister(m, f);
		mca_rcache_base_module_destroy(m);
		result(c.regs == c.deregs && c.bad == 0, T, "%ld registered, %ld deregistered",
		       c.regs, c.deregs);
	}
	munmap(buf, 2 * PAGE);
}

/* Device memory (Open MPI 5.0.9's btl/ofi and mtl/ofi ask grdma for it):
 * registered for the caller, flag and range as asked, never cached, never
 * refused. Plain host memory stands in for the device's: the transport's
 * register function is what would tell the two apart. */
static void t_device_mem(void)
{
	const char *T = "device memory: registered uncached as asked, never refused";
	struct ctx c = {.name = "device"};
	mca_rcache_base_module_t *m = create("mrnotify", "sem.device", &c);
	unsigned char *buf = map_pages(2);
	struct test_reg *a, *b;
	int rc;

	CHECK(T, m != NULL, "cannot create the cache");
	a = reg_get(m, buf + 100, 200, TEST_DEVICE_MEM, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a != NULL && rc == OPAL_SUCCESS, "register returned %d", rc);
	CHECK(T, (a->base.flags & TEST_DEVICE_MEM) && a->base.base == buf + 100 &&
			 a->base.bound == buf + 299,
	      "flags %#x, range %p-%p for %p-%p", a->base.flags, (void *)a->base.base,
	      (void *)a->base.bound, (void *)(buf + 100), (void *)(buf + 299));
	b = reg_get(m, buf + 100, 200, TEST_DEVICE_MEM, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, b != NULL && b != a && c.regs == 2,
	      "the same range again: %p (first %p), %ld register calls", (void *)b, (void *)a,
	      c.regs);
	reg_put(m, a);
	reg_put(m, b);
	CHECK(T, c.deregs == 2, "%ld deregistered after releasing both", c.deregs);
	mca_rcache_base_module_destroy(m);
	munmap(buf, 2 * PAGE);
	result(c.bad == 0, T, "%ld registered, %ld deregistered", c.regs, c.deregs);
}

static void t_upgrade(void)
{
	const char *T = "access upgrade: a registration lacking access is replaced by the union";
	struct ctx c = {.name = "upgrade"};
	mca_rcache_base_module_t *m = create("mrnotify", "sem.upgrade", &c);
	unsigned char *buf = map_pages(4);
	struct test_reg *a, *b, *d;
	int rc;

	CHECK(T, m, "cannot create the cache");
	a = reg_get(m, buf, 2 * PAGE, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &rc);
	CHECK(T, a, "register failed (%d)", rc);
	reg_put(m, a);
	b = reg_get(m, buf + PAGE, 2 * PAGE, 0, MCA_RCACHE_ACCESS_REMOTE_READ, &rc);
	CHECK(T, b && b != a && c.regs == 2, "upgrade: %p (old %p), %ld register calls", (void *)b,
	      (void *)a, c.regs);
	CHECK(T,
	      b->base.access_flags ==
		      (MCA_RCACHE_ACCESS_LOCAL_WRITE | MCA_RCACHE_ACCESS_REMOTE_READ),
	      "access_flags %#x, expected the union 0x3", b->base.access_flags);
	CHECK(T, b->base.base == buf && b->base.bound == buf + 3 * PAGE - 1,
	      "range [%p, %p], expected the union [%p, %p]", (void *)b->base.base,
	      (void *)b->base.bound, (void *)buf, (void *)(buf + 3 * PAGE - 1));
	CHECK(T, c.deregs == 1, "the superseded idle registration was not deregistered (%ld)",
	      c.deregs);
	d = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &rc);
	CHECK(T, d == b && c.regs == 2, "the old access now gets %p, not the union %p", (void *)d,
	      (void *)b);
	reg_put(m, d);
	reg_put(m, b);
	end_case(T, m, &c, buf, 4);
}

static void t_find_evict(void)
{
	const char *T = "find takes a reference; evict drops idle registrations, oldest first";
	struct ctx c = {.name = "evict"};
	mca_rcache_base_module_t *m = create("mrnotify", "sem.evict", &c);
	unsigned char *buf = map_pages(16);
	mca_rcache_base_registration_t *f = NULL;
	struct test_reg *r[4], *busy;
	int rc, n = 0;

	CHECK(T, m, "cannot create the cache");
	rc = m->rcache_find(m, buf, PAGE, &f);
	CHECK(T, rc != OPAL_SUCCESS && !f, "find of nothing returned %p (rc %d)", (void *)f, rc);
	for (int i = 0; i < 4; i++) {
		r[i] = reg_get(m, buf + 2 * i * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
		CHECK(T, r[i], "register %d failed (%d)", i, rc);
	}
	busy = reg_get(m, buf + 10 * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, busy, "register failed (%d)", rc);
	for (int i = 0; i < 4; i++)
		reg_put(m, r[i]);
	rc = m->rcache_find(m, buf + 2 * PAGE + 10, 100, &f);
	CHECK(T, rc == OPAL_SUCCESS && (struct test_reg *)f == r[1],
	      "find returned %p, expected %p", (void *)f, (void *)r[1]);
	/* Held by find: evict may take the three others, and not it. */
	while (m->rcache_evict(m))
		n++;
	CHECK(T, n == 3 && c.deregs == 3, "%d evicted, %ld deregistered (expected 3)", n, c.deregs);
	m->rcache_deregister(m, f);
	CHECK(T, m->rcache_evict(m) && c.deregs == 4,
	      "the released find reference was not evictable");
	CHECK(T, !m->rcache_evict(m), "evict with only a busy registration succeeded");
	reg_put(m, busy);
	end_case(T, m, &c, buf, 16);
}

static void t_out_of_resource(void)
{
	const char *T = "out of resources: idle registrations are evicted and the register retried";
	struct ctx c = {.name = "oor", .live_limit = 3};
	mca_rcache_base_module_t *m = create("mrnotify", "sem.oor", &c);
	unsigned char *buf = map_pages(16);
	struct test_reg *r;
	int rc;

	CHECK(T, m, "cannot create the cache");
	for (int i = 0; i < 6; i++) {
		r = reg_get(m, buf + 2 * i * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
		CHECK(T, r && rc == OPAL_SUCCESS, "register %d failed with %d live (rc %d)", i,
		      live(&c), rc);
		reg_put(m, r);
	}
	CHECK(T, live(&c) <= 3, "%ld live registrations over the transport's limit 3", live(&c));
	/* Busy ones cannot be evicted: the error reaches the caller. */
	{
		struct test_reg *h[3];
		int n = 0;

		for (int i = 0; i < 3; i++) {
			h[i] = reg_get(m, buf + (2 * i + 1) * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY,
				       &rc);
			n += h[i] != NULL;
		}
		r = reg_get(m, buf + 14 * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
		for (int i = 0; i < 3; i++)
			if (h[i])
				reg_put(m, h[i]);
		CHECK(T, n == 3 && !r && rc == OPAL_ERR_OUT_OF_RESOURCE,
		      "with 3 busy: %d succeeded, the 4th gave %p rc %d (expected OUT_OF_RESOURCE)",
		      n, (void *)r, rc);
	}
	end_case(T, m, &c, buf, 16);
}

static void t_sharing(void)
{
	const char *T =
		"cache_name copied; modules with the same name and callbacks share one cache";
	struct ctx c = {.name = "share"}, other = {.name = "other"};
	char *name = strdup("sem.shared"), *name2 = strdup("sem.shared");
	mca_rcache_base_module_t *m1, *m2, *m3;
	unsigned char *buf = map_pages(2);
	struct test_reg *a, *b, *d;
	int rc;

	m1 = create("mrnotify", name, &c);
	/*
	 * Transports free their name right after create (btl/ofi, btl/uct).
	 * Overwritten, and freed only later, so that a kept pointer cannot
	 * find the same text again in reused memory.
	 */
	memset(name, 'X', strlen(name));
	m2 = create("mrnotify", name2, &c);
	m3 = create("mrnotify", name2, &other);
	free(name);
	free(name2);
	CHECK(T, m1 && m2 && m3 && m1 != m2, "cannot create the modules");
	a = reg_get(m1, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a, "register failed (%d)", rc);
	reg_put(m1, a);
	b = reg_get(m2, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, b == a && c.regs == 1,
	      "the second module of the same name got %p (first %p), %ld register calls: not "
	      "shared (name not copied?)",
	      (void *)b, (void *)a, c.regs);
	/* Other callbacks' context: a registration of its own. */
	d = reg_get(m3, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, d && d != a && other.regs == 1, "a module with another context got %p", (void *)d);
	reg_put(m3, d);
	/* The first module goes; the cache lives on for the second. */
	mca_rcache_base_module_destroy(m1);
	CHECK(T, c.deregs == 0, "destroying one sharing module deregistered %ld", c.deregs);
	reg_put(m2, b);
	b = reg_get(m2, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, b == a && c.regs == 1, "after the first module went: %p", (void *)b);
	reg_put(m2, b);
	mca_rcache_base_module_destroy(m2);
	CHECK(T, c.deregs == 1, "the last module's destroy left %ld registered", live(&c));
	mca_rcache_base_module_destroy(m3);
	munmap(buf, 2 * PAGE);
	CHECK(T, other.regs == other.deregs && c.bad == 0 && other.bad == 0, "unbalanced");
	result(1, T, NULL);
}

static void t_leave_pinned_off(void)
{
	const char *T = "mpi_leave_pinned 0: nothing idle is kept; concurrent users still share";
	const char *T2 = "mpi_leave_pinned_pipeline 1: idle registrations are kept";
	const int saved = opal_leave_pinned;
	const bool saved_pipeline = opal_leave_pinned_pipeline;
	struct ctx c = {.name = "lp0"}, c2 = {.name = "pipeline"};
	mca_rcache_base_module_t *m, *m2;
	unsigned char *buf = map_pages(2);
	struct test_reg *a, *b;
	int rc;

	/* Latched when the cache is created, as grdma does. */
	opal_leave_pinned = 0;
	m = create("mrnotify", "sem.lp0", &c);
	opal_leave_pinned_pipeline = true;
	m2 = create("mrnotify", "sem.pipeline", &c2);
	opal_leave_pinned = saved;
	opal_leave_pinned_pipeline = saved_pipeline;
	CHECK(T, m && m2, "cannot create the caches");
	a = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	b = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a && b == a && c.regs == 1, "two users at once got %p and %p", (void *)a,
	      (void *)b);
	reg_put(m, b);
	CHECK(T, c.deregs == 0, "deregistered while still in use");
	reg_put(m, a);
	CHECK(T, c.deregs == 1, "not deregistered when the last user released it");
	a = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a && c.regs == 2, "registered again: %ld register calls (expected 2)", c.regs);
	reg_put(m, a);
	mca_rcache_base_module_destroy(m);
	result(c.regs == c.deregs, T, NULL);

	a = reg_get(m2, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	if (a)
		reg_put(m2, a);
	b = reg_get(m2, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	if (b)
		reg_put(m2, b);
	result(a && b == a && c2.regs == 1 && c2.deregs == 0, T2,
	       "%ld register calls, %ld deregister", c2.regs, c2.deregs);
	mca_rcache_base_module_destroy(m2);
	munmap(buf, 2 * PAGE);
}

static void semantics(void)
{
	t_leave_pinned_hit();
	t_flags();
	t_device_mem();
	t_upgrade();
	t_find_evict();
	t_out_of_resource();
	t_sharing();
	t_leave_pinned_off();
}

/* --- replacement: grdma hands out stale registrations, mrnotify does not ----- */

static void *raw_mmap_fixed(void *p, size_t len)
{
	return (void *)syscall(SYS_mmap, p, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

static void *raw_mremap_to(void *from, size_t len, void *to)
{
	return (void *)syscall(SYS_mremap, from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
}

/*
 * One cache: register a buffer, release it (idle), check the next register
 * hits; replace the pages behind Open MPI's back; register again. Returns
 * 1 if the cache handed out the old registration, and says whether its
 * recorded frames differ from what is mapped now (stale).
 */
static int remap_probe(const char *component, const char *T, long *stale_pages)
{
	struct ctx c = {.name = component, .record_pfns = 1};
	mca_rcache_base_module_t *m = create(component, "replace", &c);
	const size_t npages = 8, len = npages * PAGE;
	struct test_reg *a, *b, *d;
	unsigned char *buf, *hold;
	int rc, reused = 0;

	*stale_pages = -1;
	if (!m) {
		result(0, T, "cannot create the %s cache", component);
		return -1;
	}
	/* Resolved by the first cache creation, which the grdma probe is. */
	if (opal_leave_pinned != 1) {
		result(0, T, "opal_leave_pinned is %d: grdma caches nothing, nothing to compare",
		       opal_leave_pinned);
		mca_rcache_base_module_destroy(m);
		return -1;
	}
	/*
	 * Private anonymous memory (what the uffd monitor caches; it never
	 * caches shared memory, whose hole punches it cannot see). The old
	 * pages are moved aside rather than freed, so the new mapping cannot
	 * get the same frames back and the oracle sees the change.
	 */
	buf = mmap(NULL, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		result(0, T, "mmap: %s", strerror(errno));
		return -1;
	}
	hold = buf + len;
	memset(buf, 0xaa, len);
	a = reg_get(m, buf, len, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	if (!a) {
		result(0, T, "%s: register failed (%d)", component, rc);
		return -1;
	}
	reg_put(m, a);
	b = reg_get(m, buf, len, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	if (b != a || c.regs != 1) {
		result(0, T, "%s: no hit before the remap (%p vs %p): nothing to prove", component,
		       (void *)b, (void *)a);
		return -1;
	}
	reg_put(m, b);

	/* Behind the hooks' back: raw system calls. */
	if (raw_mremap_to(buf, len, hold) != hold || raw_mmap_fixed(buf, len) != buf) {
		result(0, T, "raw mremap/mmap: %s", strerror(errno));
		return -1;
	}
	memset(buf, 0x55, len);

	/* No monitor has a window: the first lookup after the remap must miss. */
	d = reg_get(m, buf, len, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	if (!d) {
		result(0, T, "%s: register after the remap failed (%d)", component, rc);
		return -1;
	}
	reused = d == a && c.regs == 1;
	*stale_pages = d->pfns ? mrn_oracle_count_stale(buf, len, d->pfns) : -1;
	reg_put(m, d);
	mca_rcache_base_module_destroy(m);
	munmap(buf, 2 * len);
	if (c.bad) {
		result(0, T, "%s: %ld callbacks saw bad registrations", component, c.bad);
		return -1;
	}
	return reused;
}

static void replacement(void)
{
	const char *T1 =
		"grdma hands back the stale registration after a raw mremap + mmap MAP_FIXED";
	const char *T2 = "mrnotify does not: a fresh registration of the new pages";
	const char *mon = monitor_used();
	long stale;
	int reused;

	if (!mrn_oracle_available()) {
		skip(T1, "the pagemap oracle needs root (real page frame numbers)");
		skip(T2, "the pagemap oracle needs root (real page frame numbers)");
		return;
	}
	reused = remap_probe("grdma", T1, &stale);
	if (reused >= 0)
		result(reused == 1 && stale == 8, T1,
		       "%s; its recorded frames differ from the mapped ones on %ld of 8 pages",
		       reused ? "old registration returned" : "a new registration (grdma noticed?)",
		       stale);
	reused = remap_probe("mrnotify", T2, &stale);
	if (reused >= 0)
		result(reused == 0 && stale == 0, T2,
		       "monitor %s: %s at the first lookup; %ld of 8 pages stale", mon,
		       reused ? "the OLD registration was returned" : "new registration", stale);
}

/* --- monitor none: Open MPI's memory hooks feed the cache ------------------- */

static void hooks(void)
{
	const char *T =
		"monitor none: an unmap through libc reaches the cache via Open MPI's hooks";
	const char *T2 = "monitor none: the registration after the remap maps the new pages";
	struct ctx c = {.name = "hooks", .record_pfns = 1};
	long stale;
	mca_rcache_base_module_t *m = create("mrnotify", "hooks", &c);
	const size_t len = 4 * PAGE;
	unsigned char *buf;
	struct test_reg *a, *b;
	int rc;

	CHECK(T, m, "cannot create the cache");
	CHECK(T, m->rcache_invalidate_range != NULL, "no invalidate function with monitor none");
	buf = map_pages(4);
	a = reg_get(m, buf, len, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a, "register failed (%d)", rc);
	reg_put(m, a);
	b = reg_get(m, buf, len, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, b == a, "idle registrations are not kept with hooks active (%p vs %p)", (void *)b,
	      (void *)a);
	reg_put(m, b);
	/* Through libc: Open MPI's patcher sees this one. */
	munmap(buf, len);
	CHECK(T,
	      mmap(buf, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		   0) == buf,
	      "mmap: %s", strerror(errno));
	memset(buf, 3, len);
	b = reg_get(m, buf, len, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	/* (The new one may well reuse the old one's memory: count calls.) */
	CHECK(T, b && c.regs == 2 && c.deregs == 1,
	      "the old registration came back (%ld register, %ld deregister calls)", c.regs,
	      c.deregs);
	stale = b->pfns ? mrn_oracle_count_stale(buf, len, b->pfns) : -1;
	reg_put(m, b);
	mca_rcache_base_module_destroy(m);
	munmap(buf, len);
	CHECK(T, c.regs == c.deregs && c.bad == 0, "%ld registered, %ld deregistered", c.regs,
	      c.deregs);
	result(1, T, NULL);
	if (!mrn_oracle_available())
		skip(T2, "the pagemap oracle needs root (real page frame numbers)");
	else
		result(stale == 0, T2, "%ld of 4 pages stale", stale);
}

/*
 * Monitor none, more unmaps between two calls into the cache than the hook
 * queue holds (1,024): the ranges that do not fit are merged, so only
 * registrations near them go, not the whole cache. 2,048 pages unmapped one
 * by one in the middle of a 16 MiB region; registrations 4 MiB away from
 * them on either side must survive, those on unmapped pages must not (one
 * among the ranges queued, one among those merged).
 */
static void hooks_overflow(void)
{
	const char *T = "monitor none: 2,048 unmaps between calls (queue of 1,024) invalidate only "
			"near them";
	struct ctx c = {.name = "overflow"};
	mca_rcache_base_module_t *m = create("mrnotify", "overflow", &c);
	const size_t npages = 4096, first = 1024, last = 3072;
	const size_t at[4] = {0, 1100, 3000, npages - 1}; /* kept, queued, merged, kept */
	struct test_reg *r[4];
	unsigned char *region;
	long regs;
	int rc;

	CHECK(T, m, "cannot create the cache");
	CHECK(T, m->rcache_invalidate_range != NULL, "no invalidate function with monitor none");
	region = map_pages(npages);
	for (int i = 0; i < 4; i++) {
		r[i] = reg_get(m, region + at[i] * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
		CHECK(T, r[i], "register %d failed (%d)", i, rc);
		reg_put(m, r[i]);
	}
	/* Through libc, one page at a time: each is a range for the hooks. */
	for (size_t p = first; p < last; p++)
		munmap(region + p * PAGE, PAGE);
	CHECK(T,
	      mmap(region + first * PAGE, (last - first) * PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == region + first * PAGE,
	      "mmap: %s", strerror(errno));
	memset(region + first * PAGE, 2, (last - first) * PAGE);
	regs = c.regs;
	for (int i = 0; i < 4; i++) {
		struct test_reg *again = reg_get(m, region + at[i] * PAGE, PAGE, 0,
						 MCA_RCACHE_ACCESS_ANY, &rc);
		const bool hit = again == r[i] && c.regs == regs;

		CHECK(T, again, "register %d after the unmaps failed (%d)", i, rc);
		regs = c.regs;
		reg_put(m, again);
		if (i == 0 || i == 3)
			CHECK(T, hit,
			      "the registration at page %zu, 4 MiB from any unmap, was dropped "
			      "(the overflow flushed the cache?)",
			      at[i]);
		else
			CHECK(T, !hit, "the registration at unmapped page %zu came back (%s range)",
			      at[i], i == 1 ? "queued" : "merged");
	}
	mca_rcache_base_module_destroy(m);
	munmap(region, npages * PAGE);
	CHECK(T, c.regs == c.deregs && c.bad == 0, "%ld registered, %ld deregistered", c.regs,
	      c.deregs);
	result(1, T, NULL);
}

/* --- limits set by MCA parameters ------------------------------------------------ */

static long parse_size(const char *s)
{
	char *end;
	long v;

	if (!s)
		return 0;
	v = strtol(s, &end, 10);
	switch (*end) {
	case 'k':
	case 'K':
		return v << 10;
	case 'm':
	case 'M':
		return v << 20;
	case 'g':
	case 'G':
		return v << 30;
	default:
		return v;
	}
}

static void limits(void)
{
	const char *e = getenv("OMPI_MCA_rcache_mrnotify_max_entries");
	const char *p = getenv("OMPI_MCA_rcache_mrnotify_max_pinned");
	char T[160];
	struct ctx c = {.name = "limits"};
	mca_rcache_base_module_t *m = create("mrnotify", "limits", &c);
	unsigned char *buf = map_pages(64);
	long max_live = 0, lim_e = e ? atol(e) : 0, lim_p = parse_size(p);
	int rc;

	snprintf(T, sizeof(T), "limits: max_entries %s, max_pinned %s are kept", e ? e : "-",
		 p ? p : "-");
	CHECK(T, m, "cannot create the cache");
	for (int i = 0; i < 32; i++) {
		struct test_reg *r = reg_get(m, buf + 2 * i * PAGE, PAGE, 0, MCA_RCACHE_ACCESS_ANY,
					     &rc);

		CHECK(T, r, "register %d failed (%d)", i, rc);
		reg_put(m, r);
		if (live(&c) > max_live)
			max_live = live(&c);
	}
	mca_rcache_base_module_destroy(m);
	munmap(buf, 64 * PAGE);
	CHECK(T, (!lim_e || max_live <= lim_e) && (!lim_p || max_live * (long)PAGE <= lim_p),
	      "up to %ld registrations (%ld bytes) were live", max_live, max_live * (long)PAGE);
	CHECK(T, max_live > 0 && max_live < 32, "%ld live: the limit did nothing", max_live);
	result(1, T, "at most %ld live", max_live);
}

/* --- threads ------------------------------------------------------------------------ */

#define T_PAGES 64
#define T_OPS   20000

struct thr {
	mca_rcache_base_module_t *m;
	unsigned char *region, *remapped;
	unsigned seed;
	long errors;
	int stop;
	char first_error[160]; /* what the first bad result was */
};

static void thr_error(struct thr *t, const char *fmt, ...)
{
	va_list ap;

	if (t->errors++ == 0) {
		va_start(ap, fmt);
		vsnprintf(t->first_error, sizeof(t->first_error), fmt, ap);
		va_end(ap);
	}
}

static void *worker(void *p)
{
	struct thr *t = p;

	for (int i = 0; i < T_OPS; i++) {
		unsigned char *base = (rand_r(&t->seed) & 1) ? t->region : t->remapped;
		const size_t off = rand_r(&t->seed) % ((T_PAGES - 8) * PAGE);
		const size_t len = 1 + rand_r(&t->seed) % (4 * PAGE);
		const int32_t acc = 1 + rand_r(&t->seed) % MCA_RCACHE_ACCESS_ANY;
		int rc;
		struct test_reg *r = reg_get(t->m, base + off, len, 0, acc, &rc);

		if (!r) {
			/*
			 * Memory replaced as fast as it is registered is still
			 * registered (uncached, at the last try). The region
			 * next to it, never remapped, usually shares a 2 MiB block
			 * with it, which Linux invalidates as a whole at each remap:
			 * until 2026-12-05 its registrations failed here now
			 * and then (OUT_OF_RESOURCE after 16 tries).
			 */
			thr_error(t, "%s+%#zx len %#zx access %d failed (%d)",
				  base == t->region ? "region" : "remapped", off, len, acc, rc);
			continue;
		}
		if (r->magic != MAGIC || r->base.base > base + off ||
		    r->base.bound < base + off + len - 1 || (r->base.access_flags & acc) != acc)
			thr_error(t, "%s+%#zx len %#zx access %d: got [%p, %p] access %d magic %#x",
				  base == t->region ? "region" : "remapped", off, len, acc,
				  (void *)r->base.base, (void *)r->base.bound, r->base.access_flags,
				  (unsigned)r->magic);
		if (rand_r(&t->seed) % 4 == 0)
			sched_yield();
		reg_put(t->m, r);
	}
	return NULL;
}

static void *remapper(void *p)
{
	struct thr *t = p;

	/* Replace the pages under live and idle registrations, never a hole. */
	while (!__atomic_load_n(&t->stop, __ATOMIC_RELAXED)) {
		if (raw_mmap_fixed(t->remapped, T_PAGES * PAGE) != t->remapped)
			thr_error(t, "mmap MAP_FIXED failed: %s", strerror(errno));
		usleep(200);
	}
	return NULL;
}

static void threads(void)
{
	const char *T =
		"threads: 4 registering at once (random ranges and access) while one remaps";
	struct ctx c = {.name = "threads"};
	mca_rcache_base_module_t *m = create("mrnotify", "threads", &c);
	struct thr t[5];
	pthread_t tid[5];
	unsigned char *region = map_pages(T_PAGES), *remapped = map_pages(T_PAGES);
	long errors = 0;
	const char *first_error = "";

	CHECK(T, m, "cannot create the cache");
	for (int i = 0; i < 5; i++) {
		t[i] = (struct thr){
			.m = m, .region = region, .remapped = remapped, .seed = 7u * i + 1};
		pthread_create(&tid[i], NULL, i < 4 ? worker : remapper, &t[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(tid[i], NULL);
	__atomic_store_n(&t[4].stop, 1, __ATOMIC_RELAXED);
	pthread_join(tid[4], NULL);
	for (int i = 0; i < 5; i++) {
		errors += t[i].errors;
		if (!*first_error)
			first_error = t[i].first_error;
	}
	mca_rcache_base_module_destroy(m);
	munmap(region, T_PAGES * PAGE);
	munmap(remapped, T_PAGES * PAGE);
	CHECK(T, errors == 0 && c.bad == 0,
	      "%ld bad results (first: %s; region %p, remapped %p), %ld bad callbacks", errors,
	      first_error, (void *)region, (void *)remapped, c.bad);
	CHECK(T, c.regs == c.deregs, "%ld registered, %ld deregistered", c.regs, c.deregs);
	result(1, T, "%ld registrations for %d lookups", c.regs, 4 * T_OPS);
}

/* --- both builds in one process ------------------------------------------------ */

/*
 * Open MPI loads components RTLD_GLOBAL: when the mrnotify build and the
 * grdma-named build are both loaded (both directories in the component
 * path), a global symbol of one would bind the other's calls to the first
 * one loaded. Each module must still be its own component's, and caches
 * must come and go in each any number of times.
 */
static void t_both_one(const char *component, int round)
{
	char T[160];
	struct ctx c = {.name = component};
	mca_rcache_base_module_t *m = create(component, "both", &c);
	unsigned char *buf = map_pages(2);
	struct test_reg *a, *b;
	const char *owner;
	int rc;

	snprintf(T, sizeof(T),
		 "both builds loaded: %s cache, round %d: its own component, a hit, clean teardown",
		 component, round);
	CHECK(T, m, "cannot create the %s cache", component);
	owner = m->rcache_component ? m->rcache_component->rcache_version.mca_component_name
				    : "(none)";
	CHECK(T, !strcmp(owner, component), "the module's component is \"%s\"", owner);
	a = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, a, "register failed (%d)", rc);
	reg_put(m, a);
	b = reg_get(m, buf, PAGE, 0, MCA_RCACHE_ACCESS_ANY, &rc);
	CHECK(T, b == a && c.regs == 1, "no hit: %p vs %p, %ld register calls", (void *)b,
	      (void *)a, c.regs);
	reg_put(m, b);
	end_case(T, m, &c, buf, 2);
}

static void both(void)
{
	const mca_base_component_t *seen[2] = {NULL, NULL};
	mca_base_component_list_item_t *cli;

	/* Both must be there, else this proves nothing. */
	OPAL_LIST_FOREACH(cli, &opal_rcache_base_framework.framework_components,
			  mca_base_component_list_item_t)
	{
		if (!strcmp(cli->cli_component->mca_component_name, "mrnotify"))
			seen[0] = cli->cli_component;
		else if (!strcmp(cli->cli_component->mca_component_name, "grdma"))
			seen[1] = cli->cli_component;
	}
	if (!seen[0] || !seen[1]) {
		result(0, "both builds loaded", "%s is not loaded (component path?)",
		       seen[0] ? "grdma" : "mrnotify");
		return;
	}
	/* The grdma-named build, not Open MPI's own (which has no monitor). */
	if (mca_base_var_find("opal", "rcache", "grdma", "monitor") < 0) {
		result(0, "both builds loaded", "the grdma loaded is Open MPI's own, not ours");
		return;
	}
	for (int round = 1; round <= 2; round++) {
		t_both_one("mrnotify", round);
		t_both_one("grdma", round);
	}
}

/* --- creating a cache, for the checks of its messages ----------------------------- */

/* Creates a cache of COMPONENT and passes when that EXPECTED (1) or not (0). */
static void create_one(const char *component, const char *cache_name, int expected,
		       const char *T)
{
	struct ctx c = {.name = cache_name};
	mca_rcache_base_module_t *m = create(component, cache_name, &c);

	if (expected)
		result(m != NULL, T, NULL);
	else
		result(m == NULL, T, m ? "the cache was created" : NULL);
	if (m)
		mca_rcache_base_module_destroy(m);
}

static void create_mrnotify(void)
{
	create_one("mrnotify", "create", 1, "the cache is created");
}

static void create_grdma(void)
{
	create_one("grdma", "create-grdma", 1, "a grdma cache is created");
}

static void create_fails(void)
{
	create_one("mrnotify", "bad", 0, "a bad MCA value makes creating the cache fail");
}

/* --- main --------------------------------------------------------------------------------- */

static const struct rcache_mode modes[] = {
	{"semantics", semantics,
	 "flags (BYPASS, PERSIST, INVALID, device memory), access upgrades, find, evict, out-of-resource "
	 "retry, cache_name copied, modules sharing a cache, mpi_leave_pinned 0 / pipeline"},
	{"replacement", replacement,
	 "after a raw mremap + mmap MAP_FIXED grdma hands back the stale registration and "
	 "mrnotify does not (pagemap oracle: needs root)"},
	{"threads", threads, "several threads registering at once while another remaps"},
	{"hooks", hooks,
	 "(monitor none) unmaps through libc reach the cache through Open MPI's memory hooks"},
	{"hooks-overflow", hooks_overflow,
	 "(monitor none) more unmaps between calls than the hook queue holds: only "
	 "registrations near them are dropped"},
	{"limits", limits, "(max_entries / max_pinned set) the cache stays under them"},
	{"both", both,
	 "(both builds in the component path) caches of each, created, used and destroyed "
	 "twice: each keeps to its own code"},
	{"create", create_mrnotify, "creating the cache succeeds (for checks of its messages)"},
	{"create-grdma", create_grdma, "creating a cache of the component called grdma succeeds"},
	{"create-fails", create_fails, "a bad MCA value: creating the cache must fail"},
};

int main(int argc, char **argv)
{
	static const char *const defaults[] = {"semantics", "replacement", "threads", NULL};
	static const struct rcache_prog prog = {
		.name = "rcache_api_test",
		.modes = modes,
		.nmodes = sizeof(modes) / sizeof(modes[0]),
		.defaults = defaults,
	};

	return rcache_main(argc, argv, &prog);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx_rcache_cases: how libmrnotify-ucx treats UCX's registration caches,
 * case by case, on caches made with ucs_rcache_create() (the structure UCP
 * and the IB memory domain use) whose registration callback only counts.
 * Needs the plugin active (mrnotify.ko loaded); no RDMA device.
 *
 *   --case=watch-once    two caches hold the same range: one kernel watch
 *                        (the plugin's statistics say "sharing a watch 1";
 *                        ucx-guest-tests.sh checks that), and an unmap still
 *                        invalidates the range in both caches
 *   --case=failed-watch  with mrnotify.ko's limit at one registration per
 *                        process, cache A holds a watched region and cache B
 *                        a region inside it that cannot be watched: B's is
 *                        not kept, A's stays cached
 *   --case=drain-once    several threads look up after one unmap while the
 *                        first drain is held up (a UCM handler of ours that
 *                        sleeps in it): the others must not drain again
 *                        (statistics: "drains 2", the self-test's and this
 *                        one; checked by ucx-guest-tests.sh)
 *
 * Exit status 0 when what the program can see is as expected, 1 when not,
 * 2 on errors, 77 when the case cannot run here (not root, no module).
 */
#define _GNU_SOURCE
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "ucx_versions.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SKIP        77
#define NTHREADS    4
#define LIMIT_PARAM "/sys/module/mrnotify/parameters/max_registrations"

static size_t page;

typedef struct counting {
	const char *name;
	unsigned long regs;
} counting_t;

static ucs_status_t count_reg(void *context, ucs_rcache_t *rcache, void *arg,
			      ucs_rcache_region_t *region, uint16_t flags)
{
	(void)rcache, (void)arg, (void)region, (void)flags;
	__atomic_fetch_add(&((counting_t *)context)->regs, 1, __ATOMIC_RELAXED);
	return UCS_OK;
}

static void dereg_nothing(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
	(void)context, (void)rcache, (void)region;
}

static const ucs_rcache_ops_t ops = {
	.mem_reg = count_reg, .mem_dereg = dereg_nothing, MRN_RCACHE_OPS_MERGE};

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "ucx_rcache_cases: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	exit(2);
}

static ucs_rcache_t *make_cache(counting_t *c)
{
	ucs_rcache_params_t p;
	ucs_rcache_t *rc;
	ucs_status_t st;

	memset(&p, 0, sizeof(p));
	p.region_struct_size = sizeof(ucs_rcache_region_t);
	MRN_RCACHE_PARAMS_ALIGN(&p, 16, page);
	p.ucm_events = UCM_EVENT_VM_UNMAPPED;
	p.ucm_event_priority = 1000;
	p.ops = &ops;
	p.context = c;
	p.flags = 0;
	p.max_regions = ULONG_MAX;
	p.max_size = SIZE_MAX;
	p.max_unreleased = SIZE_MAX;
	st = ucs_rcache_create(&p, c->name, NULL, &rc);
	if (st != UCS_OK)
		die("ucs_rcache_create", ucs_status_string(st));
	return rc;
}

/* Look [p, p + len) up in rc and let it go again (it stays cached). */
static void use(ucs_rcache_t *rc, void *p, size_t len)
{
	ucs_rcache_region_t *r;
	ucs_status_t st = MRN_RCACHE_GET(ucs_rcache_get, rc, p, len, PROT_READ | PROT_WRITE, NULL,
					 &r);

	if (st != UCS_OK)
		die("ucs_rcache_get", ucs_status_string(st));
	ucs_rcache_region_put(rc, r);
}

static char *map(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap", strerror(errno));
	memset(p, 1, len);
	return p;
}

/* Replace the pages by raw system calls, which no UCM hook sees. */
static void remap(char *p, size_t len)
{
	if (syscall(SYS_munmap, p, len) != 0 ||
	    (void *)syscall(SYS_mmap, p, len, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
		die("remap", strerror(errno));
}

static int check(const char *what, unsigned long got, unsigned long want)
{
	printf("ucx_rcache_cases: %s: %lu (expected %lu) %s\n", what, got, want,
	       got == want ? "ok" : "WRONG");
	return got == want;
}

static int watch_once(void)
{
	counting_t a = {"mrn-test-a", 0}, b = {"mrn-test-b", 0};
	ucs_rcache_t *ca = make_cache(&a), *cb = make_cache(&b);
	char *p = map(4 * page);
	int ok = 1;

	use(ca, p, 4 * page);
	use(cb, p, 4 * page);
	use(ca, p, 4 * page);
	use(cb, p, 4 * page);
	ok &= check("cache A registrations before the unmap", a.regs, 1);
	ok &= check("cache B registrations before the unmap", b.regs, 1);
	/* The one watch both share must invalidate the range in both. */
	remap(p, 4 * page);
	use(ca, p, 4 * page);
	use(cb, p, 4 * page);
	ok &= check("cache A registrations after the unmap", a.regs, 2);
	ok &= check("cache B registrations after the unmap", b.regs, 2);
	return ok;
}

static int set_limit(const char *value, char *old, size_t oldsz)
{
	FILE *f = fopen(LIMIT_PARAM, "r");

	if (f == NULL)
		return -1;
	if (old != NULL && fgets(old, (int)oldsz, f) == NULL)
		old[0] = '\0';
	fclose(f);
	f = fopen(LIMIT_PARAM, "w");
	if (f == NULL)
		return -1;
	fputs(value, f);
	return fclose(f) == 0 ? 0 : -1;
}

/*
 * One registration per process, read when a process opens the device: set
 * for a new run of this program (a plugin may open the device as early as
 * at load), and put back when it is done. The self-test's watch is gone by
 * the time the caches register: cache A's takes the only one, B's fails.
 */
static int with_limit_of_one(char **argv)
{
	char old[32] = "";
	int status;
	pid_t pid;

	if (getenv("UCX_RCACHE_CASES_LIMITED") != NULL)
		return -1; /* we are that run */
	if (set_limit("1", old, sizeof(old)) != 0) {
		printf("ucx_rcache_cases: cannot set %s (not root, or no mrnotify.ko)\n",
		       LIMIT_PARAM);
		return SKIP;
	}
	pid = fork();
	if (pid == 0) {
		setenv("UCX_RCACHE_CASES_LIMITED", "1", 1);
		execv("/proc/self/exe", argv);
		_exit(2);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		status = 2 << 8;
	set_limit(old[0] ? old : "1048576", NULL, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

static int failed_watch(void)
{
	counting_t a = {"mrn-test-a", 0}, b = {"mrn-test-b", 0};
	ucs_rcache_t *ca = make_cache(&a), *cb = make_cache(&b);
	char *p = map(4 * page);
	int ok = 1;

	use(ca, p, 4 * page);    /* watched */
	use(cb, p + page, page); /* inside it, another range: cannot be watched */
	use(ca, p, 4 * page);
	use(cb, p + page, page);
	ok &= check("cache A registrations (its region stays cached)", a.regs, 1);
	ok &= check("cache B registrations (its unwatched region is not kept)", b.regs, 2);
	return ok;
}

struct drain_arg {
	ucs_rcache_t *rc;
	char *buf;
	pthread_barrier_t *go;
};

static char *victim;
static int held;

/* Runs inside the plugin's first drain: hold it up while the others arrive. */
static void slow_handler(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
	(void)type, (void)arg;
	if (event->vm_unmapped.address == victim &&
	    !__atomic_exchange_n(&held, 1, __ATOMIC_RELAXED)) {
		const struct timespec ts = {0, 300 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
}

static void *lookup_thread(void *p)
{
	struct drain_arg *a = p;

	pthread_barrier_wait(a->go);
	use(a->rc, a->buf, page);
	return NULL;
}

static int drain_once(void)
{
	counting_t c = {"mrn-test", 0};
	ucs_rcache_t *rc = make_cache(&c);
	pthread_t t[NTHREADS];
	struct drain_arg args[NTHREADS];
	pthread_barrier_t go;
	ucs_status_t st;
	char *bufs = map((NTHREADS + 1) * page);

	victim = bufs + NTHREADS * page;
	for (int i = 0; i <= NTHREADS; i++)
		use(rc, bufs + i * page, page);
	st = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED | UCM_EVENT_FLAG_NO_INSTALL, 0,
				   slow_handler, NULL);
	if (st != UCS_OK)
		die("ucm_set_event_handler", ucs_status_string(st));
	pthread_barrier_init(&go, NULL, NTHREADS);
	remap(victim, page); /* one move of the generation */
	for (int i = 0; i < NTHREADS; i++) {
		args[i] = (struct drain_arg){rc, bufs + i * page, &go};
		if (pthread_create(&t[i], NULL, lookup_thread, &args[i]) != 0)
			die("pthread_create", NULL);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	/* The threads' own regions were hits; the victim's must be gone. */
	use(rc, victim, page);
	return check("registrations (one per buffer, one again for the unmapped one)", c.regs,
		     NTHREADS + 2) &
	       check("the drain was held up in our handler", (unsigned long)held, 1);
}

int main(int argc, char **argv)
{
	const char *which = NULL;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--case=", 7))
			which = argv[i] + 7;
		else
			die("usage", "ucx_rcache_cases --case=watch-once|failed-watch|drain-once");
	}
	if (which == NULL)
		die("usage", "ucx_rcache_cases --case=watch-once|failed-watch|drain-once");
	setvbuf(stdout, NULL, _IOLBF, 0);
	page = (size_t)sysconf(_SC_PAGESIZE);
	if (!strcmp(which, "watch-once"))
		rc = watch_once();
	else if (!strcmp(which, "failed-watch")) {
		rc = with_limit_of_one(argv);
		if (rc >= 0)
			return rc; /* the limited run's status */
		rc = failed_watch();
	} else if (!strcmp(which, "drain-once"))
		rc = drain_once();
	else
		die("unknown case", which);
	if (rc == SKIP)
		return SKIP;
	printf("ucx_rcache_cases: %s: %s\n", which, rc ? "PASS" : "FAIL");
	/* Caches go with the process: exit() runs the plugin's statistics. */
	exit(rc ? 0 : 1);
}

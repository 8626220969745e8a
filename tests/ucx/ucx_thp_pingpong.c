/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx_thp_pingpong: a steady-state ping-pong between two UCP workers of one
 * process, fixed send and receive buffers on transparent huge pages, message
 * sizes 1 B to 4 MiB, counting the memory registrations UCX makes
 * (ibv_reg_mr_iova2 / ibv_reg_mr, interposed here).
 *
 * Nothing is unmapped, so after the first pass over the sizes a cache that
 * keeps its registrations registers nothing more. The figure that matters is
 * the registrations of the later passes (the steady state): run it once
 * with stock UCX and once with the plugin and compare (ucx-thp.sh).
 *
 * It also counts madvise(MADV_DONTFORK) and madvise(MADV_DOFORK) calls:
 * rdma-core makes them around every registration when fork support is on
 * (UCX turns it on by default), and each one that changes a mapping's flags
 * splits the mapping, and with it a huge page.
 *
 * Usage: ucx_thp_pingpong [--passes=N] [--max=BYTES] [--reps=N] [--dontfork-buffers]
 *   --dontfork-buffers  madvise(MADV_DONTFORK) the whole buffers first, so
 *                       that rdma-core's DONTFORK at registration changes
 *                       nothing and only its DOFORK at deregistration can
 *                       split them (to tell the two apart)
 * Prints the buffers' huge-page coverage, one line per pass, a "madvise:"
 * and a "registrations:" line. Exit status 0, 77 when the buffers are not on huge
 * pages (THP off: nothing to measure), 2 on errors.
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ibv_pd;
struct ibv_mr;

static unsigned long regs, deregs, dontforks, doforks, normals;

/*
 * rdma-core's fork support calls libc's madvise; count it (by system call).
 * UCM's default hooks patch the code of the madvise the process resolves,
 * this one, and then skip the count: see madvise_counted().
 */
int madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_DONTFORK)
		__atomic_fetch_add(&dontforks, 1, __ATOMIC_RELAXED);
	else if (advice == MADV_DOFORK)
		__atomic_fetch_add(&doforks, 1, __ATOMIC_RELAXED);
	else if (advice == MADV_NORMAL)
		__atomic_fetch_add(&normals, 1, __ATOMIC_RELAXED);
	return (int)syscall(SYS_madvise, addr, len, advice);
}

/* Does a call of madvise() still reach the count (no hook patched it)? */
static int madvise_counted(void *page)
{
	const unsigned long before = __atomic_load_n(&normals, __ATOMIC_RELAXED);
	int (*volatile fn)(void *, size_t, int) = madvise;

	fn(page, (size_t)sysconf(_SC_PAGESIZE), MADV_NORMAL);
	return __atomic_load_n(&normals, __ATOMIC_RELAXED) != before;
}

/*
 * libibverbs's own function: UCX's IB module loads libibverbs privately, so
 * RTLD_NEXT may not see it; a handle to the library does.
 */
static void *verbs_sym(const char *name)
{
	void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *p = h != NULL ? dlsym(h, name) : NULL;

	if (p == NULL) {
		fprintf(stderr, "ucx_thp_pingpong: %s not found in libibverbs\n", name);
		exit(2);
	}
	return p;
}

/* UCX 1.13 registers with ibv_reg_mr_iova2; count both entry points. */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);

	if (real == NULL)
		real = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, uint64_t,
					    unsigned int)) verbs_sym("ibv_reg_mr_iova2");
	__atomic_fetch_add(&regs, 1, __ATOMIC_RELAXED);
	return real(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, int);

	if (real == NULL)
		real = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int))
			verbs_sym("ibv_reg_mr");
	__atomic_fetch_add(&regs, 1, __ATOMIC_RELAXED);
	return real(pd, addr, length, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	static int (*real)(struct ibv_mr *);

	if (real == NULL)
		real = (int (*)(struct ibv_mr *))verbs_sym("ibv_dereg_mr");
	__atomic_fetch_add(&deregs, 1, __ATOMIC_RELAXED);
	return real(mr);
}

static ucp_context_h ctx;
static ucp_worker_h wa, wb;
static ucp_ep_h ab, ba;
static int timeout_s = 120;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "ucx_thp_pingpong: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	exit(2);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void wait_req(void *req, const char *what)
{
	const double end = now() + timeout_s;
	ucs_status_t st;

	if (req == NULL)
		return;
	if (UCS_PTR_IS_ERR(req))
		die(what, ucs_status_string(UCS_PTR_STATUS(req)));
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
		ucp_worker_progress(wa);
		ucp_worker_progress(wb);
		if (now() > end)
			die(what, "timed out");
	}
	ucp_request_free(req);
	if (st != UCS_OK)
		die(what, ucs_status_string(st));
}

static ucp_ep_h connect_to(ucp_worker_h from, ucp_worker_h to)
{
	ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS};
	ucp_request_param_t rp = {.op_attr_mask = 0};
	ucp_address_t *addr;
	ucp_ep_h ep;
	size_t len;
	ucs_status_t st = ucp_worker_get_address(to, &addr, &len);

	if (st != UCS_OK)
		die("ucp_worker_get_address", ucs_status_string(st));
	p.address = addr;
	st = ucp_ep_create(from, &p, &ep);
	ucp_worker_release_address(to, addr);
	if (st != UCS_OK)
		die("ucp_ep_create", ucs_status_string(st));
	wait_req(ucp_ep_flush_nbx(ep, &rp), "flush");
	return ep;
}

/* One message from ep's side to the receiving worker's buffer. */
static void send_one(ucp_ep_h ep, ucp_worker_h rw, void *src, void *dst, size_t size)
{
	ucp_request_param_t p = {.op_attr_mask = 0};
	void *rreq = ucp_tag_recv_nbx(rw, dst, size, 0x77, (ucp_tag_t)-1, &p);

	if (UCS_PTR_IS_ERR(rreq))
		die("ucp_tag_recv_nbx", ucs_status_string(UCS_PTR_STATUS(rreq)));
	wait_req(ucp_tag_send_nbx(ep, src, size, 0x77, &p), "ucp_tag_send_nbx");
	wait_req(rreq, "ucp_tag_recv_nbx");
}

/* kB of the mapping around p that are on huge pages (smaps AnonHugePages). */
static long huge_kb(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[256];
	int in = 0;
	long kb = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	size_t max = 4 << 20;
	int passes = 5, reps = 2, dontfork_buffers = 0;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--passes=", 9))
			passes = atoi(argv[i] + 9);
		else if (!strncmp(argv[i], "--max=", 6))
			max = strtoul(argv[i] + 6, NULL, 0);
		else if (!strncmp(argv[i], "--reps=", 7))
			reps = atoi(argv[i] + 7);
		else if (!strcmp(argv[i], "--dontfork-buffers"))
			dontfork_buffers = 1;
		else
			die("usage", "ucx_thp_pingpong [--passes=N] [--max=BYTES] [--reps=N]");
	}
	if (passes < 2 || reps < 1 || max < 1)
		die("usage", "--passes >= 2, --reps >= 1, --max >= 1");
	setvbuf(stdout, NULL, _IOLBF, 0);

	ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	ucp_config_t *config;
	ucs_status_t st = ucp_config_read(NULL, NULL, &config);

	if (st != UCS_OK)
		die("ucp_config_read", ucs_status_string(st));
	st = ucp_init(&params, config, &ctx);
	ucp_config_release(config);
	if (st != UCS_OK)
		die("ucp_init", ucs_status_string(st));
	if ((st = ucp_worker_create(ctx, &wp, &wa)) != UCS_OK ||
	    (st = ucp_worker_create(ctx, &wp, &wb)) != UCS_OK)
		die("ucp_worker_create", ucs_status_string(st));
	ab = connect_to(wa, wb);
	ba = connect_to(wb, wa);

	/*
	 * Each side's send and receive buffer, allocated as an application
	 * would (malloc: mmap'd at this size), touched so that THP backs them.
	 */
	char *buf[4];
	long huge = 0;

	for (int i = 0; i < 4; i++) {
		buf[i] = malloc(max);
		if (buf[i] == NULL)
			die("malloc", NULL);
		memset(buf[i], i + 1, max);
	}
	for (int i = 0; i < 4; i++) {
		const long kb = huge_kb(buf[i]);

		printf("ucx_thp_pingpong: buffer %d at %p: %ld kB on huge pages\n", i,
		       (void *)buf[i], kb);
		huge += kb > 0 ? kb : 0;
	}
	if (huge == 0) {
		printf("ucx_thp_pingpong: no buffer is on huge pages (THP not \"always\"?): "
		       "nothing to measure\n");
		return 77;
	}
	for (int i = 0; i < 4 && dontfork_buffers; i++) {
		const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
		const uintptr_t s = (uintptr_t)buf[i] & ~(pg - 1);

		if (syscall(SYS_madvise, (void *)s,
			    ((uintptr_t)buf[i] + max + pg - 1 - s) & ~(pg - 1), MADV_DONTFORK) != 0)
			die("madvise(MADV_DONTFORK) of a buffer", NULL);
	}

	unsigned long before = 0, transfers = 0, steady_transfers = 0;

	for (int pass = 0; pass < passes; pass++) {
		const unsigned long r0 = __atomic_load_n(&regs, __ATOMIC_RELAXED);

		if (pass == 1)
			before = r0;
		for (size_t size = 1; size <= max; size *= 2) {
			for (int r = 0; r < reps; r++) {
				buf[0][0] = (char)(pass + r);
				buf[0][size - 1] = (char)(size + 1);
				send_one(ab, wb, buf[0], buf[3], size); /* a -> b */
				if (buf[3][0] != buf[0][0] || buf[3][size - 1] != buf[0][size - 1])
					die("ping", "the data did not arrive");
				send_one(ba, wa, buf[2], buf[1], size); /* b -> a */
				transfers += 2;
				steady_transfers += pass > 0 ? 2 : 0;
			}
		}
		printf("ucx_thp_pingpong: pass %d: %lu registrations\n", pass,
		       __atomic_load_n(&regs, __ATOMIC_RELAXED) - r0);
	}

	const unsigned long total = __atomic_load_n(&regs, __ATOMIC_RELAXED);

	if (madvise_counted(buf[0]))
		printf("ucx_thp_pingpong: madvise: %lu MADV_DONTFORK, %lu MADV_DOFORK\n",
		       __atomic_load_n(&dontforks, __ATOMIC_RELAXED),
		       __atomic_load_n(&doforks, __ATOMIC_RELAXED));
	else
		printf("ucx_thp_pingpong: madvise: not counted (UCM's hooks patched it)\n");
	printf("ucx_thp_pingpong: registrations: %lu total, %lu in the steady state (passes 1..%d, "
	       "%lu transfers), %lu deregistrations; %lu transfers in all\n",
	       total, total - before, passes - 1, steady_transfers,
	       __atomic_load_n(&deregs, __ATOMIC_RELAXED), transfers);
	/* Endpoints and workers go with the process (see ucx_xfer). */
	exit(0);
}

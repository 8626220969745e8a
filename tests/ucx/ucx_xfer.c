/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ucx_xfer: moves data between two UCP workers of one process while the
 * buffers' mappings are replaced under UCX's registration caches, and checks
 * every byte.
 *
 * Each round fills the source, transfers it (RMA put into a buffer the
 * target registered with ucp_mem_map, or a tagged send/receive large enough
 * for rendezvous), and compares the target with what was sent. Every other
 * round first replaces the mapping of the source, the target or both
 * (munmap and mmap(MAP_FIXED) at the same address, by libc or by raw
 * system calls), so a cache that is not told keeps the registration of the
 * old pages: an RDMA device then reads or writes those and the data is
 * wrong. Transports that address memory by virtual address (tcp, cma) move
 * the right data even through a stale registration; there the test shows
 * that the transfers went through the cache (the plugin's statistics).
 *
 * Usage: ucx_xfer --op=put|tag --remap=src|dst|both|none --expect=correct|corrupt
 *                 [--unmap=libc|raw] [--connect=address|sockaddr] [--ip=ADDR]
 *                 [--size=BYTES] [--rounds=N] [--declare-external]
 *   --connect=sockaddr  connect through a listener on ADDR (default: the
 *                       address of the first interface that has one, not lo);
 *                       RC lanes over rdmacm need no UD auxiliary transport
 * Prints a line per round and a "result:" line. Exit status 0 when the
 * result is the expected one, 1 when not, 2 on errors (a transfer that
 * fails or hangs for --timeout seconds counts as an error).
 */
#define _GNU_SOURCE
#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *op = "put", *remap_what = "dst", *expect, *unmap_how = "libc";
static const char *connect_how = "address", *ip;
static size_t size = 256 * 1024;
static int rounds = 6, declare_external, timeout_s = 120;

static ucp_context_h ctx;
static ucp_worker_h wa, wb; /* initiator, target */
static ucp_ep_h ep;         /* wa -> wb */
static ucp_conn_request_h conn_req;
static ucp_ep_h ep_server;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "ucx_xfer: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(2);
}

static void die_st(const char *what, ucs_status_t st)
{
	die(what, ucs_status_string(st));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(void)
{
	ucp_worker_progress(wa);
	ucp_worker_progress(wb);
}

static void wait_req(void *req, const char *what)
{
	const double end = now() + timeout_s;
	ucs_status_t st;

	if (req == NULL)
		return;
	if (UCS_PTR_IS_ERR(req))
		die_st(what, UCS_PTR_STATUS(req));
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
		progress();
		if (now() > end)
			die(what, "timed out");
	}
	ucp_request_free(req);
	if (st != UCS_OK)
		die_st(what, st);
}

static void flush(void)
{
	ucp_request_param_t p = {.op_attr_mask = 0};

	wait_req(ucp_ep_flush_nbx(ep, &p), "flush");
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
	(void)arg;
	conn_req = req;
}

static void on_ep_error(void *arg, ucp_ep_h e, ucs_status_t st)
{
	(void)arg, (void)e;
	die_st("endpoint error", st);
}

static const char *pick_ip(void)
{
	static char buf[INET_ADDRSTRLEN];
	struct ifaddrs *ifs, *i;

	if (getifaddrs(&ifs) != 0)
		die("getifaddrs", strerror(errno));
	for (i = ifs; i != NULL; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
		    (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf,
			  sizeof(buf));
		freeifaddrs(ifs);
		return buf;
	}
	freeifaddrs(ifs);
	return "127.0.0.1";
}

static void connect_workers(void)
{
	ucp_ep_params_t p;
	ucs_status_t st;

	memset(&p, 0, sizeof(p));
	p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER;
	p.err_handler.cb = on_ep_error;
	if (!strcmp(connect_how, "address")) {
		ucp_address_t *addr;
		size_t len;

		st = ucp_worker_get_address(wb, &addr, &len);
		if (st != UCS_OK)
			die_st("ucp_worker_get_address", st);
		p.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
		p.address = addr;
		st = ucp_ep_create(wa, &p, &ep);
		ucp_worker_release_address(wb, addr);
		if (st != UCS_OK)
			die_st("ucp_ep_create", st);
		flush(); /* completes wireup */
		return;
	}

	struct sockaddr_in sa = {.sin_family = AF_INET};
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
			      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa)},
		.conn_handler = {.cb = on_conn},
	};
	ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
	ucp_listener_h listener;
	const double end = now() + timeout_s;

	if (ip == NULL)
		ip = pick_ip();
	if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
		die("bad --ip", ip);
	st = ucp_listener_create(wb, &lp, &listener);
	if (st != UCS_OK)
		die_st("ucp_listener_create", st);
	st = ucp_listener_query(listener, &la);
	if (st != UCS_OK)
		die_st("ucp_listener_query", st);
	sa.sin_port = ((struct sockaddr_in *)&la.sockaddr)->sin_port;
	printf("ucx_xfer: listening on %s:%u\n", ip, ntohs(sa.sin_port));
	p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
	p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
	p.sockaddr.addr = (struct sockaddr *)&sa;
	p.sockaddr.addrlen = sizeof(sa);
	st = ucp_ep_create(wa, &p, &ep);
	if (st != UCS_OK)
		die_st("ucp_ep_create (client)", st);
	while (conn_req == NULL) {
		progress();
		if (now() > end)
			die("connect", "no connection request arrived");
	}
	memset(&p, 0, sizeof(p));
	p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	p.conn_request = conn_req;
	p.err_handler.cb = on_ep_error;
	st = ucp_ep_create(wb, &p, &ep_server);
	if (st != UCS_OK)
		die_st("ucp_ep_create (server)", st);
	flush();
	ucp_listener_destroy(listener);
}

static void remap(unsigned char *p, unsigned char fill)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;

	if (!strcmp(unmap_how, "raw")) {
		if (syscall(SYS_munmap, p, size) != 0)
			die("munmap (syscall)", strerror(errno));
		if ((void *)syscall(SYS_mmap, p, size, prot, flags, -1, 0) != p)
			die("mmap MAP_FIXED (syscall)", strerror(errno));
	} else {
		if (munmap(p, size) != 0)
			die("munmap", strerror(errno));
		if (mmap(p, size, prot, flags, -1, 0) != p)
			die("mmap MAP_FIXED", strerror(errno));
	}
	memset(p, fill, size);
}

static unsigned char pattern(int round, size_t i)
{
	return (unsigned char)(round * 37 + 1 + i * 7 + (i >> 12));
}

static ucp_mem_h map(void *p)
{
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
		.address = p,
		.length = size,
	};
	ucp_mem_h memh;
	ucs_status_t st = ucp_mem_map(ctx, &mp, &memh);

	if (st != UCS_OK)
		die_st("ucp_mem_map", st);
	return memh;
}

static ucp_rkey_h rkey_for(ucp_mem_h memh)
{
	void *buf;
	size_t len;
	ucp_rkey_h rkey;
	ucs_status_t st = ucp_rkey_pack(ctx, memh, &buf, &len);

	if (st != UCS_OK)
		die_st("ucp_rkey_pack", st);
	st = ucp_ep_rkey_unpack(ep, buf, &rkey);
	ucp_rkey_buffer_release(buf);
	if (st != UCS_OK)
		die_st("ucp_ep_rkey_unpack", st);
	return rkey;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strncmp(a, "--op=", 5))
			op = a + 5;
		else if (!strncmp(a, "--remap=", 8))
			remap_what = a + 8;
		else if (!strncmp(a, "--expect=", 9))
			expect = a + 9;
		else if (!strncmp(a, "--unmap=", 8))
			unmap_how = a + 8;
		else if (!strncmp(a, "--connect=", 10))
			connect_how = a + 10;
		else if (!strncmp(a, "--ip=", 5))
			ip = a + 5;
		else if (!strncmp(a, "--size=", 7))
			size = strtoul(a + 7, NULL, 0);
		else if (!strncmp(a, "--rounds=", 9))
			rounds = atoi(a + 9);
		else if (!strncmp(a, "--timeout=", 10))
			timeout_s = atoi(a + 10);
		else if (!strcmp(a, "--declare-external"))
			declare_external = 1;
		else
			die("unknown argument", a);
	}
	if (expect == NULL || (strcmp(expect, "correct") && strcmp(expect, "corrupt")) ||
	    (strcmp(op, "put") && strcmp(op, "tag")) ||
	    (strcmp(remap_what, "src") && strcmp(remap_what, "dst") && strcmp(remap_what, "both") &&
	     strcmp(remap_what, "none")) ||
	    (strcmp(unmap_how, "libc") && strcmp(unmap_how, "raw")) ||
	    (strcmp(connect_how, "address") && strcmp(connect_how, "sockaddr")) || size == 0 ||
	    rounds < 1)
		die("usage",
		    "ucx_xfer --op=put|tag --remap=src|dst|both|none --expect=correct|corrupt "
		    "[--unmap=libc|raw] [--connect=address|sockaddr] [--ip=ADDR] [--size=N] "
		    "[--rounds=N] [--timeout=S] [--declare-external]");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (declare_external)
		ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);

	ucp_params_t params = {
		.field_mask = UCP_PARAM_FIELD_FEATURES,
		.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG,
	};
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	ucp_config_t *config;
	ucs_status_t st = ucp_config_read(NULL, NULL, &config);

	if (st != UCS_OK)
		die_st("ucp_config_read", st);
	st = ucp_init(&params, config, &ctx);
	ucp_config_release(config);
	if (st != UCS_OK)
		die_st("ucp_init", st);
	if ((st = ucp_worker_create(ctx, &wp, &wa)) != UCS_OK ||
	    (st = ucp_worker_create(ctx, &wp, &wb)) != UCS_OK)
		die_st("ucp_worker_create", st);
	connect_workers();
	ucp_ep_print_info(ep, stdout);

	unsigned char *src = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
	unsigned char *dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);

	if (src == MAP_FAILED || dst == MAP_FAILED)
		die("mmap", strerror(errno));
	memset(dst, 0, size);

	const int do_src = !strcmp(remap_what, "src") || !strcmp(remap_what, "both");
	const int do_dst = !strcmp(remap_what, "dst") || !strcmp(remap_what, "both");
	int bad_rounds = 0;
	ucp_mem_h dst_memh, *memhs = calloc(rounds, sizeof(*memhs));
	ucp_rkey_h rkey = NULL;
	int hits = 0;

	if (memhs == NULL)
		die("calloc", NULL);

	for (int r = 0; r < rounds; r++) {
		const int remapped = r > 0 && (r % 2) == 1;

		if (remapped && do_src)
			remap(src, 0x5a);
		if (remapped && do_dst)
			remap(dst, 0);
		for (size_t i = 0; i < size; i++)
			src[i] = pattern(r, i);

		if (!strcmp(op, "put")) {
			ucp_request_param_t p = {.op_attr_mask = 0};

			/*
			 * The target registers (a cache lookup) each round, as an
			 * RMA library exposing a window would, and holds every
			 * handle to the end: ucp_mem_unmap() would take the
			 * region out of the cache.
			 */
			dst_memh = memhs[r] = map(dst);
			if (rkey != NULL)
				ucp_rkey_destroy(rkey);
			rkey = rkey_for(dst_memh);
			wait_req(ucp_put_nbx(ep, src, size, (uintptr_t)dst, rkey, &p),
				 "ucp_put_nbx");
			flush();
		} else {
			ucp_request_param_t p = {.op_attr_mask = 0};
			void *rreq = ucp_tag_recv_nbx(wb, dst, size, 0x1234, (ucp_tag_t)-1, &p);
			void *sreq;

			if (UCS_PTR_IS_ERR(rreq))
				die_st("ucp_tag_recv_nbx", UCS_PTR_STATUS(rreq));
			sreq = ucp_tag_send_nbx(ep, src, size, 0x1234, &p);
			wait_req(sreq, "ucp_tag_send_nbx");
			wait_req(rreq, "ucp_tag_recv_nbx");
		}

		size_t wrong = 0, first = size;

		for (size_t i = 0; i < size; i++) {
			if (dst[i] != pattern(r, i)) {
				if (first == size)
					first = i;
				wrong++;
			}
		}
		printf("ucx_xfer: round %d%s: %s", r,
		       remapped ? (do_src && do_dst ? " (src and dst remapped)"
				   : do_src         ? " (src remapped)"
				   : do_dst         ? " (dst remapped)"
						    : "")
				: "",
		       wrong ? "WRONG" : "ok");
		if (wrong)
			printf(": %zu of %zu bytes differ, first at %zu (0x%02x, expected 0x%02x)",
			       wrong, size, first, dst[first], pattern(r, first));
		printf("\n");
		bad_rounds += wrong != 0;
		/* Drop the data so that the next round's check means something. */
		memset(dst, 0, size);
	}
	if (rkey != NULL)
		ucp_rkey_destroy(rkey);
	for (int r = 0; r < rounds; r++) {
		if (memhs[r] == NULL)
			continue;
		hits += r > 0 && memhs[r] == memhs[r - 1];
		ucp_mem_unmap(ctx, memhs[r]);
	}
	if (!strcmp(op, "put"))
		printf("ucx_xfer: the target's ucp_mem_map() returned the previous round's handle "
		       "%d times\n",
		       hits);

	const char *result = bad_rounds ? "corrupt" : "correct";
	const int ok = !strcmp(result, expect);

	printf("ucx_xfer: op=%s remap=%s unmap=%s size=%zu%s result: %s (%d of %d rounds wrong; "
	       "expected %s) %s\n",
	       op, remap_what, unmap_how, size, declare_external ? " external-never-reported" : "",
	       result, bad_rounds, rounds, expect, ok ? "PASS" : "FAIL");
	/*
	 * Endpoints and workers go with the process (closing them over
	 * loopback only adds time under emulation); exit() still runs the
	 * libraries' destructors, which print the plugin's statistics.
	 */
	exit(ok ? 0 : 1);
}

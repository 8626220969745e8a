/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ofi_unmap_storm: the unmap storm through libfabric's registration cache.
 * A connected pair of MSG endpoints on one provider (verbs over rxe0 in the
 * guest), each side in its own domain, so in its own MR cache. Every round
 * the client registers its source buffer and the server its target buffer
 * with fi_mr_reg() (the cache hits when it can), the client RDMA-writes the
 * source into the target, and every byte that arrives is checked. Between
 * rounds the memory under both buffers is replaced in every way an
 * application can (tests/harness/replace_memory.h): a cache that hits on a
 * replaced buffer hands the NIC the old pages, and the bytes are wrong.
 * Optionally a second pair does the same from a second thread, and every
 * fourth round runs system() and fork().
 *
 * The server listens on --node (default: $MRN_IP, the guest's address on
 * rxe0's netdev), the client connects to it.
 *
 * Which monitor tells the caches: libfabric's own (FI_MR_CACHE_MONITOR), or
 * mrnotify's with --import (mrn_ofi_import() before the first domain) or
 * under mrnotify-ofi-run. --require-mrnotify fails the run unless
 * mrnotify's monitor served it (its statistics say so).
 *
 * Usage: ofi_unmap_storm [--provider=NAME] [--node=ADDR] [--domain=NAME] [--size=BYTES]
 *            [--rounds=N] [--threads=1|2] [--fork] [--import]
 *            [--kinds=K,K,...] [--require-mrnotify] [--expect=correct|corrupt]
 * Prints wrong rounds per kind and the result; the exit status is 0 when
 * the result is the one expected (default correct), 1 when not, 2 on a
 * setup failure, 77 when the provider is not there.
 */
#define _GNU_SOURCE
#include "../harness/storm.h"

#include <mrnotify-ofi.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *provider = "verbs", *domain_name, *node;
static struct mrn_storm_options opt = {256 << 10, 32, 1, 0, "correct"};
static int nkinds;
static enum mrn_kind kinds[MRN_NKINDS];

static void die(const char *what)
{
	fprintf(stderr, "ofi_unmap_storm: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void check(int rc, const char *what)
{
	if (rc) {
		fprintf(stderr, "ofi_unmap_storm: %s: %s (%d)\n", what, fi_strerror(-rc), rc);
		exit(2);
	}
}

/* One side of the pair: its domain (its own MR cache), endpoint, CQ. */
struct side {
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
};

struct pair {
	struct fid_fabric *fabric;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct side server, client;
};

static struct fi_info *hints(void)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		die("fi_allocinfo");
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup(provider);
	if (domain_name)
		h->domain_attr->name = strdup(domain_name);
	return h;
}

static void open_side(struct pair *p, struct side *s, struct fi_info *info)
{
	struct fi_cq_attr cq_attr = {.size = 16, .format = FI_CQ_FORMAT_CONTEXT};

	check(fi_domain(p->fabric, info, &s->domain, NULL), "fi_domain");
	check(fi_endpoint(s->domain, info, &s->ep, NULL), "fi_endpoint");
	check(fi_cq_open(s->domain, &cq_attr, &s->cq, NULL), "fi_cq_open");
	check(fi_ep_bind(s->ep, &p->eq->fid, 0), "fi_ep_bind eq");
	check(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind cq");
	check(fi_enable(s->ep), "fi_enable");
}

/* Waits for an event on the pair's EQ; returns its info (CONNREQ) or NULL. */
static struct fi_info *wait_event(struct pair *p, uint32_t want)
{
	struct fi_eq_cm_entry entry;
	uint32_t event;
	ssize_t n = fi_eq_sread(p->eq, &event, &entry, sizeof(entry), 10000, 0);

	if (n < 0) {
		struct fi_eq_err_entry err = {0};

		fi_eq_readerr(p->eq, &err, 0);
		fprintf(stderr, "ofi_unmap_storm: waiting for event %u: %s (%s)\n", want,
			fi_strerror((int)-n), err.err ? fi_strerror(err.err) : "");
		exit(2);
	}
	if (event != want) {
		fprintf(stderr, "ofi_unmap_storm: event %u, expected %u\n", event, want);
		exit(2);
	}
	return event == FI_CONNREQ ? entry.info : NULL;
}

/* Returns 77 when the provider is not there, else connects the pair. */
static int connect_pair(struct pair *p)
{
	struct fi_info *h = hints(), *info, *req;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	char addr[128];
	size_t addrlen = sizeof(addr);
	int rc;

	rc = fi_getinfo(FI_VERSION(1, 13), node, "0", FI_SOURCE, h, &info);
	if (rc == -FI_ENODATA) {
		fprintf(stderr, "ofi_unmap_storm: no %s provider%s%s here\n", provider,
			domain_name ? " with domain " : "", domain_name ? domain_name : "");
		return 77;
	}
	check(rc, "fi_getinfo (server)");
	check(fi_fabric(info->fabric_attr, &p->fabric, NULL), "fi_fabric");
	check(fi_eq_open(p->fabric, &eq_attr, &p->eq, NULL), "fi_eq_open");
	check(fi_passive_ep(p->fabric, info, &p->pep, NULL), "fi_passive_ep");
	check(fi_pep_bind(p->pep, &p->eq->fid, 0), "fi_pep_bind");
	check(fi_listen(p->pep), "fi_listen");
	check(fi_getname(&p->pep->fid, addr, &addrlen), "fi_getname");

	struct fi_info *ch = hints(), *cinfo;

	ch->dest_addr = malloc(addrlen);
	memcpy(ch->dest_addr, addr, addrlen);
	ch->dest_addrlen = addrlen;
	ch->addr_format = info->addr_format;
	check(fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, ch, &cinfo), "fi_getinfo (client)");
	open_side(p, &p->client, cinfo);
	check(fi_connect(p->client.ep, cinfo->dest_addr, NULL, 0), "fi_connect");
	req = wait_event(p, FI_CONNREQ);
	open_side(p, &p->server, req);
	check(fi_accept(p->server.ep, NULL, 0), "fi_accept");
	wait_event(p, FI_CONNECTED);
	wait_event(p, FI_CONNECTED);
	fi_freeinfo(req);
	fi_freeinfo(cinfo);
	fi_freeinfo(ch);
	fi_freeinfo(info);
	fi_freeinfo(h);
	return 0;
}

static void close_pair(struct pair *p)
{
	struct side *sides[2] = {&p->client, &p->server};

	for (int i = 0; i < 2; i++) {
		fi_close(&sides[i]->ep->fid);
		fi_close(&sides[i]->cq->fid);
		fi_close(&sides[i]->domain->fid);
	}
	fi_close(&p->pep->fid);
	fi_close(&p->eq->fid);
	fi_close(&p->fabric->fid);
}

static unsigned char pattern(int thread, int round, size_t i)
{
	return (unsigned char)(thread * 59 + round * 37 + 1 + i * 7 + (i >> 12));
}

struct worker {
	int thread;
	struct pair pair;
	int wrong[MRN_NKINDS]; /* rounds with a wrong byte, per kind */
};

/*
 * The bytes of a buffer whose memory is a memfd (punch) go through the file,
 * never through the mapping: libfabric's userfaultfd monitor registers that
 * mapping too and (1.17) never resolves a fault there, so a touch of a
 * punched page would hang. The NIC, through a stale registration, still
 * sees the old pages either way.
 */
static void put(struct mrn_buf *b, const unsigned char *bytes)
{
	if (b->from != MRN_FROM_MEMFD)
		memcpy(b->p, bytes, opt.size);
	else if (pwrite(b->memfd, bytes, opt.size, 0) != (ssize_t)opt.size)
		die("pwrite");
}

static const unsigned char *get(struct mrn_buf *b, unsigned char *scratch)
{
	if (b->from != MRN_FROM_MEMFD)
		return b->p;
	if (pread(b->memfd, scratch, opt.size, 0) != (ssize_t)opt.size)
		die("pread");
	return scratch;
}

static void *storm(void *arg)
{
	struct worker *w = arg;
	struct pair *p = &w->pair;
	struct mrn_buf s, r;
	struct fi_context ctx;

	unsigned char *bytes = malloc(opt.size), *zeros = calloc(1, opt.size),
		      *scratch = malloc(opt.size);

	if (!bytes || !zeros || !scratch)
		die("malloc");
	mrn_buf_init(&s, opt.size);
	mrn_buf_init(&r, opt.size);
	for (int round = 0; round < opt.rounds; round++) {
		/* Both threads cycle through the kinds, out of step. */
		const enum mrn_kind k = kinds[(round + 3 * w->thread) % nkinds];
		struct fid_mr *smr, *rmr;
		struct fi_cq_entry done;
		size_t wrong = 0;
		ssize_t n;

		if (round >= nkinds) { /* the first pass fills the caches */
			mrn_buf_replace(&s, k);
			mrn_buf_replace(&r, k);
		}
		for (size_t i = 0; i < opt.size; i++)
			bytes[i] = pattern(w->thread, round, i);
		put(&s, bytes);
		put(&r, zeros);
		check(fi_mr_reg(p->client.domain, s.p, opt.size, FI_WRITE, 0, 0, 0, &smr, NULL),
		      "fi_mr_reg (source)");
		check(fi_mr_reg(p->server.domain, r.p, opt.size, FI_REMOTE_WRITE, 0, 0, 0, &rmr,
				NULL),
		      "fi_mr_reg (target)");
		do
			n = fi_write(p->client.ep, s.p, opt.size, fi_mr_desc(smr), 0,
				     (uint64_t)(uintptr_t)r.p, fi_mr_key(rmr), &ctx);
		while (n == -FI_EAGAIN);
		check((int)n, "fi_write");
		/* Polled: the provider's CQ has no wait object (FI_WAIT_NONE). */
		for (const time_t give_up = time(NULL) + 10;
		     (n = fi_cq_read(p->client.cq, &done, 1)) == -FI_EAGAIN &&
		     time(NULL) < give_up;)
			;
		if (n != 1) {
			struct fi_cq_err_entry err = {0};

			fi_cq_readerr(p->client.cq, &err, 0);
			fprintf(stderr, "ofi_unmap_storm: round %d (%s): write failed: %s\n", round,
				mrn_kind_name[k], fi_strerror(err.err ? err.err : (int)-n));
			exit(2);
		}
		const unsigned char *got = get(&r, scratch);

		for (size_t i = 0; i < opt.size; i++)
			wrong += got[i] != bytes[i];
		if (wrong) {
			printf("ofi_unmap_storm: thread %d round %d (%s): %zu of %zu bytes wrong\n",
			       w->thread, round, mrn_kind_name[k], wrong, opt.size);
			w->wrong[k]++;
		}
		/* Back to the caches, which keep them (leave pinned). */
		fi_close(&smr->fid);
		fi_close(&rmr->fid);
		if (opt.fork && w->thread == 0 && round % 4 == 3)
			mrn_fork_and_system();
	}
	free(bytes);
	free(zeros);
	free(scratch);
	return NULL;
}

static int parse_kinds(const char *list)
{
	char *copy = strdup(list), *save, *k;

	nkinds = 0;
	for (k = strtok_r(copy, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
		int found = -1;

		for (int i = 0; i < MRN_NKINDS; i++)
			if (!strcmp(k, mrn_kind_name[i]))
				found = i;
		if (found < 0 || nkinds == MRN_NKINDS) {
			free(copy);
			return -1;
		}
		kinds[nkinds++] = (enum mrn_kind)found;
	}
	free(copy);
	return nkinds ? 0 : -1;
}

int main(int argc, char **argv)
{
	int import = 0, require = 0;

	mrn_replace_die = die;
	node = getenv("MRN_IP"); /* the guest's address on rxe0's netdev */
	/* Every kind; munmap after map_fixed, so that it unmaps a mapping of
	 * its own, not the malloc() memory free leaves. */
	if (parse_kinds("reuse,map_fixed,munmap,mremap,dontneed,shm,punch,free") < 0)
		return 2;
	for (int i = 1; i < argc; i++) {
		if (mrn_storm_option(&opt, argv[i]))
			continue;
		if (!strncmp(argv[i], "--provider=", 11))
			provider = argv[i] + 11;
		else if (!strncmp(argv[i], "--node=", 7))
			node = argv[i] + 7;
		else if (!strncmp(argv[i], "--domain=", 9))
			domain_name = argv[i] + 9;
		else if (!strcmp(argv[i], "--import"))
			import = 1;
		else if (!strcmp(argv[i], "--require-mrnotify"))
			require = 1;
		else if (!strncmp(argv[i], "--kinds=", 8)) {
			if (parse_kinds(argv[i] + 8) < 0) {
				fprintf(stderr, "ofi_unmap_storm: bad --kinds\n");
				return 2;
			}
		} else {
			fprintf(stderr, "ofi_unmap_storm: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (mrn_storm_options_check(&opt) < 0) {
		fprintf(stderr, "ofi_unmap_storm: bad arguments\n");
		return 2;
	}
	/* A monitor that blocks a fault forever fails the run, not the lane. */
	alarm(300);
	if (import) {
		const int rc = mrn_ofi_import();

		if (rc) {
			fprintf(stderr, "ofi_unmap_storm: mrn_ofi_import: %s\n", strerror(-rc));
			return 2;
		}
	}

	struct worker w[2];
	pthread_t tid;

	memset(w, 0, sizeof(w));
	for (int t = 0; t < opt.threads; t++) {
		const int rc = connect_pair(&w[t].pair);

		if (rc)
			return rc;
		w[t].thread = t;
	}
	if (opt.threads > 1 && pthread_create(&tid, NULL, storm, &w[1]) != 0)
		die("pthread_create");
	storm(&w[0]);
	if (opt.threads > 1)
		pthread_join(tid, NULL);

	struct mrn_ofi_stats st;
	const int served = mrn_ofi_monitor_stats(&st, sizeof(st)) == 0;
	int wrong[MRN_NKINDS], sum = 0;
	char line[256];

	for (int k = 0; k < MRN_NKINDS; k++)
		sum += wrong[k] = w[0].wrong[k] + w[1].wrong[k];
	mrn_kinds_summary(line, sizeof(line), kinds, nkinds, wrong);
	const char *result = sum ? "corrupt" : "correct";
	int ok = !strcmp(result, opt.expect);

	if (served)
		printf("ofi_unmap_storm: mrnotify's monitor: subscribes %llu, hits refused %llu, "
		       "deaths %llu, notified %llu\n",
		       (unsigned long long)st.subscribes, (unsigned long long)st.valid_false,
		       (unsigned long long)st.deaths, (unsigned long long)st.notified);
	if (require && !(served && st.deaths > 0)) {
		printf("ofi_unmap_storm: mrnotify's monitor did not serve this run\n");
		ok = 0;
	}
	printf("ofi_unmap_storm: %s, %d rounds x %d thread(s) of %zu bytes%s; wrong rounds: %s "
	       "(mremap refused, MAP_FIXED instead: %d); result: %s (expected %s) %s\n",
	       provider, opt.rounds, opt.threads, opt.size, opt.fork ? ", fork and system()" : "",
	       line, atomic_load(&mrn_mremap_refused), result, opt.expect, ok ? "PASS" : "FAIL");
	fflush(stdout);
	for (int t = 0; t < opt.threads; t++)
		close_pair(&w[t].pair);
	return ok ? 0 : 1;
}

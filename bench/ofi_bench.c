/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ofi_bench: a hit in libfabric's MR cache (fi_mr_reg + fi_close of a
 * cached buffer) with each memory monitor, in one run: mrnotify's
 * (mrn_ofi_import), libfabric's memhooks and libfabric's userfaultfd. The
 * monitor is chosen once per process, so each is timed in a child of its
 * own (this program run again with --child=MONITOR); the parent prints the
 * figures and the ratios against memhooks, libfabric 1.17's default.
 * Every child runs a second, idle, thread (mrnotify's has its notifier),
 * and memhooks is timed once more without it ("one_thread"): glibc is
 * cheaper in a process with a single thread.
 *
 * Each child also times a batch: K buffers registered and cached, then one
 * munmap() over all of them, and the time until every cache has dropped
 * them. memhooks drops them inside munmap() (its hook runs before the
 * system call); mrnotify's thread drops them after munmap() returned, and a
 * hit in between refuses them (the "until dropped" figure is the thread's;
 * it can end within munmap(), which marks the registrations before it
 * frees the pages).
 *
 * Needs a provider with an MR cache (verbs on rxe0 in the guest):
 *   ofi_bench [--provider=verbs] [--hits=N] [--batch=K] [--repeat=R]
 * Prints "name=value" lines and ends with hit_ratio_mrnotify_vs_memhooks.
 */
#define _GNU_SOURCE
#include <mrnotify-ofi.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *provider = "verbs";
static long hits = 1000000, batch = 1000, repeat = 5;

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void check(int rc, const char *what)
{
	if (rc) {
		fprintf(stderr, "ofi_bench: %s: %s\n", what, fi_strerror(-rc));
		exit(2);
	}
}

static struct fid_domain *open_domain(void)
{
	struct fi_info *h = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	int rc;

	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup(provider);
	rc = fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, h, &info);
	if (rc == -FI_ENODATA) {
		fprintf(stderr, "ofi_bench: no %s provider here\n", provider);
		exit(77);
	}
	check(rc, "fi_getinfo");
	check(fi_fabric(info->fabric_attr, &fabric, NULL), "fi_fabric");
	check(fi_domain(fabric, info, &domain, NULL), "fi_domain");
	fi_freeinfo(info);
	fi_freeinfo(h);
	return domain;
}

static struct fid_mr *reg(struct fid_domain *d, void *p, size_t len)
{
	struct fid_mr *mr;

	check(fi_mr_reg(d, p, len, FI_WRITE, 0, 0, 0, &mr, NULL), "fi_mr_reg");
	return mr;
}

static void *idle(void *arg)
{
	pause();
	return arg;
}

/* The child: one monitor, prints its figures. */
static int child(const char *monitor)
{
	const size_t len = 64 << 10, page = 4096;

	if (!strcmp(monitor, "mrnotify")) {
		const int rc = mrn_ofi_import();

		if (rc) {
			fprintf(stderr, "ofi_bench: mrn_ofi_import: %s\n", strerror(-rc));
			return 2;
		}
	}
	/*
	 * Every child has a second thread, as mrnotify's has its notifier:
	 * glibc takes cheaper paths (malloc's arena lock, for one) while a
	 * process has a single thread, which would favour the monitors that
	 * start none. MPI processes have several anyway.
	 */
	pthread_t tid;

	if (!getenv("OFI_BENCH_ONE_THREAD") && pthread_create(&tid, NULL, idle, NULL) != 0)
		return 2;
	struct fid_domain *d = open_domain();
	char *buf = aligned_alloc(page, len);

	memset(buf, 1, len);
	fi_close(&reg(d, buf, len)->fid); /* the miss that caches it */
	const double t0 = now_ns();

	for (long i = 0; i < hits; i++)
		fi_close(&reg(d, buf, len)->fid);
	const double hit_ns = (now_ns() - t0) / hits;

	/* The batch: K one-page buffers in one mapping, cached, unmapped at once. */
	char *region = mmap(NULL, batch * page, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (region == MAP_FAILED)
		return 2;
	for (long i = 0; i < batch; i++)
		fi_close(&reg(d, region + i * page, page)->fid);
	struct mrn_ofi_stats before, after;
	const int ours = mrn_ofi_monitor_stats(&before, sizeof(before)) == 0;
	const double u0 = now_ns();

	munmap(region, batch * page);
	const double unmap_ns = now_ns() - u0;
	double dropped_ns = unmap_ns;

	if (ours) {
		/* Looked at every 50 us: the statistics take the monitor's lock,
		 * which a spinning reader would take from the notifier. */
		const struct timespec pause_50us = {0, 50000};

		do
			nanosleep(&pause_50us, NULL);
		while (mrn_ofi_monitor_stats(&after, sizeof(after)) == 0 &&
		       after.notified - before.notified < (uint64_t)batch && now_ns() - u0 < 10e9);
		dropped_ns = now_ns() - u0;
	}
	if (ours)
		fprintf(stderr, "ofi_bench: %s: hits that drained %llu, refused %llu\n", monitor,
			(unsigned long long)before.valid_slow,
			(unsigned long long)before.valid_false);
	printf("%s %.1f %.1f %.1f\n", monitor, hit_ns, unmap_ns, dropped_ns);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	/* The last: memhooks in a process with one thread (no idle one). */
	const char *const monitors[] = {"mrnotify", "memhooks", "userfaultfd", "memhooks"};
	const char *const names[] = {"mrnotify", "memhooks", "userfaultfd", "memhooks_one_thread"};
	double hit[4] = {0}, unmap[4] = {0}, dropped[4] = {0};

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--provider=", 11))
			provider = argv[i] + 11;
		else if (!strncmp(argv[i], "--hits=", 7))
			hits = atol(argv[i] + 7);
		else if (!strncmp(argv[i], "--batch=", 8))
			batch = atol(argv[i] + 8);
		else if (!strncmp(argv[i], "--repeat=", 9))
			repeat = atol(argv[i] + 9);
		else if (!strncmp(argv[i], "--child=", 8))
			return child(argv[i] + 8);
		else {
			fprintf(stderr, "usage: ofi_bench [--provider=NAME] [--hits=N] [--batch=K] "
					"[--repeat=R]\n");
			return 2;
		}
	}
	if (hits < 1 || batch < 1 || repeat < 1)
		return 2;
	/* Each figure is the least of `repeat` children per monitor, run in
	 * turn (mrnotify, memhooks, userfaultfd, mrnotify, ...), so that a
	 * noisy moment does not fall on one monitor only. */
	for (long rep = 0; rep < repeat; rep++)
		for (int m = 0; m < 4; m++) {
			double h = 0, u = 0, d = 0;
			char cmd[512], name[32];
			FILE *f;

			/* mrnotify's child runs over memhooks, which the import replaces. */
			snprintf(cmd, sizeof(cmd),
				 "env FI_MR_CACHE_MONITOR=%s %s /proc/%d/exe --provider=%s "
				 "--hits=%ld "
				 "--batch=%ld --child=%s",
				 m == 0 ? "memhooks" : monitors[m],
				 m == 3 ? "OFI_BENCH_ONE_THREAD=1" : "", (int)getpid(), provider,
				 hits, batch, monitors[m]);
			f = popen(cmd, "r");
			if (!f || fscanf(f, "%31s %lf %lf %lf", name, &h, &u, &d) != 4) {
				const int rc = f ? pclose(f) : -1;

				if (rc >= 0 && WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
					return 77;
				fprintf(stderr, "ofi_bench: the %s child failed\n", monitors[m]);
				return 2;
			}
			pclose(f);
			if (rep == 0 || h < hit[m])
				hit[m] = h;
			if (rep == 0 || u < unmap[m])
				unmap[m] = u;
			if (rep == 0 || d < dropped[m])
				dropped[m] = d;
		}
	printf("# %s, %ld hits of 64 KiB; batch: %ld one-page buffers, one munmap; the least "
	       "of %ld runs each\n",
	       provider, hits, batch, repeat);
	for (int m = 0; m < 4; m++)
		printf("hit_ns_%s=%.1f\nbatch_munmap_us_%s=%.1f\nbatch_dropped_us_%s=%.1f\n",
		       names[m], hit[m], names[m], unmap[m] / 1e3, names[m], dropped[m] / 1e3);
	printf("hit_ratio_mrnotify_vs_memhooks_one_thread=%.2f\n", hit[0] / hit[3]);
	printf("hit_ratio_userfaultfd_vs_memhooks=%.2f\n", hit[2] / hit[1]);
	printf("hit_ratio_mrnotify_vs_memhooks=%.2f\n", hit[0] / hit[1]);
	return 0;
}

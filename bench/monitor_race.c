/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * monitor_race: does munmap() return before the memory monitor knows?
 *
 * Each round maps 64 KiB, touches it, has the monitor watch it, unmaps it
 * and asks the monitor at once whether the range changed. A monitor that
 * says "unchanged" after munmap() returned leaves a window in which a cache
 * hit hands out a registration of memory that is gone. Meanwhile K threads
 * of the same process watch and unwatch ranges of their own through the
 * same file descriptor, as the threads of an MPI rank's cache do.
 *
 *   mrnotify  libmrnotify's watch API over /dev/mrnotify: the counter
 *             (mrn_watch_generation) against the last drain's
 *   kdreg2    HPE's kdreg2 (built with -DMRN_PROBE_KDREG2 and kdreg2's
 *             include/ on the path, by bench/kdreg2-compare.sh; never
 *             part of the build): kdreg2_mapping_changed() on the
 *             region's monitoring state
 *
 * Usage: monitor_race mrnotify|kdreg2 [--rounds=N] [--threads=K]
 * Prints one line: the rounds in which munmap() returned before the
 * monitor knew, and the longest wait until it did (it is waited for, up to
 * a second, before the next round). Exit status 0 when it ran (the count is
 * the result), 77 when the monitor's device is missing, 1 on an error.
 */
#define _GNU_SOURCE
#include "mrnotify.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifdef MRN_PROBE_KDREG2
#include <fcntl.h>
#include <kdreg2.h>
#include <sys/ioctl.h>
#include <unistd.h>
#endif

#define REGION (64 * 1024)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *map_region(void)
{
	char *p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 1, REGION);
	return p;
}

/* One monitor: watch a range, forget it, and ask whether it changed. */
struct monitor {
	const char *name;
	int (*open)(struct monitor *m);
	/* Watches p; fills the handle the other calls take. */
	int (*watch)(struct monitor *m, void *p, uint64_t cookie, uint64_t handle[2]);
	void (*unwatch)(struct monitor *m, uint64_t cookie, const uint64_t handle[2]);
	/* After the range was unmapped: has the monitor seen it? */
	int (*changed)(struct monitor *m, const uint64_t handle[2]);
	/* Takes what changed off the monitor's books. */
	void (*settle)(struct monitor *m);
	mrn_watch_t *watch_ctx;
	uint64_t drained;
	int fd;
	const void *status;
};

static int mrn_open(struct monitor *m)
{
	return mrn_watch_open(MRN_MONITOR_KERNEL, &m->watch_ctx);
}

static void forget(void *arg, uint64_t cookie, void *addr, size_t len)
{
	(void)arg, (void)cookie, (void)addr, (void)len;
}

static void mrn_settle(struct monitor *m)
{
	(void)mrn_watch_drain(m->watch_ctx, forget, NULL, &m->drained);
}

static int mrn_watch(struct monitor *m, void *p, uint64_t cookie, uint64_t handle[2])
{
	return mrn_watch_add(m->watch_ctx, p, REGION, cookie, &handle[0]);
}

static void mrn_unwatch(struct monitor *m, uint64_t cookie, const uint64_t handle[2])
{
	(void)cookie;
	(void)mrn_watch_remove(m->watch_ctx, handle[0]);
}

static int mrn_changed(struct monitor *m, const uint64_t handle[2])
{
	(void)handle;
	return __atomic_load_n(mrn_watch_generation(m->watch_ctx), __ATOMIC_ACQUIRE) != m->drained;
}

#ifdef MRN_PROBE_KDREG2
static int kd_open(struct monitor *m)
{
	struct kdreg2_config_data cfg = {.max_regions = 1 << 16};

	m->fd = open(KDREG2_DEVICE_NAME, O_RDWR | O_CLOEXEC);
	if (m->fd < 0)
		return -errno;
	if (ioctl(m->fd, KDREG2_IOCTL_CONFIG_DATA, &cfg) < 0)
		return -errno;
	m->status = cfg.status_data;
	return 0;
}

static int kd_watch(struct monitor *m, void *p, uint64_t cookie, uint64_t handle[2])
{
	struct kdreg2_ioctl_monitor arg = {.addr = p, .length = REGION, .cookie = cookie};

	if (ioctl(m->fd, KDREG2_IOCTL_MONITOR, &arg) < 0)
		return -errno;
	handle[0] = arg.monitoring_params.location;
	handle[1] = arg.monitoring_params.generation;
	return 0;
}

static void kd_unwatch(struct monitor *m, uint64_t cookie, const uint64_t handle[2])
{
	struct kdreg2_ioctl_unmonitor arg = {.cookie = cookie};

	arg.monitoring_params.location = handle[0];
	arg.monitoring_params.generation = (uint32_t)handle[1];
	(void)ioctl(m->fd, KDREG2_IOCTL_UNMONITOR, &arg);
}

static int kd_changed(struct monitor *m, const uint64_t handle[2])
{
	struct kdreg2_monitoring_params params = {.location = handle[0],
						  .generation = (uint32_t)handle[1]};

	return kdreg2_mapping_changed(m->status, &params);
}

static void kd_settle(struct monitor *m)
{
	struct kdreg2_event ev[64];

	/* The events of the unmapped regions (their regions are gone). */
	while (kdreg2_read_counter(&((const struct kdreg2_status_data *)m->status)->pending_events) &&
	       read(m->fd, ev, sizeof(ev)) > 0)
		;
}
#endif

static struct monitor monitors[] = {
	{.name = "mrnotify",
	 .open = mrn_open,
	 .watch = mrn_watch,
	 .unwatch = mrn_unwatch,
	 .changed = mrn_changed,
	 .settle = mrn_settle},
#ifdef MRN_PROBE_KDREG2
	{.name = "kdreg2",
	 .open = kd_open,
	 .watch = kd_watch,
	 .unwatch = kd_unwatch,
	 .changed = kd_changed,
	 .settle = kd_settle},
#endif
};

static atomic_bool stop;

/* A thread of the same rank: watches and unwatches a range of its own. */
static void *contend(void *arg)
{
	struct monitor *m = arg;
	void *p = map_region();
	uint64_t cookie = (uint64_t)(uintptr_t)p, handle[2];

	if (!p)
		return NULL;
	while (!atomic_load(&stop))
		if (m->watch(m, p, cookie, handle) == 0)
			m->unwatch(m, cookie, handle);
	munmap(p, REGION);
	return NULL;
}

int main(int argc, char **argv)
{
	struct monitor *m = NULL;
	long rounds = 20000, threads = 2, missed = 0, never = 0;
	uint64_t worst = 0;
	pthread_t tids[64];
	int rc;

	for (int i = 2; i < argc; i++) {
		if (sscanf(argv[i], "--rounds=%ld", &rounds) == 1 && rounds > 0)
			continue;
		if (sscanf(argv[i], "--threads=%ld", &threads) == 1 && threads >= 0 && threads <= 64)
			continue;
		fprintf(stderr, "monitor_race: bad argument %s\n", argv[i]);
		return 2;
	}
	for (size_t i = 0; argc > 1 && i < sizeof(monitors) / sizeof(monitors[0]); i++)
		if (strcmp(argv[1], monitors[i].name) == 0)
			m = &monitors[i];
	if (!m) {
		fprintf(stderr, "usage: monitor_race mrnotify%s [--rounds=N] [--threads=K]\n",
#ifdef MRN_PROBE_KDREG2
			"|kdreg2"
#else
			" (kdreg2: build with bench/kdreg2-compare.sh)"
#endif
		);
		return 2;
	}
	rc = m->open(m);
	if (rc < 0) {
		fprintf(stderr, "monitor_race: %s: %s\n", m->name, strerror(-rc));
		return rc == -ENOENT || rc == -ENODEV ? 77 : 1;
	}
	m->settle(m);
	for (long t = 0; t < threads; t++)
		pthread_create(&tids[t], NULL, contend, m);
	for (long r = 0; r < rounds; r++) {
		void *p = map_region();
		uint64_t handle[2], t0;

		if (!p || m->watch(m, p, (uint64_t)r, handle) < 0) {
			fprintf(stderr, "monitor_race: %s: round %ld: cannot map or watch\n", m->name,
				r);
			rc = 1;
			break;
		}
		munmap(p, REGION);
		if (!m->changed(m, handle)) {
			missed++;
			t0 = now_ns();
			while (!m->changed(m, handle) && now_ns() - t0 < 1000000000u)
				;
			if (!m->changed(m, handle))
				never++;
			if (now_ns() - t0 > worst)
				worst = now_ns() - t0;
		}
		m->settle(m);
	}
	atomic_store(&stop, true);
	for (long t = 0; t < threads; t++)
		pthread_join(tids[t], NULL);
	printf("monitor_race: %s: %ld threads: munmap returned before the monitor knew in %ld of "
	       "%ld rounds (longest wait %.1f us, %ld never within 1 s)\n",
	       m->name, threads, missed, rounds, worst / 1000.0, never);
	return rc;
}

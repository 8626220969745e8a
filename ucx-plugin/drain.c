/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The generation moved: what the kernel reports dead becomes
 * ucm_vm_munmap(), which removes the range from every cache (or queues it
 * on a cache that asked for synchronous events, whose next lookup misses
 * and applies the queue). Also the self-test that proves the device
 * reports unmaps before UCX is told to rely on it.
 */
#include "plugin.h"

#include <linux/mrnotify.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void mrn_ucx_hot_follow(const volatile uint64_t *gen, uint64_t seen)
{
	__atomic_store_n(&mrn_ucx.hot->seen, seen, __ATOMIC_RELAXED);
	__atomic_store_n(&mrn_ucx.hot->generation, gen, __ATOMIC_RELEASE);
}

/*
 * Called for each watch the kernel reports dead, with the lock held. The
 * regions' deregistration waits for the lock before it releases the slot,
 * so the slot is still theirs.
 */
static void mrn_ucx_drained(void *arg, uint64_t cookie, void *addr, size_t len)
{
	(void)arg;
	if (cookie == MRN_UCX_SELFTEST_COOKIE) {
		/* Counted rather than returned: any thread's drain may see it. */
		mrn_ucx.selftest_seen++;
		return;
	}
	if (cookie < mrn_ucx.nslots && mrn_ucx.slots[cookie].refs != 0 &&
	    mrn_ucx.slots[cookie].id != 0) {
		/* The kernel dropped it: no new region may share it. */
		mrn_ucx_slot_unhash((uint32_t)cookie);
		mrn_ucx.slots[cookie].id = 0;
	}
	ucs_trace("mrnotify: range %p..%p invalidated", addr, (char *)addr + len);
	/*
	 * Removes the range from every rcache now (or queues it on a cache
	 * whose page-table lock is busy, or that asked for synchronous
	 * events; its next get applies the queue before looking up). Never
	 * deregisters inside: UCX defers that.
	 */
	ucm_vm_munmap(addr, len);
	mrn_ucx.stats.ranges++;
}

/*
 * Threads that saw the same move queue on the lock; the first drains, and
 * the others find the generation caught up and go on, so that a move costs
 * one ioctl, not one per thread.
 */
void __attribute__((noinline)) mrn_ucx_drain(void)
{
	uint64_t gen;
	long n;

	pthread_mutex_lock(&mrn_ucx.lock);
	if (mrn_ucx.child_reopen)
		mrn_ucx_child_reopen();
	if (mrn_ucx.watch != NULL && mrn_ucx_moved()) {
		n = mrn_watch_drain(mrn_ucx.watch, mrn_ucx_drained, NULL, &gen);
		if (n < 0) {
			/* Nothing was taken: all we can do is forget everything. */
			ucs_error("mrnotify: draining %s failed: %s; invalidating every watched "
				  "registration",
				  MRN_DEVICE_PATH, strerror((int)-n));
			mrn_ucx_forget_all();
			gen = __atomic_load_n(mrn_ucx.hot->generation, __ATOMIC_ACQUIRE);
		}
		mrn_ucx.stats.drains++;
		__atomic_store_n(&mrn_ucx.hot->seen, gen, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mrn_ucx.lock);
}

/*
 * From a checked function's slow path in the shim (entry_<arch>.S), with
 * the caller's arguments saved: the generation moved, or checks are
 * counted. Drains; the trampoline then jumps to UCX's function. UCX 1.13
 * looks every cache up through ucs_rcache_get(), so there the UCP entry
 * points leave the drain to it.
 */
void mrn_ucx_slow(int kind)
{
	if (!MRN_UCX_ENTRY_CHECKS && kind == MRN_UCX_SLOW_ENTRY)
		return;
	if (MRN_UCX_UNLIKELY(mrn_ucx.hot->count_checks))
		mrn_ucx_count(kind == MRN_UCX_SLOW_GET ? &mrn_ucx.stats.checks
						       : &mrn_ucx.stats.entry_checks,
			      1);
	if (mrn_ucx_moved())
		mrn_ucx_drain();
}

/*
 * Watch a scratch page, unmap it, and expect the generation to move and a
 * drain to name it: the device is not just open but reports unmaps.
 */
int mrn_ucx_self_test(const char **why)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t id, before, seen_before;
	char *p;
	int rc;

	p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		*why = "mmap of a scratch page failed";
		return -errno;
	}
	p[0] = 1;
	pthread_mutex_lock(&mrn_ucx.lock);
	rc = mrn_watch_add(mrn_ucx.watch, p, page, MRN_UCX_SELFTEST_COOKIE, &id);
	seen_before = mrn_ucx.selftest_seen;
	pthread_mutex_unlock(&mrn_ucx.lock);
	if (rc < 0) {
		munmap(p, page);
		*why = "watching a scratch page failed";
		return rc;
	}
	before = __atomic_load_n(&mrn_ucx.hot->seen, __ATOMIC_RELAXED);
	munmap(p, page);
	if (__atomic_load_n(mrn_ucx.hot->generation, __ATOMIC_ACQUIRE) == before) {
		*why = "munmap of a watched page did not move the generation";
		return -EPROTO;
	}
	mrn_ucx_drain();
	pthread_mutex_lock(&mrn_ucx.lock);
	rc = mrn_ucx.selftest_seen != seen_before;
	pthread_mutex_unlock(&mrn_ucx.lock);
	if (!rc) {
		*why = "munmap of a watched page was not reported by a drain";
		return -EPROTO;
	}
	return 0;
}

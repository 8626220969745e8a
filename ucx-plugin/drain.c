/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The generation moved: what the library's watch set delivers dead becomes
 * ucm_vm_munmap(), which removes the range from every cache (or queues it
 * on a cache that asked for synchronous events, whose next lookup misses
 * and applies the queue). Also the word the hit paths follow, and the
 * self-test that proves the device reports unmaps before UCX is told to
 * rely on it.
 */
#include "plugin.h"

#include <linux/mrnotify.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <string.h>

void mrn_ucx_follow(const volatile uint64_t *gen, uint64_t seen)
{
	MRN_UCX_ASSERT_LOCKED();
	__atomic_store_n(&mrn_ucx.hot->seen, seen, __ATOMIC_RELAXED);
	__atomic_store_n(&mrn_ucx.hot->generation, gen, __ATOMIC_RELEASE);
	mrn_ucx_hook_follow();
}

/*
 * Called, with the lock held, for each range the set delivers dead. The
 * regions over it are gone from UCX's view once this returns; their
 * deregistration releases their holds later.
 */
static void mrn_ucx_died(void *arg, void *addr, size_t len)
{
	(void)arg;
	MRN_UCX_ASSERT_LOCKED();
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
 * Threads that saw the same move queue on the lock; the first delivers, and
 * the others find the generation caught up and go on, so that a move costs
 * one ioctl, not one per thread. In a forked child the set opens its own
 * context here, and the word changes.
 */
void __attribute__((noinline)) mrn_ucx_drain(void)
{
	const volatile uint64_t *gen;
	uint64_t drained;
	long n;

	mrn_ucx_lock();
	if (mrn_ucx.set != NULL && mrn_ucx_moved()) {
		n = mrn_watch_set_deliver(mrn_ucx.set, mrn_ucx_died, NULL, &drained);
		if (n < 0)
			ucs_error("mrnotify: draining %s failed: %s; every watched registration was "
				  "invalidated",
				  MRN_DEVICE_PATH, strerror((int)-n));
		mrn_ucx.stats.drains++;
		gen = mrn_watch_set_generation(mrn_ucx.set);
		if (gen != __atomic_load_n(&mrn_ucx.hot->generation, __ATOMIC_RELAXED))
			mrn_ucx_follow(gen, drained);
		else
			__atomic_store_n(&mrn_ucx.hot->seen, drained, __ATOMIC_RELEASE);
	}
	mrn_ucx_unlock();
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

/* The set's self-test: the device is not just open but reports unmaps. */
int mrn_ucx_self_test(const char **why)
{
	if (mrn_ucx.set == NULL) {
		*why = "no watch set";
		return -ENODEV;
	}
	return mrn_watch_set_self_test(mrn_ucx.set, why);
}

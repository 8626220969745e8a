/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork(), as libmrnotify's caches do it (lib/src/fork.cc): the lock is
 * taken before the fork, so that no thread of the parent is inside the
 * slot table or a drain when the child's copy is made, and released on
 * both sides. The child lets go of the parent's watch (the status page is
 * not inherited and the context answers only the parent), and its next
 * lookup opens its own.
 *
 * The shim registers the handlers at load (they call these), before UCX
 * can register its own:
 * prepare handlers run in the reverse order of registration, so ours runs
 * last, after UCX's ucs_rcache_before_fork() has purged idle regions
 * through our mem_dereg (which takes the lock). The lock is a plain mutex:
 * the child's thread has a new thread id, and an error-checking mutex
 * would refuse its unlock (EPERM) and stay locked in the child for ever
 * (tried: ucx_stale --fork hung on UCX 1.22). A fork from a signal handler
 * that interrupted a thread holding the lock still hangs in prepare.
 */
#include "plugin.h"

#include <linux/mrnotify.h>
#include <ucs/debug/log_def.h>

#include <string.h>

void mrn_ucx_fork_prepare(void)
{
	pthread_mutex_lock(&mrn_ucx.lock);
}

void mrn_ucx_fork_parent(void)
{
	pthread_mutex_unlock(&mrn_ucx.lock);
}

/*
 * The child of a possibly threaded parent: system calls, stores, and the
 * free() in mrn_watch_abandon() (glibc's malloc is usable in a child
 * handler). Only an active plugin has anything to let go of.
 */
void mrn_ucx_fork_child(void)
{
	if (mrn_ucx_state() == MRN_UCX_STATE_ACTIVE) {
		if (mrn_ucx.watch != NULL) {
			/* Closes the parent's fd in the child; the parent's stays. */
			mrn_watch_abandon(mrn_ucx.watch);
			mrn_ucx.watch = NULL;
		}
		mrn_ucx.epoch++;
		mrn_ucx.child_reopen = 1;
		mrn_ucx_hot_follow(&mrn_ucx_forked, 0);
		/* Before any lookup: the parent's word is not mapped here. */
		mrn_ucx_hook_follow();
	}
	pthread_mutex_unlock(&mrn_ucx.lock);
}

/*
 * The lock held: the forked child's first drain. Its own context, and out
 * of every cache what the parent's context watched.
 */
void mrn_ucx_child_reopen(void)
{
	int rc;

	mrn_ucx.child_reopen = 0;
	rc = mrn_watch_open(MRN_MONITOR_KERNEL, &mrn_ucx.watch);
	if (rc == 0) {
		const volatile uint64_t *gen = mrn_watch_generation(mrn_ucx.watch);

		mrn_ucx_hot_follow(gen, __atomic_load_n(gen, __ATOMIC_ACQUIRE));
	} else {
		/* New regions then stay out of the caches (see mem_reg). */
		mrn_ucx.watch = NULL;
		mrn_ucx_hot_follow(&mrn_ucx_still, 0);
		ucs_warn("mrnotify: forked child cannot open %s (%s); registrations will not be "
			 "cached",
			 MRN_DEVICE_PATH, strerror(-rc));
	}
	mrn_ucx_hook_follow();
	/*
	 * Regions inherited from the parent were watched by the parent's
	 * context, which will not tell us about them: out of every cache,
	 * and their slots (the parent's numbering) are forgotten.
	 */
	mrn_ucx_forget_all();
	mrn_ucx_slots_reset();
}

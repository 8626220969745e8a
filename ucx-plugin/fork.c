/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork(), as libmrnotify's caches do it (lib/src/fork.cc): the lock (and
 * the watch set's) is taken before the fork, so that no thread of the
 * parent is in a registration or a drain when the child's copy is made,
 * and released on both sides. The watch set lets go of the parent's
 * context in the child (the status page is not inherited and the context
 * answers only the parent), and its next lookup opens its own.
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

void mrn_ucx_fork_prepare(void)
{
	mrn_ucx_lock();
	if (mrn_ucx.set != NULL)
		mrn_watch_set_fork_prepare(mrn_ucx.set);
}

void mrn_ucx_fork_parent(void)
{
	if (mrn_ucx.set != NULL)
		mrn_watch_set_fork_parent(mrn_ucx.set);
	mrn_ucx_unlock();
}

/*
 * The child of a possibly threaded parent: the set lets go of the parent's
 * context (system calls, stores, free()), and the hit paths follow its
 * forked word, whose first check delivers every inherited range dead and
 * opens the child's own context. If that open fails, new regions stay out
 * of the caches (mem_reg).
 */
void mrn_ucx_fork_child(void)
{
	if (mrn_ucx.set != NULL) {
		mrn_watch_set_fork_child(mrn_ucx.set);
		/* Before any lookup: the parent's word is not mapped here. */
		mrn_ucx_follow(mrn_watch_set_generation(mrn_ucx.set), 0);
	}
	mrn_ucx_unlock();
}

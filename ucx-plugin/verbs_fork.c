/* SPDX-License-Identifier: BSD-3-Clause */
/* ibv_fork_init(), answered without rdma-core's madvise where it is not needed. */
#include "plugin.h"

#include <ucs/debug/log_def.h>

#include <dlfcn.h>
#include <errno.h>

/*
 * rdma-core's enum ibv_fork_status value (stable ABI since rdma-core 35);
 * spelled here so that the plugin builds without the verbs headers.
 */
#define MRN_UCX_IBV_FORK_UNNEEDED 2

typedef int (*mrn_ucx_fork_init_fn)(void);
typedef int (*mrn_ucx_fork_status_fn)(void);

/*
 * UCX's IB memory domain calls ibv_fork_init() when it opens (by default,
 * UCX_IB_FORK_INIT=try), and with rdma-core < 52 that makes every
 * ibv_reg_mr() madvise(MADV_DONTFORK) its range (and ibv_dereg_mr()
 * MADV_DOFORK). Changing a mapping's flags splits the mapping, and splitting
 * it inside a transparent huge page splits the page's PMD, which kernel 6.1
 * reports to MMU notifiers as a change (MMU_NOTIFY_CLEAR) of the whole
 * 2 MiB: the watch just made, and its neighbours', would be invalidated
 * with every registration. Kernels >= 5.13 keep pinned pages with the parent
 * on fork(), where rdma-core says IBV_FORK_UNNEEDED; there the call is
 * answered with success and rdma-core's madvise stays off, which is what
 * rdma-core >= 52 does itself. Only when the plugin is active: otherwise
 * (and when rdma-core cannot tell) the call goes to rdma-core unchanged.
 */
static int mrn_ucx_real_fork_init(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	mrn_ucx_fork_init_fn fn;

	/* A handle, not RTLD_NEXT: UCX's IB module loads libibverbs privately. */
	if (h == NULL)
		h = dlopen("libibverbs.so.1", RTLD_LAZY);
	if (h == NULL)
		return ENOSYS;
	fn = (mrn_ucx_fork_init_fn)dlsym(h, "ibv_fork_init");
	return fn != NULL ? fn() : ENOSYS;
}

static int mrn_ucx_fork_unneeded(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	mrn_ucx_fork_status_fn fn;

	if (h == NULL)
		return 0;
	fn = (mrn_ucx_fork_status_fn)dlsym(h, "ibv_is_fork_initialized");
	return fn != NULL && fn() == MRN_UCX_IBV_FORK_UNNEEDED;
}

int mrn_ucx_fork_init(void)
{
	mrn_ucx_activate();
	if (mrn_ucx_state() == MRN_UCX_STATE_ACTIVE && mrn_ucx_fork_unneeded()) {
		ucs_debug("mrnotify: ibv_fork_init(): not needed (the kernel copies pinned pages "
			  "on fork), "
			  "skipped so that registrations do not split huge pages");
		return 0;
	}
	return mrn_ucx_real_fork_init();
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: standing in for Open MPI's grdma. Transports such as
 * btl/uct, btl/ofi and smsc ask for a cache called "grdma" by name, and
 * where grdma is built into libopen-pal (Open MPI 5's default) a loadable
 * component of that name is dropped. So with serve_grdma the stock grdma's
 * init is pointed at ours; without it, and with our parameters set for
 * grdma, it is wrapped to warn that the job runs on the stock cache. Close
 * puts the stock init back.
 */
#include "rcache_mrnotify.h"

#include "opal/class/opal_list.h"
#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/util/output.h"
#include "opal/util/show_help.h"

#include <linux/mrnotify.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Whether the user set one of our parameters for the component called name.
 * From the environment, where mpirun --mca puts them: Open MPI keeps no
 * record of a parameter nobody registered (rcache_grdma_monitor when our
 * grdma-named build is not loaded), so MCA cannot say.
 */
static const char *param_set_for(const char *name)
{
	static char env[128];

	for (int i = 0; mca_rcache_mrnotify_param_names[i]; i++) {
		snprintf(env, sizeof(env), "OMPI_MCA_rcache_%s_%s", name,
			 mca_rcache_mrnotify_param_names[i]);
		if (getenv(env))
			return env + strlen("OMPI_MCA_");
	}
	return NULL;
}

/*
 * Open MPI's own grdma, when it is loaded: in this process it serves every
 * transport that asks for "grdma", and the grdma-named build of ours is not
 * loaded.
 */
static mca_rcache_base_component_t *stock_grdma(void)
{
	mca_base_component_list_item_t *cli;

	OPAL_LIST_FOREACH(cli, &opal_rcache_base_framework.framework_components,
			  mca_base_component_list_item_t)
	{
		/* Our grdma-named build registers a monitor; Open MPI's does not. */
		if (!strcmp(cli->cli_component->mca_component_name, "grdma") &&
		    mca_base_var_find("opal", "rcache", "grdma", "monitor") < 0)
			return (mca_rcache_base_component_t *)cli->cli_component;
	}
	return NULL;
}

/*
 * Open MPI's grdma selected although the user configured ours. Open MPI
 * says nothing when a transport asks for grdma and gets its own, and it
 * ignores parameters nobody registered (rcache_grdma_monitor without our
 * build): the job would run with a cache that misses raw unmaps while the
 * user believes otherwise. Open MPI has no notice of which cache a
 * transport creates, so the mrnotify build wraps the stock grdma's init,
 * warns on its first call and hands over; close puts it back.
 */
static mca_rcache_base_component_init_fn_t stock_grdma_init;
static mca_rcache_base_component_t *stock_grdma_wrapped;
static const char *stock_grdma_param;

static mca_rcache_base_module_t *warn_stock_grdma_init(mca_rcache_base_resources_t *res)
{
	static bool warned;

	if (!warned) {
		/*
		 * Written by the rank itself (opal_output), not forwarded by
		 * opal_show_help: Open MPI 4.1.4's forwarding to mpirun
		 * sometimes drops a rank's message ("ORTE_ERROR_LOG: Out of
		 * resource in ... show_help.c"), and this one must not be lost.
		 */
		char *msg = opal_show_help_string(
			MRN_HELP_FILE, "stock-grdma", true, MRN_LOG_PREFIX,
			res && res->cache_name ? res->cache_name : "(unnamed)", stock_grdma_param,
			MRN_SHADOW_DIR);
		warned = true;
		if (msg) {
			opal_output(0, "%s", msg);
			free(msg);
		}
	}
	return stock_grdma_init(res);
}

/*
 * serve_grdma=kernel: whether this process can use /dev/mrnotify (the
 * library opens it and maps its counter, as a cache would). Asked once, at
 * open, on the node the process runs on: a site's modulefile or launch
 * environment sets the same value for every node of a job, and nodes
 * without the module keep the stock grdma.
 */
static bool kernel_usable(void)
{
	mrn_watch_t *watch;
	const int rc = mrn_watch_open(MRN_MONITOR_KERNEL, &watch);

	if (rc < 0) {
		mca_rcache_mrnotify_log(1,
					"serve_grdma=kernel: " MRN_DEVICE_PATH
					" is not usable here (%s): transports that ask for grdma "
					"get Open MPI's own",
					strerror(-rc));
		return false;
	}
	mrn_watch_close(watch);
	return true;
}

void mca_rcache_mrnotify_grdma_takeover(mca_rcache_base_component_init_fn_t ours)
{
	mca_rcache_base_component_t *grdma = stock_grdma();
	const char *set;

	if (!grdma)
		return;
	if (mca_rcache_mrnotify_component.serve_grdma) {
		/* kernel, where it is not usable: the stock grdma, as asked. */
		if (mca_rcache_mrnotify_component.serve_grdma_if_kernel && !kernel_usable())
			return;
		if (grdma->rcache_init == ours)
			return;
		stock_grdma_init = grdma->rcache_init;
		stock_grdma_wrapped = grdma;
		grdma->rcache_init = ours;
		mca_rcache_mrnotify_log(1,
					"serving the transports that ask for grdma (serve_grdma)");
		return;
	}
	set = param_set_for("grdma");
	if (!set)
		set = param_set_for(MRN_RCACHE_NAME_STR);
	if (!set || grdma->rcache_init == warn_stock_grdma_init)
		return;
	stock_grdma_param = set;
	stock_grdma_init = grdma->rcache_init;
	stock_grdma_wrapped = grdma;
	grdma->rcache_init = warn_stock_grdma_init;
}

void mca_rcache_mrnotify_grdma_restore(void)
{
	/*
	 * Unless grdma was closed (and unloaded) before us: the framework
	 * closes its components in list order.
	 */
	if (stock_grdma_wrapped && stock_grdma() == stock_grdma_wrapped)
		stock_grdma_wrapped->rcache_init = stock_grdma_init;
	stock_grdma_wrapped = NULL;
}

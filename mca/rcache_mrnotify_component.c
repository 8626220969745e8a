/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: the component. Registers the MCA parameters, checks at
 * open that it runs in the Open MPI it was built for and that the job's
 * configuration can reach it, and creates modules (init). The caches and
 * the module functions are in rcache_mrnotify_module.c (the memory hooks'
 * queue is the library's: mrn_report_unmap), the stand-in for grdma in
 * grdma_takeover.c.
 */
#define _GNU_SOURCE /* dladdr */
#include "rcache_mrnotify.h"

#include "opal/class/opal_list.h"
#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_var_enum.h"
#include "opal/mca/dl/base/base.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/util/show_help.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MRN_COMPONENT_MAJOR   0
#define MRN_COMPONENT_MINOR   1
#define MRN_COMPONENT_RELEASE 0

#ifndef MRN_HELP_DIR
#define MRN_HELP_DIR "<datadir>/mrnotify"
#endif

/*
 * What this build was compiled against. The tests build the component
 * with some of these changed to check that it refuses to load.
 */
#ifndef MRN_BUILT_OPAL_MAJOR
#define MRN_BUILT_OPAL_MAJOR OPAL_MAJOR_VERSION
#endif
#ifndef MRN_BUILT_OPAL_MINOR
#define MRN_BUILT_OPAL_MINOR OPAL_MINOR_VERSION
#endif
#ifndef MRN_BUILT_OPAL_RELEASE
#define MRN_BUILT_OPAL_RELEASE OPAL_RELEASE_VERSION
#endif
#ifndef MRN_BUILT_SIZEOF_LIST_ITEM
#define MRN_BUILT_SIZEOF_LIST_ITEM sizeof(opal_list_item_t)
#endif
#ifndef MRN_BUILT_SIZEOF_REGISTRATION
#define MRN_BUILT_SIZEOF_REGISTRATION sizeof(mca_rcache_base_registration_t)
#endif

static int mrn_component_register(void);
static int mrn_component_open(void);
static int mrn_component_close(void);
static mca_rcache_base_module_t *mrn_component_init(mca_rcache_base_resources_t *resources);

mca_rcache_mrnotify_component_t mca_rcache_mrnotify_component = {
	.super =
		{
			.rcache_version =
				{
					MCA_RCACHE_BASE_VERSION_3_0_0,
					.mca_component_name = MRN_RCACHE_NAME_STR,
					MCA_BASE_MAKE_VERSION(component, MRN_COMPONENT_MAJOR,
							      MRN_COMPONENT_MINOR,
							      MRN_COMPONENT_RELEASE),
					.mca_open_component = mrn_component_open,
					.mca_close_component = mrn_component_close,
					.mca_register_component_params = mrn_component_register,
				},
			.rcache_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
			.rcache_init = mrn_component_init,
		},
	.var_monitor = -1,
	.var_max_pinned = -1,
	.var_max_entries = -1,
	.var_fork = -1,
	.var_print_stats = -1,
};

/* Our parameters, by name, for the checks of the configuration. */
const char *const mca_rcache_mrnotify_param_names[] = {
	"monitor", "max_pinned", "max_entries", "fork", "print_stats", "verbose", NULL,
};

/*
 * Where opal_show_help() finds our help file: next to the component (the
 * build tree copies it there) and where make install put it. Open MPI only
 * looks in its own data directory, which make install does not touch.
 */
static void add_help_dirs(void)
{
	static bool done;
	char path[PATH_MAX], *slash;
	Dl_info info;

	if (done)
		return;
	done = true;
	if (dladdr(&mca_rcache_mrnotify_component, &info) && info.dli_fname &&
	    snprintf(path, sizeof(path), "%s", info.dli_fname) < (int)sizeof(path) &&
	    (slash = strrchr(path, '/'))) {
		*slash = '\0';
		opal_show_help_add_dir(path);
	}
	opal_show_help_add_dir(MRN_HELP_DIR);
}

/* A parameter kept as the user's text, parsed by check_params. */
static int register_text(const char *name, const char *help, const char *def, char **storage)
{
	*storage = (char *)def;
	return mca_base_component_var_register(&mca_rcache_mrnotify_component.super.rcache_version,
					       name, help, MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0,
					       OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
					       storage);
}

static void bad_value(const char *name, const char *value, const char *expected);

/*
 * The first bad value, repeated on stderr when a cache is refused: a
 * process that stops right after its help message may lose it on the way
 * to mpirun (seen with Open MPI 4.1.4: "Data unpack would read past end of
 * buffer" in orte/util/show_help.c), and the user must still learn why.
 */
static char mrn_config_error_text[256];

static void config_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void config_error(const char *fmt, ...)
{
	va_list ap;

	if (!mca_rcache_mrnotify_component.config_error) {
		va_start(ap, fmt);
		vsnprintf(mrn_config_error_text, sizeof(mrn_config_error_text), fmt, ap);
		va_end(ap);
	}
	mca_rcache_mrnotify_component.config_error = true;
}

static void bad_value(const char *name, const char *value, const char *expected)
{
	opal_show_help(MRN_HELP_FILE, "bad-value", true, MRN_LOG_PREFIX, value, MRN_RCACHE_NAME_STR,
		       name, expected);
	config_error("bad value \"%s\" for MCA parameter rcache_%s_%s: expected %s", value,
		     MRN_RCACHE_NAME_STR, name, expected);
}

/*
 * The parameters' texts, by libmrnotify's parsers (the names and suffixes
 * are its own: a policy it gains is accepted here without a change), from
 * wherever they came (command line, environment, a parameter file).
 */
static void check_params(void)
{
	mca_rcache_mrnotify_component_t *c = &mca_rcache_mrnotify_component;
	const char *t;
	char value[32];

	c->config_error = false;
	mrn_config_error_text[0] = '\0';
	/* Only what the user set: a default is the library's own. */
	t = c->monitor_text ? c->monitor_text : "";
	if (mca_rcache_mrnotify_param_set(c->var_monitor) &&
	    mrn_monitor_from_string(t, &c->monitor) < 0)
		bad_value("monitor", t, "auto, kernel, uffd or none");
	t = c->fork_text ? c->fork_text : "";
	if (mca_rcache_mrnotify_param_set(c->var_fork) &&
	    mrn_fork_policy_from_string(t, &c->fork_kind) < 0) {
		if (strcmp(t, "auto") && strcmp(t, "dontfork") && strcmp(t, "none")) {
			bad_value("fork", t, "auto, dontfork or none");
		} else {
			/* One of ours that an older libmrnotify lacks. */
			opal_show_help(MRN_HELP_FILE, "fork-unsupported", true, MRN_LOG_PREFIX, t,
				       MRN_RCACHE_NAME_STR);
			config_error("the libmrnotify in use does not know the fork policy \"%s\" "
				     "(rcache_%s_fork)",
				     t, MRN_RCACHE_NAME_STR);
		}
	}
	t = c->max_pinned_text ? c->max_pinned_text : "";
	if (mca_rcache_mrnotify_param_set(c->var_max_pinned) &&
	    (mrn_size_from_string(t, &c->max_pinned) < 0 || c->max_pinned > (uint64_t)INT64_MAX))
		bad_value("max_pinned", t,
			  "a byte count with an optional K, M, G or T suffix (0: no limit)");
	t = c->max_entries_text ? c->max_entries_text : "";
	if (mca_rcache_mrnotify_param_set(c->var_max_entries) &&
	    (!*t || strspn(t, "0123456789") != strlen(t) ||
	     mrn_size_from_string(t, &c->max_entries) < 0 || c->max_entries > (uint64_t)INT64_MAX))
		bad_value("max_entries", t, "a count >= 0 (0: no limit)");
	/* Open MPI's words for a boolean, and ours. */
	t = c->serve_grdma_text ? c->serve_grdma_text : "0";
	c->serve_grdma = c->serve_grdma_if_kernel = false;
	if (!MRN_IS_SHADOW) {
		if (!strcasecmp(t, "kernel"))
			c->serve_grdma = c->serve_grdma_if_kernel = true;
		else if (!strcmp(t, "1") || !strcasecmp(t, "true") || !strcasecmp(t, "yes") ||
			 !strcasecmp(t, "enabled"))
			c->serve_grdma = true;
		else if (strcmp(t, "0") && strcasecmp(t, "false") && strcasecmp(t, "no") &&
			 strcasecmp(t, "disabled"))
			bad_value("serve_grdma", t, "0, 1 or kernel");
	}
	if (c->verbose < 0 || c->verbose > 3) {
		snprintf(value, sizeof(value), "%d", c->verbose);
		c->verbose = 0;
		bad_value("verbose", value, "0, 1, 2 or 3");
	}
}

static int mrn_component_register(void)
{
	mca_rcache_mrnotify_component_t *c = &mca_rcache_mrnotify_component;
	mca_base_component_t *v = &c->super.rcache_version;

	add_help_dirs();
	c->var_monitor = register_text(
		"monitor",
		"How the cache learns that registered memory was unmapped or remapped: "
		"auto (kernel, else uffd, else none), "
		"kernel (mrnotify.ko's /dev/mrnotify: a cache hit costs one load and compare; no "
		"memory hooks needed), "
		"uffd (userfaultfd unmap events, stock kernels; no memory hooks needed), "
		"none (Open MPI's memory hooks report unmaps, as for grdma; idle registrations are "
		"kept only while those hooks are active). "
		"Unmaps that bypass libc (raw system calls, other runtimes) are seen by kernel and "
		"uffd only. "
		"Left at its default, the MRNOTIFY_MONITOR environment variable applies",
		"auto", &c->monitor_text);
	c->var_max_pinned = register_text(
		"max_pinned",
		"Most bytes the cache keeps registered, in use or idle; idle registrations are "
		"evicted (least recently used first) "
		"to stay under it. Optional K, M, G or T suffix; 0 means no limit. "
		"Left at its default, MRNOTIFY_MAX_PINNED applies",
		"0", &c->max_pinned_text);
	c->var_max_entries = register_text(
		"max_entries",
		"Most registrations the cache holds; idle ones are evicted (least recently used "
		"first) to stay under it. "
		"0 means no limit. Left at its default, MRNOTIFY_MAX_ENTRIES applies",
		"0", &c->max_entries_text);
	c->var_fork = register_text("fork",
				    "What registered pages do across fork(): auto (libmrnotify's "
				    "default: madvise(MADV_DONTFORK) only where the "
				    "kernel does not keep pinned pages with the parent), dontfork "
				    "(always MADV_DONTFORK: a child does not inherit "
				    "them, so the parent's registrations stay valid) or none "
				    "(leave it to the kernel and the transport, e.g. "
				    "ibv_fork_init). Left at its default, MRNOTIFY_FORK applies",
				    "auto", &c->fork_text);
	c->print_stats = false;
	c->var_print_stats = mca_base_component_var_register(
		v, "print_stats",
		"Print registration cache statistics (hits, misses, evictions, invalidations) when "
		"each cache is destroyed, "
		"normally at MPI_Finalize. Left at its default, MRNOTIFY_STATS applies",
		MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
		&c->print_stats);
	c->verbose = 0;
	(void)mca_base_component_var_register(
		v, "verbose",
		"Verbosity: 0 errors only, 1 the monitor and leave-pinned decision of each cache, "
		"2 cache creation and teardown, "
		"3 libmrnotify's debug messages",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY,
		&c->verbose);
	if (!MRN_IS_SHADOW) {
		c->serve_grdma_text = "0";
		(void)mca_base_component_var_register(
			v, "serve_grdma",
			"Give the transports that ask for the cache \"grdma\" by name "
			"(btl/ofi, btl/uct, smsc/knem, vader's knem path) this cache instead: "
			"Open MPI's grdma hands the creation of each cache to this component. "
			"For Open MPI builds whose grdma is built into libopen-pal (Open MPI "
			"5's default, Debian 13), where the grdma-named build of mrnotify is "
			"ignored. 0: no; 1: yes; kernel: yes in each process where "
			"/dev/mrnotify is usable, else the stock grdma (decided on each node "
			"when the job starts: what the mrnotify modulefiles set)",
			MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_4,
			MCA_BASE_VAR_SCOPE_READONLY, &c->serve_grdma_text);
	}
	check_params();
	return OPAL_SUCCESS;
}

/*
 * Open MPI checks nothing but the MCA base version when it loads a
 * component: one built against another release, or against a debug or
 * CUDA build (other structure layouts), would load and corrupt memory.
 * The release comes from the dl framework's component, which is built into
 * libopen-pal; the layouts from the sizes libopen-pal's classes record.
 */
static bool check_open_mpi(void)
{
	const mca_base_component_t *pal = opal_dl_base_selected_component
						  ? &opal_dl_base_selected_component->base_version
						  : NULL;
	char built[128], running[128];

	snprintf(built, sizeof(built), "%d.%d.%d", MRN_BUILT_OPAL_MAJOR, MRN_BUILT_OPAL_MINOR,
		 MRN_BUILT_OPAL_RELEASE);
	if (pal) {
		snprintf(running, sizeof(running), "%d.%d.%d", pal->mca_project_major_version,
			 pal->mca_project_minor_version, pal->mca_project_release_version);
		if (strcmp(built, running)) {
			opal_show_help(MRN_HELP_FILE, "version-mismatch", true, MRN_LOG_PREFIX,
				       built, running);
			return false;
		}
	}
	if (opal_list_item_t_class.cls_sizeof != MRN_BUILT_SIZEOF_LIST_ITEM ||
	    mca_rcache_base_registration_t_class.cls_sizeof != MRN_BUILT_SIZEOF_REGISTRATION) {
		opal_show_help(MRN_HELP_FILE, "layout-mismatch", true, MRN_LOG_PREFIX, built,
			       OPAL_ENABLE_DEBUG, OPAL_CUDA_SUPPORT, OPAL_CUDA_GDR_SUPPORT,
			       (size_t)MRN_BUILT_SIZEOF_LIST_ITEM,
			       opal_list_item_t_class.cls_sizeof,
			       (size_t)MRN_BUILT_SIZEOF_REGISTRATION,
			       mca_rcache_base_registration_t_class.cls_sizeof);
		return false;
	}
	return true;
}

/*
 * Directories in mca_base_component_path that do not exist: Open MPI stops
 * scanning at the first one, silently, and every component in the
 * directories after it (often SYS_DEFAULT, all of Open MPI's own) is lost.
 */
static void check_component_path(void)
{
	const char **value = NULL;
	char *copy, *dir, *save = NULL;
	struct stat st;
	int var;

	var = mca_base_var_find("opal", "mca", "base", "component_path");
	if (var < 0 || mca_base_var_get_value(var, &value, NULL, NULL) != OPAL_SUCCESS || !value ||
	    !*value)
		return;
	copy = strdup(*value);
	if (!copy)
		return;
	for (dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		const bool last = !save || !*save;
		char user[PATH_MAX];

		if (!strcmp(dir, "SYS_DEFAULT"))
			continue;
		/*
		 * ~/.openmpi/components rarely exists: harmless last (as in
		 * Open MPI's default path), fatal to what comes after it.
		 */
		if (!strcmp(dir, "USER_DEFAULT")) {
			if (last)
				continue;
			snprintf(user, sizeof(user), "%s/.openmpi/components",
				 getenv("HOME") ? getenv("HOME") : "");
			dir = user;
		}
		if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			opal_show_help(MRN_HELP_FILE, "missing-dir", true, MRN_LOG_PREFIX, dir,
				       *value, MRN_SHADOW_DIR);
			break;
		}
	}
	free(copy);
}

static void check_configuration(void)
{
	check_component_path();
	if (!MRN_IS_SHADOW)
		mca_rcache_mrnotify_grdma_takeover(mrn_component_init);
}

static int mrn_component_open(void)
{
	if (!check_open_mpi())
		return OPAL_ERR_NOT_SUPPORTED;
	check_configuration();
	return OPAL_SUCCESS;
}

static int mrn_component_close(void)
{
	mca_rcache_mrnotify_grdma_restore();
	return OPAL_SUCCESS;
}

static mca_rcache_base_module_t *mrn_component_init(mca_rcache_base_resources_t *res)
{
	if (mca_rcache_mrnotify_component.config_error) {
		mca_rcache_mrnotify_not_created(res ? res->cache_name : NULL,
						mrn_config_error_text);
		return NULL;
	}
	if (!res || !res->register_mem || !res->deregister_mem) {
		mca_rcache_mrnotify_not_created(
			NULL, "the transport gave no register or deregister function");
		return NULL;
	}
	if (res->sizeof_reg < sizeof(mca_rcache_base_registration_t) || res->sizeof_reg > 4096) {
		char why[128];

		snprintf(why, sizeof(why), "the registration size %zu is outside [%zu, 4096]",
			 res->sizeof_reg, sizeof(mca_rcache_base_registration_t));
		mca_rcache_mrnotify_not_created(res->cache_name, why);
		return NULL;
	}
	return mca_rcache_mrnotify_module_create(res);
}

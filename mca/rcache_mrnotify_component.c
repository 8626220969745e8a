/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: the component (MCA parameters, module creation) and the
 * caches shared between modules.
 */
#include "rcache_mrnotify.h"

#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MRN_COMPONENT_MAJOR 0
#define MRN_COMPONENT_MINOR 1
#define MRN_COMPONENT_RELEASE 0

#ifndef MRN_SHADOW_DIR
#define MRN_SHADOW_DIR "<libdir>/mrnotify/grdma-shadow"
#endif
#define MRN_USAGE "--mca btl_openib_rcache mrnotify, or --mca mca_base_component_path " MRN_SHADOW_DIR ":SYS_DEFAULT"
#define MRN_USAGE_SHADOW "--mca mca_base_component_path " MRN_SHADOW_DIR ":SYS_DEFAULT"

static int mrn_component_register(void);
static int mrn_component_open(void);
static int mrn_component_close(void);
static mca_rcache_base_module_t *mrn_component_init(mca_rcache_base_resources_t *resources);

mrn_rcache_component_t mca_rcache_mrnotify_component = {
	.super = {
		.rcache_version = {
			MCA_RCACHE_BASE_VERSION_3_0_0,
			.mca_component_name = MRN_RCACHE_NAME_STR,
			MCA_BASE_MAKE_VERSION(component, MRN_COMPONENT_MAJOR, MRN_COMPONENT_MINOR,
					      MRN_COMPONENT_RELEASE),
			.mca_open_component = mrn_component_open,
			.mca_close_component = mrn_component_close,
			.mca_register_component_params = mrn_component_register,
		},
		.rcache_data = {
			MCA_BASE_METADATA_PARAM_CHECKPOINT
		},
		.rcache_init = mrn_component_init,
	},
	.var_monitor = -1,
	.var_max_pinned = -1,
	.var_max_entries = -1,
	.var_fork = -1,
};

#define C mca_rcache_mrnotify_component

/*
 * Guards the list of shared caches. Taken only when modules are created and
 * finalized, never on the registration path and never by a memory hook.
 */
static pthread_mutex_t mrn_caches_lock = PTHREAD_MUTEX_INITIALIZER;
static mrn_shared_cache_t *mrn_caches;

void mrn_log(int level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (C.verbose < level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	opal_output(0, "%s %s: %s", OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), MRN_LOG_PREFIX, buf);
}

/* Errors are printed whatever the verbosity. */
#define mrn_error(...) mrn_log(-1, __VA_ARGS__)

static int register_string(const char *name, const char *help, char **storage,
			   const char *def)
{
	*storage = (char *)def;
	return mca_base_component_var_register(&C.super.rcache_version, name, help,
					       MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0,
					       OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
					       storage);
}

static bool parse_count(const char *s, uint64_t *out)
{
	char *end = NULL;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/*
 * Reads and checks the parameters. A bad value is reported here, once per
 * process (ompi_info shows it too), and then makes every cache creation
 * fail, so the job stops instead of running with a setting nobody asked for.
 */
static void bad_param(const char *name, const char *value, const char *expected)
{
	mrn_error("bad value \"%s\" for MCA parameter rcache_" MRN_RCACHE_NAME_STR "_%s: expected %s",
		  value ? value : "", name, expected);
	C.config_error = true;
}

static void check_params(void)
{
	C.config_error = false;
	if (mrn_monitor_from_string(C.monitor, &C.monitor_kind) < 0)
		bad_param("monitor", C.monitor, "auto, kernel, uffd or none");
	if (mrn_size_from_string(C.max_pinned, &C.max_pinned_bytes) < 0)
		bad_param("max_pinned", C.max_pinned,
			  "a byte count with an optional K, M, G or T suffix (0: no limit)");
	if (!parse_count(C.max_entries, &C.max_entries_count))
		bad_param("max_entries", C.max_entries, "a count >= 0 (0: no limit)");
	if (mrn_fork_policy_from_string(C.fork_policy, &C.fork_kind) < 0)
		bad_param("fork", C.fork_policy, "dontfork or none");
	if (C.verbose < 0 || C.verbose > 3) {
		int v = C.verbose;

		C.verbose = 0;
		mrn_error("bad value %d for MCA parameter rcache_" MRN_RCACHE_NAME_STR
			  "_verbose: expected 0, 1, 2 or 3", v);
		C.config_error = true;
	}
}

static int mrn_component_register(void)
{
	C.var_monitor = register_string("monitor",
		"How the cache learns that registered memory was unmapped or remapped: "
		"auto (kernel, else uffd, else none), "
		"kernel (mrnotify.ko's /dev/mrnotify: a cache hit costs one load and compare; no memory hooks needed), "
		"uffd (userfaultfd unmap events, stock kernels; no memory hooks needed), "
		"none (Open MPI's memory hooks report unmaps, as for grdma; idle registrations are kept only while those hooks are active). "
		"Unmaps that bypass libc (raw system calls, other runtimes) are seen by kernel and uffd only. "
		"The MRNOTIFY_MONITOR environment variable applies when this is left at its default",
		&C.monitor, "auto");
	C.var_max_pinned = register_string("max_pinned",
		"Most bytes the cache keeps registered, in use or idle; idle registrations are evicted (least recently used first) to stay under it. "
		"Optional K, M, G or T suffix; 0 means no limit",
		&C.max_pinned, "0");
	C.var_max_entries = register_string("max_entries",
		"Most registrations the cache holds; idle ones are evicted (least recently used first) to stay under it. 0 means no limit",
		&C.max_entries, "0");
	C.var_fork = register_string("fork",
		"What registered pages do across fork(): dontfork (madvise(MADV_DONTFORK): a child does not inherit them, so the parent's "
		"registrations stay valid) or none (leave it to the kernel and the transport, e.g. ibv_fork_init)",
		&C.fork_policy, "dontfork");
	C.print_stats = false;
	(void)mca_base_component_var_register(&C.super.rcache_version, "print_stats",
		"Print registration cache statistics (hits, misses, evictions, invalidations) when each cache is destroyed, "
		"normally at MPI_Finalize",
		MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
		&C.print_stats);
	C.verbose = 0;
	(void)mca_base_component_var_register(&C.super.rcache_version, "verbose",
		"Verbosity: 0 errors only, 1 the monitor and leave-pinned decision of each cache, 2 cache creation and teardown, "
		"3 libmrnotify's debug messages",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY,
		&C.verbose);
	/* Not a setting: how to select this cache, shown by ompi_info. */
	C.usage = MRN_IS_SHADOW_ ? MRN_USAGE_SHADOW : MRN_USAGE;
	(void)mca_base_component_var_register(&C.super.rcache_version, "usage",
		MRN_IS_SHADOW_ ?
		"This is the mrnotify registration cache (libmrnotify) built under the name grdma, so that transports that "
		"always ask for grdma (btl/ofi, btl/uct, vader with knem) use it. It takes grdma's place when its directory "
		"comes before SYS_DEFAULT in mca_base_component_path; keep SYS_DEFAULT in the path. Transports that take a "
		"cache name (btl_openib_rcache, btl_usnic_rcache) can instead name the component mrnotify, installed with "
		"Open MPI's own components. Do not use --mca rcache alone: it only filters which components are opened"
		:
		"How to select this cache: transports that take a cache name use it with --mca btl_openib_rcache mrnotify "
		"(or btl_usnic_rcache). Transports that always ask for grdma (btl/ofi, btl/uct, vader with knem) get it "
		"from the grdma-named build: --mca mca_base_component_path " MRN_SHADOW_DIR ":SYS_DEFAULT (keep "
		"SYS_DEFAULT). Do not use --mca rcache mrnotify alone: it only filters which components are opened, and "
		"every transport asking for grdma then fails",
		MCA_BASE_VAR_TYPE_STRING, NULL, 0, MCA_BASE_VAR_FLAG_DEFAULT_ONLY, OPAL_INFO_LVL_3,
		MCA_BASE_VAR_SCOPE_CONSTANT, &C.usage);
	check_params();
	return OPAL_SUCCESS;
}

static int mrn_component_open(void)
{
	return OPAL_SUCCESS;
}

static int mrn_component_close(void)
{
	return OPAL_SUCCESS;
}

/* True when the user set the parameter (command line, environment, file). */
static bool param_set(int var)
{
	mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;

	if (var < 0 || mca_base_var_get_value(var, NULL, &source, NULL) != OPAL_SUCCESS)
		return false;
	return source != MCA_BASE_VAR_SOURCE_DEFAULT;
}

static bool hooks_active(void)
{
	const int want = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;

	return (opal_mem_hooks_support_level() & want) == want;
}

static const char *mode_name(const mrn_shared_cache_t *s)
{
	switch (s->monitor) {
	case MRN_MONITOR_KERNEL:
		return "kernel";
	case MRN_MONITOR_UFFD:
		return "uffd";
	case MRN_MONITOR_EXTERNAL:
		return "none+hooks";
	default:
		return "none";
	}
}

static mrn_shared_cache_t *shared_create(const mca_rcache_base_resources_t *res)
{
	struct mrn_config cfg;
	mrn_shared_cache_t *s;
	int want_idle, rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->name = strdup(res->cache_name ? res->cache_name : "(unnamed)");
	if (!s->name) {
		free(s);
		return NULL;
	}
	s->refs = 1;
	s->reg_data = res->reg_data;
	s->sizeof_reg = res->sizeof_reg;
	s->register_mem = res->register_mem;
	s->deregister_mem = res->deregister_mem;

	/* Defaults and the MRNOTIFY_* environment, then what the user set via MCA. */
	if (mrn_config_init(&cfg) < 0) {
		mrn_error("cache %s not created: bad MRNOTIFY_* environment variable (see above)",
			  s->name);
		goto fail;
	}
	if (param_set(C.var_monitor))
		cfg.monitor = C.monitor_kind;
	if (param_set(C.var_max_pinned))
		cfg.max_pinned_bytes = C.max_pinned_bytes;
	if (param_set(C.var_max_entries))
		cfg.max_entries = C.max_entries_count;
	if (param_set(C.var_fork))
		cfg.fork_policy = C.fork_kind;
	if (C.verbose > cfg.verbose)
		cfg.verbose = C.verbose;
	cfg.name = s->name;
	cfg.reg = mrn_reg_callback;
	cfg.dereg = mrn_dereg_callback;
	cfg.context = s;
	cfg.payload_size = res->sizeof_reg;
	cfg.print_stats = 0;	/* printed by mrn_shared_release, with the rank */

	/*
	 * Leave pinned, decided here and not when parameters are read, as
	 * grdma does: transports may change it before creating the cache.
	 * 1 or the pipeline variant: keep idle registrations. 0: keep none.
	 * -1 (auto, still unresolved: Open MPI found no memory hooks, e.g.
	 * with --mca memory ^patcher): keep them if the monitor can tell us of
	 * unmaps, which the library decides (monitor none keeps none).
	 */
	want_idle = opal_leave_pinned != 0 || opal_leave_pinned_pipeline;
	cfg.leave_pinned = want_idle;

	/*
	 * Monitor none with Open MPI's hooks active: the hooks report unmaps,
	 * as they do for grdma, so idle registrations may be kept: the
	 * library's external mode.
	 */
	if (cfg.monitor == MRN_MONITOR_NONE && want_idle && hooks_active())
		cfg.monitor = MRN_MONITOR_EXTERNAL;

	rc = mrn_cache_create(&cfg, &s->cache);
	if (rc < 0) {
		mrn_error("cache %s not created: %s (monitor %s)", s->name,
			  rc == -ENODEV ? "the requested monitor is not available (see above)" : strerror(-rc),
			  mrn_monitor_to_string(cfg.monitor));
		goto fail;
	}
	s->monitor = mrn_cache_monitor(s->cache);
	if (s->monitor == MRN_MONITOR_NONE && want_idle && hooks_active()) {
		/* auto found neither kernel nor uffd: fall back to the hooks. */
		mrn_cache_destroy(s->cache);
		s->cache = NULL;
		cfg.monitor = MRN_MONITOR_EXTERNAL;
		rc = mrn_cache_create(&cfg, &s->cache);
		if (rc < 0) {
			mrn_error("cache %s not created: %s", s->name, strerror(-rc));
			goto fail;
		}
		s->monitor = mrn_cache_monitor(s->cache);
	}
	s->hooks = s->monitor == MRN_MONITOR_NONE || s->monitor == MRN_MONITOR_EXTERNAL;
	s->keep_idle = want_idle && s->monitor != MRN_MONITOR_NONE;
	if (s->hooks) {
		s->ring = calloc(1, sizeof(*s->ring));
		if (!s->ring) {
			mrn_cache_destroy(s->cache);
			goto fail;
		}
		mrn_hook_ring_init(s->ring);
	}
	mrn_log(1, "cache %s: monitor %s, leave_pinned %s (mpi_leave_pinned %d, pipeline %d), %s",
		s->name, mode_name(s), s->keep_idle ? "on" : "off", opal_leave_pinned,
		(int)opal_leave_pinned_pipeline,
		s->hooks ? "invalidated by Open MPI's memory hooks" : "no memory hooks needed");
	return s;
fail:
	free(s->name);
	free(s);
	return NULL;
}

static void print_stats(mrn_shared_cache_t *s)
{
	struct mrn_stats st;

	if (mrn_cache_stats(s->cache, &st, sizeof(st)) < 0)
		return;
	opal_output(0, "%s %s: stats cache=%s monitor=%s leave_pinned=%d "
		    "hits=%llu misses=%llu upgrades=%llu evictions=%llu invalidations=%llu drains=%llu "
		    "retries=%llu failures=%llu entries=%llu pinned_bytes=%llu uncached=%llu hook_ranges=%llu",
		    OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), MRN_LOG_PREFIX, s->name, mode_name(s), (int)s->keep_idle,
		    (unsigned long long)st.hits, (unsigned long long)st.misses,
		    (unsigned long long)st.access_upgrades, (unsigned long long)st.evictions,
		    (unsigned long long)st.invalidations, (unsigned long long)st.drains,
		    (unsigned long long)st.retries, (unsigned long long)st.register_failures,
		    (unsigned long long)st.entries, (unsigned long long)st.pinned_bytes,
		    (unsigned long long)__atomic_load_n(&s->uncached_total, __ATOMIC_RELAXED),
		    (unsigned long long)(s->ring ? __atomic_load_n(&s->ring->queued, __ATOMIC_RELAXED) : 0));
}

void mrn_shared_release(mrn_shared_cache_t *s)
{
	mrn_shared_cache_t **pp;
	uint64_t live;

	pthread_mutex_lock(&mrn_caches_lock);
	if (--s->refs > 0) {
		pthread_mutex_unlock(&mrn_caches_lock);
		return;
	}
	for (pp = &mrn_caches; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&mrn_caches_lock);

	if (C.print_stats)
		print_stats(s);
	live = __atomic_load_n(&s->uncached_live, __ATOMIC_RELAXED);
	if (live)
		mrn_log(1, "cache %s: %llu uncached registrations (BYPASS, PERSIST) still registered at finalize",
			s->name, (unsigned long long)live);
	mrn_log(2, "cache %s destroyed", s->name);
	/* Deregisters every entry left, through the callbacks (still valid). */
	mrn_cache_destroy(s->cache);
	free(s->ring);
	free(s->name);
	free(s);
}

static mca_rcache_base_module_t *mrn_component_init(mca_rcache_base_resources_t *res)
{
	mrn_rcache_module_t *m;
	mrn_shared_cache_t *s;
	const char *name;

	if (C.config_error) {
		mrn_error("no registration cache created: an MCA parameter of rcache " MRN_RCACHE_NAME_STR
			  " has a bad value (see above)");
		return NULL;
	}
	if (!res || !res->register_mem || !res->deregister_mem) {
		mrn_error("no registration cache created: the transport gave no register or deregister function");
		return NULL;
	}
	if (res->sizeof_reg < sizeof(mca_rcache_base_registration_t) || res->sizeof_reg > 4096) {
		mrn_error("no registration cache created: registration size %zu is outside [%zu, 4096]",
			  res->sizeof_reg, sizeof(mca_rcache_base_registration_t));
		return NULL;
	}
	name = res->cache_name ? res->cache_name : "(unnamed)";

	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	/* The caller may free its name as soon as we return. */
	m->name = strdup(name);
	if (!m->name) {
		free(m);
		return NULL;
	}
	m->resources = *res;
	m->resources.cache_name = m->name;

	pthread_mutex_lock(&mrn_caches_lock);
	for (s = mrn_caches; s; s = s->next)
		if (!strcmp(s->name, name) && s->reg_data == res->reg_data &&
		    s->register_mem == res->register_mem &&
		    s->deregister_mem == res->deregister_mem && s->sizeof_reg == res->sizeof_reg)
			break;
	if (s) {
		s->refs++;
		mrn_log(2, "cache %s shared by another module (%d)", s->name, s->refs);
	} else {
		/*
		 * A module with the same name but other callbacks or context gets
		 * its own cache: a registration made through one transport context
		 * is no use to another (grdma shares its tree but never hands one
		 * module's registrations to another either).
		 */
		s = shared_create(res);
		if (s) {
			s->next = mrn_caches;
			mrn_caches = s;
		}
	}
	pthread_mutex_unlock(&mrn_caches_lock);
	if (!s) {
		free(m->name);
		free(m);
		return NULL;
	}
	m->shared = s;
	mrn_module_setup(m);
	return &m->super;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: the caches shared between modules, and the module
 * functions.
 *
 * Locking: the list of shared caches has a lock, taken only when modules
 * are created and finalized. Nothing else here takes a lock of its own.
 * The library drops its lock around the transport's register and
 * deregister functions, and the memory hook path (invalidate_range,
 * monitor none only) only queues the range in the library's lock-free
 * queue (mrn_report_unmap), which the library's next call applies. So no
 * thread can hold a lock here that a memory hook, or the transport's
 * deregister, waits for: grdma's eviction-versus-hook deadlock
 * (open-mpi/ompi#7303) has no counterpart.
 */
#include "rcache_mrnotify.h"

#include "opal/mca/base/mca_base_var.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"
#include "opal/util/sys_limits.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mca_rcache_mrnotify_log(int level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (mca_rcache_mrnotify_component.verbose < level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	opal_output(0, "%s %s: %s", OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), MRN_LOG_PREFIX, buf);
}

/*
 * Straight to stderr, not through opal_show_help(): the transport usually
 * stops the process right after a cache is refused, and Open MPI 4.1.4's
 * mpirun then sometimes loses every help message of the job ("Data unpack
 * would read past end of buffer" in orte/util/show_help.c; 1 run in 40 of
 * tests/mca/mpi_bad_param.test). Its stderr arrives.
 */
void mca_rcache_mrnotify_not_created(const char *cache_name, const char *why)
{
	opal_output(0, "%s %s: registration cache \"%s\" not created: %s.",
		    OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), MRN_LOG_PREFIX,
		    cache_name ? cache_name : "(unnamed)", why);
}

/*
 * The module and flags of a registration: mrn_get() hands them to our
 * register callback as its per-call argument.
 */
struct mrn_reg_call {
	mca_rcache_mrnotify_module_t *module;
	uint32_t flags;
};

static int opal_to_errno(int rc)
{
	switch (rc) {
	case OPAL_SUCCESS:
		return 0;
	case OPAL_ERR_OUT_OF_RESOURCE:
	case OPAL_ERR_TEMP_OUT_OF_RESOURCE:
		/* The library evicts idle registrations and retries, as grdma. */
		return -ENOMEM;
	default:
		return -EIO;
	}
}

static int errno_to_opal(int rc)
{
	switch (rc) {
	case 0:
		return OPAL_SUCCESS;
	case -ENOMEM:
	case -EAGAIN:
		return OPAL_ERR_OUT_OF_RESOURCE;
	case -EINVAL:
		return OPAL_ERR_BAD_PARAM;
	case -ENOENT:
		return OPAL_ERR_NOT_FOUND;
	default:
		return OPAL_ERROR;
	}
}

/* Fills in the framework's part of a registration for [addr, addr + len). */
static void reg_init(mca_rcache_base_registration_t *reg, size_t sizeof_reg,
		     mca_rcache_base_module_t *rcache, void *addr, size_t len, uint32_t flags,
		     int32_t access)
{
	memset(reg, 0, sizeof_reg);
	OBJ_CONSTRUCT(reg, mca_rcache_base_registration_t);
	reg->rcache = rcache;
	reg->base = addr;
	reg->bound = (unsigned char *)addr + len - 1; /* inclusive */
	reg->flags = flags;
	reg->access_flags = access;
	reg->ref_count = 1;
}

static int mrn_reg_callback(void *context, void *arg, void *addr, size_t len, uint32_t access,
			    void *payload)
{
	mca_rcache_mrnotify_shared_t *s = context;
	const struct mrn_reg_call *call = arg;
	mca_rcache_base_registration_t *reg = payload;

	/*
	 * Fields are set before the transport's function runs: openib reads
	 * them there. reg->rcache is the module that asked; transports
	 * release through their own module pointer, never through it.
	 */
	reg_init(reg, s->sizeof_reg, call ? &call->module->super : NULL, addr, len,
		 call ? call->flags : 0, (int32_t)access);
	return opal_to_errno(s->register_mem(s->reg_data, addr, len, reg));
}

static int mrn_dereg_callback(void *context, void *payload)
{
	mca_rcache_mrnotify_shared_t *s = context;
	mca_rcache_base_registration_t *reg = payload;

	reg->ref_count = 0;
	return opal_to_errno(s->deregister_mem(s->reg_data, reg));
}

/* --- invalidations from Open MPI's memory hooks (monitor none) -------------- */

static int mrn_invalidate_range_hook(mca_rcache_base_module_t *rcache, void *addr, size_t size)
{
	mca_rcache_mrnotify_shared_t *s = ((mca_rcache_mrnotify_module_t *)rcache)->shared;

	/*
	 * Always success: any error makes Open MPI end the process. Queued
	 * without a lock (this runs inside free() or munmap()), applied by the
	 * library's next call; an entry still in use is deregistered when its
	 * last user releases it.
	 */
	(void)mrn_report_unmap(s->cache, addr, size);
	return OPAL_SUCCESS;
}

static void shared_release(mca_rcache_mrnotify_shared_t *s);

/* --- the module ----------------------------------------------------------------- */

static int mod_register(mca_rcache_base_module_t *rcache, void *addr, size_t size, uint32_t flags,
			int32_t access_flags, mca_rcache_base_registration_t **reg)
{
	mca_rcache_mrnotify_module_t *m = (mca_rcache_mrnotify_module_t *)rcache;
	mca_rcache_mrnotify_shared_t *s = m->shared;
	struct mrn_reg_call call = {m, flags};
	mrn_entry_t *e;
	int rc;

	*reg = NULL;
	if (OPAL_UNLIKELY(size == 0))
		size = 1; /* a registration covers at least its page */
	/*
	 * BYPASS (never looked up or kept), PERSIST (always registered anew,
	 * never idle in the cache), INVALID (must not be handed out again) and
	 * device memory (no host mapping the kernel could watch): a
	 * registration of their own, which the library makes with the same
	 * callback and evict-and-retry, and deregisters at the put. Host memory
	 * in whole pages, as grdma does; device memory exactly as asked (its
	 * allocation's bounds are the accelerator framework's to know). The
	 * transport's register function sees the flags (reg->flags) and
	 * registers device memory as such (Open MPI 5.0.9's btl/ofi and
	 * mtl/ofi ask grdma for it: refusing would fail their GPU sends).
	 */
	if (OPAL_UNLIKELY(flags & (MCA_RCACHE_FLAGS_CACHE_BYPASS | MCA_RCACHE_FLAGS_PERSIST |
				   MCA_RCACHE_FLAGS_INVALID | MRN_RCACHE_FLAGS_DEVICE_MEM))) {
		call.flags |= MRN_REG_FLAG_UNCACHED;
		rc = mrn_get_flags(s->cache, addr, size, (uint32_t)access_flags,
				   MRN_GET_UNCACHED |
					   (flags & MRN_RCACHE_FLAGS_DEVICE_MEM ? MRN_GET_EXACT : 0),
				   &call, &e);
		if (rc == 0) {
			__atomic_fetch_add(&s->uncached_live, 1, __ATOMIC_RELAXED);
			__atomic_fetch_add(&s->uncached_total, 1, __ATOMIC_RELAXED);
		}
	} else {
		rc = mrn_get(s->cache, addr, size, (uint32_t)access_flags, &call, &e);
	}
	if (OPAL_UNLIKELY(rc < 0))
		return errno_to_opal(rc);
	*reg = mrn_entry_payload(e);
	return OPAL_SUCCESS;
}

static int mod_deregister(mca_rcache_base_module_t *rcache, mca_rcache_base_registration_t *reg)
{
	mca_rcache_mrnotify_shared_t *s = ((mca_rcache_mrnotify_module_t *)rcache)->shared;

	if (OPAL_UNLIKELY(reg->flags & MRN_REG_FLAG_UNCACHED))
		__atomic_fetch_sub(&s->uncached_live, 1, __ATOMIC_RELAXED);
	/*
	 * Idle (kept for reuse) or deregistered now: the library decides (an
	 * uncached one always now).
	 */
	mrn_put(s->cache, mrn_entry_from_payload(reg));
	return OPAL_SUCCESS;
}

static int mod_find(mca_rcache_base_module_t *rcache, void *addr, size_t size,
		    mca_rcache_base_registration_t **reg)
{
	mca_rcache_mrnotify_shared_t *s = ((mca_rcache_mrnotify_module_t *)rcache)->shared;
	mrn_entry_t *e;
	int rc;

	*reg = NULL;
	rc = mrn_find(s->cache, addr, size ? size : 1, &e);
	if (rc < 0)
		return errno_to_opal(rc);
	/* A reference: released with rcache_deregister, as with grdma. */
	*reg = mrn_entry_payload(e);
	return OPAL_SUCCESS;
}

static bool mod_evict(mca_rcache_base_module_t *rcache)
{
	mca_rcache_mrnotify_shared_t *s = ((mca_rcache_mrnotify_module_t *)rcache)->shared;

	return mrn_evict_one(s->cache) > 0;
}

static void mod_finalize(mca_rcache_base_module_t *rcache)
{
	mca_rcache_mrnotify_module_t *m = (mca_rcache_mrnotify_module_t *)rcache;

	shared_release(m->shared);
	OBJ_DESTRUCT(&m->super.lock);
	free(m->name);
	free(m);
}

static void module_setup(mca_rcache_mrnotify_module_t *m)
{
	m->super.rcache_component = &mca_rcache_mrnotify_component.super;
	m->super.rcache_register = mod_register;
	m->super.rcache_deregister = mod_deregister;
	m->super.rcache_find = mod_find;
	/*
	 * With the kernel or uffd monitor the library hears of every unmap
	 * itself: no invalidate function, so Open MPI's memory hooks skip this
	 * module (and the job may run with --mca memory ^patcher).
	 */
	m->super.rcache_invalidate_range = m->shared->hooks ? mrn_invalidate_range_hook : NULL;
	m->super.rcache_finalize = mod_finalize;
	m->super.rcache_evict = mod_evict;
	/* Unused by this module; constructed because the framework owns it. */
	OBJ_CONSTRUCT(&m->super.lock, opal_mutex_t);
}

/* --- the caches shared between modules ------------------------------------------ */

/*
 * Guards the list of shared caches. Taken only when modules are created and
 * finalized, never on the registration path and never by a memory hook.
 */
static pthread_mutex_t mrn_caches_lock = PTHREAD_MUTEX_INITIALIZER;
static mca_rcache_mrnotify_shared_t *mrn_caches;

/* True when the user set the parameter (command line, environment, file). */
bool mca_rcache_mrnotify_param_set(int var)
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

static const char *mode_name(const mca_rcache_mrnotify_shared_t *s)
{
	/* The library's names, but say how a monitor-less cache is fed. */
	return s->monitor == MRN_MONITOR_EXTERNAL ? "none+hooks"
						  : mrn_monitor_to_string(s->monitor);
}

/*
 * The library's configuration: its defaults and the MRNOTIFY_* environment,
 * then every MCA parameter the user set (MCA wins over the environment).
 */
static int config_from_params(mca_rcache_mrnotify_shared_t *s,
			      const mca_rcache_base_resources_t *res, struct mrn_config *cfg)
{
	const mca_rcache_mrnotify_component_t *c = &mca_rcache_mrnotify_component;

	if (mrn_config_init(cfg) < 0) {
		mca_rcache_mrnotify_not_created(
			s->name, "a MRNOTIFY_* environment variable has a bad value (see above)");
		return -1;
	}
	if (mca_rcache_mrnotify_param_set(c->var_monitor))
		cfg->monitor = c->monitor;
	if (mca_rcache_mrnotify_param_set(c->var_max_pinned))
		cfg->max_pinned_bytes = c->max_pinned;
	if (mca_rcache_mrnotify_param_set(c->var_max_entries))
		cfg->max_entries = c->max_entries;
	if (mca_rcache_mrnotify_param_set(c->var_fork))
		cfg->fork_policy = c->fork_kind;
	if (mca_rcache_mrnotify_param_set(c->var_print_stats))
		cfg->print_stats = c->print_stats;
	if (c->verbose > cfg->verbose)
		cfg->verbose = c->verbose;
	/* Printed by shared_release, with the rank, not by the library. */
	s->print_stats = cfg->print_stats;
	cfg->print_stats = 0;
	cfg->name = s->name;
	cfg->reg = mrn_reg_callback;
	cfg->dereg = mrn_dereg_callback;
	cfg->context = s;
	cfg->payload_size = res->sizeof_reg;
	return 0;
}

static int cache_create(mca_rcache_mrnotify_shared_t *s, struct mrn_config *cfg)
{
	char why[256];
	int rc = mrn_cache_create(cfg, &s->cache);

	if (rc < 0) {
		snprintf(why, sizeof(why), "%s (monitor %s)",
			 rc == -ENODEV ? "the requested monitor is not available (see above)"
				       : strerror(-rc),
			 mrn_monitor_to_string(cfg->monitor));
		mca_rcache_mrnotify_not_created(s->name, why);
		s->cache = NULL;
		return -1;
	}
	s->monitor = mrn_cache_monitor(s->cache);
	return 0;
}

/*
 * Creates the library's cache. Leave pinned is decided here and not when
 * parameters are read, as grdma does: transports may change it before
 * creating the cache. 1 or the pipeline variant: keep idle registrations.
 * 0: keep none. -1 (auto, still unresolved: Open MPI found no memory
 * hooks, e.g. with --mca memory ^patcher): keep them if the monitor can
 * tell us of unmaps, which the library decides (monitor none keeps none).
 * Monitor none with Open MPI's hooks active: the hooks report unmaps, as
 * they do for grdma, so idle registrations may be kept (the library's
 * external mode); for auto that is the library's auto-external, which
 * falls back to them when it finds neither kernel nor uffd.
 */
static int create_cache(mca_rcache_mrnotify_shared_t *s, struct mrn_config *cfg)
{
	const bool want_idle = opal_leave_pinned != 0 || opal_leave_pinned_pipeline;

	cfg->leave_pinned = want_idle;
	if (want_idle && hooks_active()) {
		if (cfg->monitor == MRN_MONITOR_NONE)
			cfg->monitor = MRN_MONITOR_EXTERNAL;
		else if (cfg->monitor == MRN_MONITOR_AUTO)
			cfg->monitor = MRN_MONITOR_AUTO_EXTERNAL;
	}
	if (cache_create(s, cfg) < 0)
		return -1;
	s->hooks = s->monitor == MRN_MONITOR_NONE || s->monitor == MRN_MONITOR_EXTERNAL;
	s->keep_idle = want_idle && s->monitor != MRN_MONITOR_NONE;
	return 0;
}

static mca_rcache_mrnotify_shared_t *shared_create(const mca_rcache_base_resources_t *res)
{
	struct mrn_config cfg;
	mca_rcache_mrnotify_shared_t *s;

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
	if (config_from_params(s, res, &cfg) < 0 || create_cache(s, &cfg) < 0)
		goto fail;
	mca_rcache_mrnotify_log(
		1, "cache %s: monitor %s, leave_pinned %s (mpi_leave_pinned %d, pipeline %d), %s",
		s->name, mode_name(s), s->keep_idle ? "on" : "off", opal_leave_pinned,
		(int)opal_leave_pinned_pipeline,
		s->hooks ? "invalidated by Open MPI's memory hooks" : "no memory hooks needed");
	return s;
fail:
	free(s->name);
	free(s);
	return NULL;
}

static void print_stats(mca_rcache_mrnotify_shared_t *s)
{
	struct mrn_stats st;
	char fields[1024];
	size_t n = 0;

	if (mrn_cache_stats(s->cache, &st, sizeof(st)) < 0)
		return;
		/* The library's statistics, by its own names (MRN_STATS_FIELDS). */
#define MRN_FORMAT_FIELD(f)                                                                        \
	if (n < sizeof(fields))                                                                    \
		n += (size_t)snprintf(fields + n, sizeof(fields) - n, " %s=%llu", #f,              \
				      (unsigned long long)st.f);
	MRN_STATS_FIELDS(MRN_FORMAT_FIELD)
#undef MRN_FORMAT_FIELD
	opal_output(
		0,
		"%s %s: stats cache=%s monitor=%s leave_pinned=%d%s bypassed=%llu",
		OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), MRN_LOG_PREFIX, s->name, mode_name(s),
		(int)s->keep_idle, fields,
		(unsigned long long)__atomic_load_n(&s->uncached_total, __ATOMIC_RELAXED));
}

static void shared_release(mca_rcache_mrnotify_shared_t *s)
{
	mca_rcache_mrnotify_shared_t **pp;
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

	if (s->print_stats)
		print_stats(s);
	live = __atomic_load_n(&s->uncached_live, __ATOMIC_RELAXED);
	if (live)
		mca_rcache_mrnotify_log(
			1,
			"cache %s: %llu uncached registrations (BYPASS, PERSIST) still registered "
			"at finalize",
			s->name, (unsigned long long)live);
	mca_rcache_mrnotify_log(2, "cache %s destroyed", s->name);
	/* Deregisters every entry left, through the callbacks (still valid). */
	mrn_cache_destroy(s->cache);
	free(s->name);
	free(s);
}

/*
 * A module, on the cache it shares with every module of the same name,
 * callbacks and context. A module with the same name but other callbacks
 * or context gets its own cache: a registration made through one transport
 * context is no use to another (grdma shares its tree but never hands one
 * module's registrations to another either).
 */
mca_rcache_base_module_t *mca_rcache_mrnotify_module_create(const mca_rcache_base_resources_t *res)
{
	const char *name = res->cache_name ? res->cache_name : "(unnamed)";
	mca_rcache_mrnotify_module_t *m;
	mca_rcache_mrnotify_shared_t *s;

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
		mca_rcache_mrnotify_log(2, "cache %s shared by another module (%d)", s->name,
					s->refs);
	} else {
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
	module_setup(m);
	return &m->super;
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: Open MPI's registration cache framework (rcache) on top of
 * libmrnotify. The cache itself (lookup, LRU, limits, invalidation by the
 * kernel or by userfaultfd) is the library's; this is the glue that maps the
 * framework's registrations, flags and callbacks onto it.
 *
 * The same sources build two components: "mrnotify" (for transports that let
 * the user name the cache, e.g. btl_openib_rcache) and, with
 * MRN_RCACHE_NAME=grdma, a stand-in for grdma for the transports that ask for
 * "grdma" by name (btl/ofi, btl/uct, vader's knem path). Both may be loaded
 * in one process: they are built with hidden visibility and export only the
 * component structure, so that neither binds the other's calls.
 *
 * rcache_mrnotify_component.c: MCA parameters, open (checks of the Open MPI
 * we run in and of the configuration), close, init.
 * rcache_mrnotify_module.c: the caches shared between modules and the
 * module functions.
 */
#ifndef MCA_RCACHE_MRNOTIFY_H
#define MCA_RCACHE_MRNOTIFY_H

#include "opal_config.h"

#include "opal/mca/rcache/rcache.h"

#include <mrnotify.h>

#include <stdbool.h>
#include <stdint.h>


#ifndef MRN_RCACHE_NAME
#define MRN_RCACHE_NAME mrnotify
#endif

#define MRN_STR_(x)         #x
#define MRN_STR(x)          MRN_STR_(x)
#define MRN_PASTE_(a, b, c) a##b##c
#define MRN_PASTE(a, b, c)  MRN_PASTE_(a, b, c)

/* The loader finds the component by this symbol: mca_rcache_<name>_component. */
#define mca_rcache_mrnotify_component MRN_PASTE(mca_rcache_, MRN_RCACHE_NAME, _component)
#define MRN_RCACHE_NAME_STR           MRN_STR(MRN_RCACHE_NAME)
#define MRN_IS_SHADOW                 (sizeof(MRN_RCACHE_NAME_STR) == sizeof("grdma"))
/* How messages name this component: "rcache mrnotify" or "rcache grdma (mrnotify)". */
#define MRN_LOG_PREFIX                                                                             \
	(MRN_IS_SHADOW ? "rcache " MRN_RCACHE_NAME_STR " (mrnotify)" : "rcache mrnotify")

/* The help file (help-rcache-mrnotify.txt) of opal_show_help(). */
#define MRN_HELP_FILE "help-rcache-mrnotify.txt"
/* Where make install puts the grdma-named build (messages name it). */
#ifndef MRN_SHADOW_DIR
#define MRN_SHADOW_DIR "<libdir>/mrnotify/grdma-shadow"
#endif

BEGIN_C_DECLS

/*
 * Open MPI 4.1 / 5.0 differences, the only ones this component meets: 5.0
 * renamed the CUDA flag after its accelerator framework (same bit, 0x0008).
 * Device memory is registered uncached either way: libmrnotify watches host
 * mappings.
 */
#if OPAL_MAJOR_VERSION >= 5
#define MRN_RCACHE_FLAGS_DEVICE_MEM MCA_RCACHE_FLAGS_ACCELERATOR_MEM
#else
#define MRN_RCACHE_FLAGS_DEVICE_MEM MCA_RCACHE_FLAGS_CUDA_GPU_MEM
#endif

/* Registrations made outside the cache (BYPASS, PERSIST, INVALID). */
#define MRN_REG_FLAG_UNCACHED MCA_RCACHE_FLAGS_MOD_RESV0

typedef struct mca_rcache_mrnotify_component {
	mca_rcache_base_component_t super;

	/*
	 * MCA parameter storage (owned by the MCA variable system). monitor,
	 * fork and the limits are strings, parsed by libmrnotify's parsers
	 * (check_params): MCA's enums keep their default on an unknown name,
	 * and its integers take what they can parse of "12Q" or "-1".
	 */
	char *monitor_text;
	char *fork_text;
	char *max_pinned_text;
	char *max_entries_text;
	bool print_stats;
	int verbose;
	char *serve_grdma_text;
	/*
	 * Take over Open MPI's grdma (grdma_takeover.c): always, or (kernel)
	 * only in processes where /dev/mrnotify is usable, decided on each
	 * node when the job starts.
	 */
	bool serve_grdma;
	bool serve_grdma_if_kernel;

	/* Their indices, to tell values set by the user from defaults. */
	int var_monitor, var_max_pinned, var_max_entries, var_fork, var_print_stats;

	/* The parsed values (meaningful when the parameter is set). */
	mrn_monitor_t monitor;
	mrn_fork_policy_t fork_kind;
	uint64_t max_pinned;
	uint64_t max_entries;
	/* A parameter had a bad value: no cache is created. */
	bool config_error;
} mca_rcache_mrnotify_component_t;

OPAL_DECLSPEC extern mca_rcache_mrnotify_component_t mca_rcache_mrnotify_component;

/*
 * One libmrnotify cache, shared by every module that names the same cache
 * and registers through the same callbacks and context.
 */
typedef struct mca_rcache_mrnotify_shared {
	struct mca_rcache_mrnotify_shared *next;
	char *name; /* copied: callers free theirs after init */
	int refs;   /* modules using it (list lock) */
	void *reg_data;
	size_t sizeof_reg;
	int (*register_mem)(void *reg_data, void *base, size_t size,
			    mca_rcache_base_registration_t *reg);
	int (*deregister_mem)(void *reg_data, mca_rcache_base_registration_t *reg);
	mrn_cache_t *cache;
	mrn_monitor_t monitor;                      /* what the library uses */
	bool keep_idle;                             /* leave_pinned as decided at creation */
	bool hooks;                                 /* fed by Open MPI's memory hooks */
	bool print_stats;                           /* at destruction */
	uint64_t uncached_live; /* atomics */
	uint64_t uncached_total;
} mca_rcache_mrnotify_shared_t;

typedef struct mca_rcache_mrnotify_module {
	mca_rcache_base_module_t super;
	mca_rcache_base_resources_t resources; /* cache_name points to name */
	char *name;
	mca_rcache_mrnotify_shared_t *shared;
} mca_rcache_mrnotify_module_t;

/* rcache_mrnotify_component.c: our parameters' names, NULL-terminated. */
extern const char *const mca_rcache_mrnotify_param_names[];

/*
 * grdma_takeover.c, at open (the mrnotify build): with serve_grdma, Open
 * MPI's grdma creates its caches with ours (init); with our parameters set
 * for grdma but not serve_grdma, it warns that the stock cache is in use.
 * restore, at close, undoes either.
 */
void mca_rcache_mrnotify_grdma_takeover(mca_rcache_base_component_init_fn_t ours);
void mca_rcache_mrnotify_grdma_restore(void);

/* rcache_mrnotify_module.c */
mca_rcache_base_module_t *mca_rcache_mrnotify_module_create(
	const mca_rcache_base_resources_t *resources);
void mca_rcache_mrnotify_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mca_rcache_mrnotify_not_created(const char *cache_name, const char *why);
bool mca_rcache_mrnotify_param_set(int var);

END_C_DECLS

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify-ucx: makes mrnotify.ko the source of UCX's memory events, so
 * that UCX's registration caches stay correct without UCM's glibc patching
 * (which misses raw system calls, static binaries and several language
 * runtimes, and which, once turned off, silently turns UCX's caches off).
 *
 * This is the backend: what the preloaded libmrnotify-ucx.so (shim.c,
 * which links nothing but libc) loads, with RTLD_LOCAL, into a process that
 * runs the UCX release it was built for (1.13, 1.17 to 1.23; the running
 * UCX's major.minor must be the headers'), and only there. This file is its
 * life: settings, activation, attaching and exit (plugin.h lists the other
 * files):
 *
 *  - Attached, it only registers its settings and takes the place of the
 *    functions the shim lets it wrap (entry_list.h: MRN_UCX_WRAPPED): a
 *    process loaded UCX, but may never use it, and must not fail because
 *    of the plugin. It activates once, when the process first creates a UCP
 *    context (ucp_init_version), a registration cache, or opens an IB device
 *    (ibv_fork_init): it reads the settings, checks the running UCX, and
 *    once /dev/mrnotify is open and has passed a self-test, tells UCM that
 *    UCM_EVENT_VM_UNMAPPED is "external" (reported by us, not by hooks).
 *    Declaring it without a working source would leave the caches blind, so
 *    nothing is declared when the device cannot be used; with
 *    UCX_MRNOTIFY_ENABLE=yes creating a UCP context then fails instead.
 *  - It wraps ucs_rcache_create(): every cache that listens to
 *    VM_UNMAPPED gets our registration callbacks around its own, which ask
 *    the kernel to watch each region's range (the region's, not the user
 *    buffer's: UCX merges and aligns regions) before UCX pins it, and stop
 *    watching when UCX deregisters it. A range is watched once however many
 *    caches hold it (UCP's cache and the IB domain's hold the same ranges).
 *  - The shim interposes ucs_rcache_get(). In UCX 1.13 every lookup of every cache
 *    (UCP's, the IB memory domain's, knem, xpmem, gdr_copy, rocm) is a call
 *    through the PLT to that function, so this is the one place to check the
 *    kernel's generation word: one load and compare. When it moved, the
 *    dirty list is drained and each dead range becomes ucm_vm_munmap(),
 *    which removes it from every cache before the lookup proceeds. On x86-64
 *    the wrapper is a few instructions of assembly that end in a jump and
 *    never touch the arguments, so that when the plugin is not active (say,
 *    another UCX, whose ucs_rcache_get has 7 arguments from 1.17 on) any
 *    signature passes through unchanged.
 *  - From UCX 1.14 on, UCP looks its own cache up inline (ucp_memh_get():
 *    ucs_rcache_lookup_unsafe()), and only misses call ucs_rcache_get(). The
 *    shim then also interposes UCP's public functions that can look up a
 *    registration (the tag, stream, active-message, RMA and atomic calls,
 *    ucp_mem_map, ucp_memh_pack, ucp_rkey_pack) and ucp_worker_progress(),
 *    where posted requests register their buffers later (rendezvous), and
 *    the flushes and closes that progress inside. Each is a trampoline
 *    (entry_x86_64.S) with the same compare, that drains before it
 *    jumps to UCX's function: the dead ranges become ucm_vm_munmap(), which
 *    queues them on UCP's cache (it asks for synchronous events), and an
 *    inline lookup with a queue pending misses and calls ucs_rcache_get(),
 *    which applies the queue first. UCT's caches that listen to VM_UNMAPPED
 *    (the IB domain's and knem's, in 1.14 and 1.15 only) still look up by
 *    calling ucs_rcache_get(); from 1.16 on UCP's is the only cache that
 *    listens (xpmem, gdr_copy and rocm never did), and a program that
 *    registers through UCT's API gets no cache that unmaps reach
 *    (docs/ucx.md). The entry points are listed in entry_list.h, which the
 *    build checks against the UCX headers (check-entries.sh).
 *  - It wraps ucm_test_external_events() so that callers that ask
 *    whether external VM_UNMAPPED events work (Open MPI with
 *    opal_common_ucx_opal_mem_hooks=1) get our self-test's answer instead of
 *    UCM's, which expects events synchronously inside munmap().
 *  - It wraps ibv_fork_init(): where the kernel keeps pinned pages with
 *    the parent across fork() (ibv_is_fork_initialized() says
 *    IBV_FORK_UNNEEDED, kernels >= 5.13), it does not turn on rdma-core's
 *    madvise(MADV_DONTFORK) of every registered range, as rdma-core >= 52
 *    does not either. That madvise splits the mapping, which splits a huge
 *    page's PMD, which the kernel reports as a change of the whole 2 MiB:
 *    every registration on that huge page would be invalidated each time.
 *
 * Settings: UCX_MRNOTIFY_ENABLE=try|yes|no, UCX_MRNOTIFY_STATS=y|n, a
 * registered UCX configuration table (ucx_info -c shows them, UCX does not
 * call them unused).
 */
#define _GNU_SOURCE
#include "plugin.h"

#include <linux/mrnotify.h>
#include <ucs/config/parser.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mrn_ucx_globals mrn_ucx = {
	.once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};
const volatile uint64_t mrn_ucx_still;

static ucs_config_field_t mrn_ucx_config_table[] = {
	{"ENABLE", "try",
	 "Make the mrnotify kernel module (" MRN_DEVICE_PATH ") the source of UCX's\n"
	 "VM_UNMAPPED memory events, so that registration caches stay correct without\n"
	 "UCM's memory hooks: the event is declared external, and UCM installs no hook\n"
	 "for it. Decided in each process when it first creates a UCP context or a\n"
	 "registration cache, never at load.\n"
	 " try - use it when the device opens and passes a self-test, else leave UCX as it is\n"
	 "       (UCM's hooks as configured): safe to set on every node of a cluster\n"
	 " yes - the same, but make creating a UCP context fail when the device cannot be used\n"
	 " no  - do nothing",
	 ucs_offsetof(mrn_ucx_config_t, enable), UCS_CONFIG_TYPE_TERNARY},
	{"STATS", "n",
	 "Print the plugin's statistics (checks, drains, ranges invalidated, regions\n"
	 "watched) to stderr when the process exits.",
	 ucs_offsetof(mrn_ucx_config_t, stats), UCS_CONFIG_TYPE_BOOL},
	{"LOOKUP_HOOK", "y",
	 "Where the running UCX has an external validity hook in its registration\n"
	 "cache (ucs_rcache_set_external_validity: a patch proposed to UCX, see\n"
	 "ucx-plugin/upstream/), hand each cache the kernel's counter, so that every\n"
	 "lookup checks it. n: do not (the UCP entry-point checks remain).",
	 ucs_offsetof(mrn_ucx_config_t, lookup_hook), UCS_CONFIG_TYPE_BOOL},
	{NULL}};

UCS_CONFIG_DECLARE_TABLE(mrn_ucx_config_table, "mrnotify (kernel memory events)", "MRNOTIFY_",
			 mrn_ucx_config_t)

/*
 * Creating a UCP context is where the plugin activates, and where
 * UCX_MRNOTIFY_ENABLE=yes (or a bad setting) makes the program fail when
 * the kernel cannot be UCX's source of unmap events.
 */
ucs_status_t mrn_ucx_init_version(unsigned api_major_version, unsigned api_minor_version,
				  const ucp_params_t *params, const ucp_config_t *config,
				  ucp_context_h *context_p)
{
	mrn_ucx_activate();
	if (mrn_ucx_state() == MRN_UCX_STATE_REFUSED) {
		if (mrn_ucx.config_filled)
			ucs_error("mrnotify: UCX_MRNOTIFY_ENABLE=yes, but %s; no UCP context is "
				  "created "
				  "(UCX_MRNOTIFY_ENABLE=try runs UCX as configured instead)",
				  mrn_ucx.why);
		else
			ucs_error("mrnotify: %s", mrn_ucx.why);
		return mrn_ucx.refusal;
	}
	return mrn_ucx.real_init(api_major_version, api_minor_version, params, config, context_p);
}

static const char *mrn_ucx_enable_name(int v)
{
	return v == UCS_YES ? "yes" : v == UCS_NO ? "no" : "try";
}

/*
 * Cannot be used, for the reason in mrn_ucx.why. With ENABLE=yes UCP
 * contexts fail from now on (ucp_init_version says why, each time); with
 * try, UCX runs as configured and a message says why once, at the given
 * level (diag for a node without the device, which is what try is for).
 */
static mrn_ucx_state_t mrn_ucx_unusable(ucs_log_level_t level)
{
	if (mrn_ucx.config.enable == UCS_YES) {
		mrn_ucx.refusal = UCS_ERR_NO_DEVICE;
		return MRN_UCX_STATE_REFUSED;
	}
	ucs_log(level, "mrnotify: not used (UCX_MRNOTIFY_ENABLE=try): %s; UCX runs as configured",
		mrn_ucx.why);
	return MRN_UCX_STATE_INACTIVE;
}

static int mrn_ucx_version_ok(void)
{
	return mrn_ucx.version[0] == UCP_API_MAJOR && mrn_ucx.version[1] == UCP_API_MINOR;
}

/* Decides, once: from here on UCX relies on us for every unmap, or not. */
static mrn_ucx_state_t mrn_ucx_decide(void)
{
	const volatile uint64_t *gen;
	mrn_watch_set_t *set = NULL;
	const char *why = NULL;
	ucs_status_t status;
	int rc;

	/* Parsing also marks our variables used (UCX warns at ucp_init). */
#if MRN_UCX_CONFIG_TABLE_HANDLE
	status = ucs_config_parser_fill_opts(&mrn_ucx.config,
					     UCS_CONFIG_GET_TABLE(mrn_ucx_config_table), "UCX_", 0);
#else
	status = ucs_config_parser_fill_opts(&mrn_ucx.config, mrn_ucx_config_table, "UCX_",
					     "MRNOTIFY_", 0);
#endif
	if (status != UCS_OK) {
		/* Nothing to go by: fail UCP contexts, as yes would. */
		snprintf(mrn_ucx.why, sizeof(mrn_ucx.why),
			 "a UCX_MRNOTIFY_* setting is not valid (%s); see ucx_info -c -f",
			 ucs_status_string(status));
		mrn_ucx.refusal = UCS_ERR_INVALID_PARAM;
		return MRN_UCX_STATE_REFUSED;
	}
	mrn_ucx.config_filled = 1;
	if (mrn_ucx.config.enable == UCS_NO)
		return MRN_UCX_STATE_OFF;
	if (!ucm_global_opts.enable_events) {
		/*
		 * UCX_MEM_EVENTS=n makes UCM refuse every event handler, ours
		 * to deliver or not, so UCX creates no registration cache at
		 * all: there would be nothing to feed.
		 */
		snprintf(
			mrn_ucx.why, sizeof(mrn_ucx.why),
			"UCX_MEM_EVENTS=n, with which UCX creates no registration caches (leave it "
			"at y and turn the hooks off with UCX_MEM_MMAP_HOOK_MODE=none instead)");
		return mrn_ucx_unusable(UCS_LOG_LEVEL_WARN);
	}
	rc = mrn_watch_set_open(0, &set);
	if (rc < 0) {
		const int err = access(MRN_DEVICE_PATH, F_OK) == 0 ? -rc : ENOENT;

		if (err == ENOENT)
			snprintf(mrn_ucx.why, sizeof(mrn_ucx.why),
				 "%s is missing (mrnotify.ko not loaded?)", MRN_DEVICE_PATH);
		else
			snprintf(mrn_ucx.why, sizeof(mrn_ucx.why), "%s cannot be opened: %s",
				 MRN_DEVICE_PATH, strerror(err));
		return mrn_ucx_unusable(UCS_LOG_LEVEL_DIAG);
	}
	gen = mrn_watch_set_generation(set);
	mrn_ucx_lock();
	mrn_ucx.set = set;
	mrn_ucx_follow(gen, __atomic_load_n(gen, __ATOMIC_ACQUIRE));
	mrn_ucx_unlock();
	rc = mrn_ucx_self_test(&why);
	if (rc < 0) {
		/* Another thread's lookup may be draining it (it moved). */
		mrn_ucx_lock();
		mrn_ucx_follow(&mrn_ucx_still, 0);
		mrn_ucx.set = NULL;
		mrn_ucx_unlock();
		mrn_watch_set_close(set);
		snprintf(mrn_ucx.why, sizeof(mrn_ucx.why), "%s failed its self-test: %s (%s)",
			 MRN_DEVICE_PATH, why, strerror(-rc));
		return mrn_ucx_unusable(UCS_LOG_LEVEL_WARN);
	}
	/* Only now: from here on UCX relies on us for every unmap. */
	ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
	__atomic_store_n(&mrn_ucx.hot->count_checks, mrn_ucx.config.stats, __ATOMIC_RELAXED);
	ucs_debug("mrnotify: %s is UCX's source of VM_UNMAPPED events", MRN_DEVICE_PATH);
	return MRN_UCX_STATE_ACTIVE;
}

static void mrn_ucx_decide_once(void)
{
	const mrn_ucx_state_t state = mrn_ucx_decide();

	__atomic_store_n(&mrn_ucx.state, state, __ATOMIC_RELEASE);
	ucs_debug("mrnotify: UCX_MRNOTIFY_ENABLE=%s: %s",
		  mrn_ucx.config_filled ? mrn_ucx_enable_name(mrn_ucx.config.enable) : "(invalid)",
		  state == MRN_UCX_STATE_ACTIVE ? "active" : "inactive");
}

/*
 * Called where UCX is about to need us (a UCP context, a cache, an IB
 * device). Threads that get here first wait for the decision.
 */
void mrn_ucx_activate(void)
{
	if (MRN_UCX_LIKELY(mrn_ucx_state() != MRN_UCX_STATE_NEW))
		return;
	pthread_once(&mrn_ucx.once, mrn_ucx_decide_once);
}

/* Where the backend stands in for UCX (shim.h). */
static const struct mrn_ucx_override mrn_ucx_overrides[] = {
	{"ucp_init_version", (void *)mrn_ucx_init_version},
	{"ucs_rcache_create", (void *)mrn_ucx_rcache_create},
	{"ucs_rcache_destroy", (void *)mrn_ucx_rcache_destroy},
	{"ucm_set_event_handler", (void *)mrn_ucx_set_event_handler},
	{"ucm_test_external_events", (void *)mrn_ucx_test_external_events},
	{"ibv_fork_init", (void *)mrn_ucx_fork_init},
	{NULL, NULL},
};

static const struct mrn_ucx_backend mrn_ucx_backend = {
	.abi = MRN_UCX_SHIM_ABI,
	.overrides = mrn_ucx_overrides,
	.slow = mrn_ucx_slow,
	.fork_prepare = mrn_ucx_fork_prepare,
	.fork_parent = mrn_ucx_fork_parent,
	.fork_child = mrn_ucx_fork_child,
};

/*
 * The shim, bound to the process's UCX, attaches us: UCX's functions come
 * from that UCX (never from the search path), and nothing of UCX is touched
 * but the configuration list.
 */
MRN_UCX_EXPORT const struct mrn_ucx_backend *mrn_ucx_backend_attach(const struct mrn_ucx_shim *shim)
{
	if (shim->abi != MRN_UCX_SHIM_ABI)
		return NULL;
	memcpy(mrn_ucx.version, shim->version, sizeof(mrn_ucx.version));
	/* The shim loads the backend of the running release; a copy moved by hand is refused. */
	if (!mrn_ucx_version_ok()) {
		fprintf(stderr,
			"libmrnotify-ucx: this backend was built for UCX %d.%d and the process runs "
			"UCX %u.%u.%u\n",
			UCP_API_MAJOR, UCP_API_MINOR, mrn_ucx.version[0], mrn_ucx.version[1],
			mrn_ucx.version[2]);
		return NULL;
	}
	*(void **)&mrn_ucx.real_create = shim->real("ucs_rcache_create");
	*(void **)&mrn_ucx.real_destroy = shim->real("ucs_rcache_destroy");
	*(void **)&mrn_ucx.real_test_external = shim->real("ucm_test_external_events");
	*(void **)&mrn_ucx.real_init = shim->real("ucp_init_version");
	*(void **)&mrn_ucx.real_set_handler = shim->real("ucm_set_event_handler");
	if (mrn_ucx.real_create == NULL || mrn_ucx.real_destroy == NULL ||
	    mrn_ucx.real_test_external == NULL || mrn_ucx.real_init == NULL ||
	    mrn_ucx.real_set_handler == NULL)
		return NULL;
	mrn_ucx_hook_resolve(shim->real);
	mrn_ucx.hot = shim->hot;

	/* Listed by ucx_info -c; read when the plugin activates, not here. */
	UCS_CONFIG_ADD_TABLE(mrn_ucx_config_table, &ucs_config_global_list);
	mrn_ucx.table_added = 1;
	return &mrn_ucx_backend;
}

__attribute__((destructor)) static void mrn_ucx_fini(void)
{
	const mrn_ucx_stats_t *s = &mrn_ucx.stats;
	const mrn_ucx_state_t state = mrn_ucx_state();

	/* Only processes that used UCX: a preloaded `ls` says nothing. */
	if (state != MRN_UCX_STATE_NEW && mrn_ucx.config_filled && mrn_ucx.config.stats) {
		/*
		 * One write(2): the ranks of a job share one stderr, and an
		 * unbuffered fprintf writes in pieces that interleave.
		 */
		char line[1024], hook[96] = "";
		int n;

		/* Only where UCX has the hook: stock UCX's line is unchanged. */
		if (mrn_ucx_hook_present())
			snprintf(hook, sizeof(hook),
				 " (through UCX's lookup hook %" PRIu64 ", its refreshes %" PRIu64 ")",
				 s->hooked, s->hook_refreshes);
		n = snprintf(
			line, sizeof(line),
			"libmrnotify-ucx: pid %d: %s, checks %" PRIu64 ", entry checks %" PRIu64
			", drains %" PRIu64 ", ranges invalidated %" PRIu64
			", regions watched %" PRIu64 " (of them sharing a watch %" PRIu64
			"; unwatched %" PRIu64 ", watches dirty at removal %" PRIu64
			"), watch failures %" PRIu64 ", rcaches %" PRIu64 "%s%s%s\n",
			(int)getpid(), state == MRN_UCX_STATE_ACTIVE ? "active" : "inactive",
			s->checks, s->entry_checks, s->drains, s->ranges, s->watched, s->shared,
			s->unwatched, s->unwatched_dirty, s->watch_failures, s->rcaches, hook,
			state == MRN_UCX_STATE_ACTIVE ? "" : "; ",
			state == MRN_UCX_STATE_ACTIVE ? ""
			: state == MRN_UCX_STATE_OFF  ? "UCX_MRNOTIFY_ENABLE=no"
						      : mrn_ucx.why);

		if (n > 0) {
			if ((size_t)n >= sizeof(line)) {
				n = sizeof(line) - 1;
				line[n - 1] = '\n';
			}
			if (write(STDERR_FILENO, line, (size_t)n) < 0) {
				/* Nothing to do about it at exit. */
			}
		}
	}
	if (mrn_ucx.table_added)
		UCS_CONFIG_REMOVE_TABLE(mrn_ucx_config_table);
	/* The watch stays open: UCX may still deregister through us at exit. */
}

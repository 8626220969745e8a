/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify-ucx.so: what a site preloads into every program (module load
 * mrnotify, mrnotify-ucx-run). It links nothing but libc, so that a process
 * that never loads UCX maps nothing of UCX, libmrnotify or libstdc++, runs
 * no constructor of theirs and keeps its signal dispositions; and it names
 * no UCX symbol, so that no UCX, or any UCX, lets every program start.
 *
 * It defines the UCX functions the plugin interposes (entry_list.h) as
 * trampolines (entry_<arch>.S) that jump through pointers filled in here.
 * It binds to the UCX the process itself loads: where UCX is in the process
 * at load, then; otherwise at the first call of any of those functions,
 * which comes after whatever loaded UCX (a program's own copy behind its
 * RUNPATH, a dlopen()ed MPI component's, RTLD_LOCAL or not). The copy is
 * found by soname among those already loaded (dlopen RTLD_NOLOAD), never
 * loaded from the search path, so the program keeps its own UCX.
 *
 * Binding reads that UCX's version and loads the backend built for that
 * release, <this directory>/ucx-MAJOR.MINOR/libmrnotify-ucx-backend.so
 * (the rest of ucx-plugin/), with RTLD_LOCAL: its libucs and libucm
 * resolve by soname to the copies already loaded. The backend then wraps
 * the functions of MRN_UCX_WRAPPED and points the checked ones' generation
 * at its kernel watch. Without a backend for the release (or with none that
 * loads), every pointer goes to UCX's own function: UCX runs as configured,
 * and the first process of a job says why in one line, unless
 * UCX_MRNOTIFY_ENABLE is try or no; with yes, creating a UCP context fails
 * instead, as it does where the device cannot be used.
 */
#define _GNU_SOURCE
#include "shim.h"
#include "entry_list.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The UCP entry points' checks; 0 builds the tests' negative control. */
#ifndef MRN_UCX_ENTRY_CHECKS
#define MRN_UCX_ENTRY_CHECKS 1
#endif

#define MRN_UCX_HIDDEN __attribute__((visibility("hidden")))

/* The word the hit paths compare while no backend watches: never moves. */
static const volatile uint64_t mrn_ucx_still;

MRN_UCX_HIDDEN mrn_ucx_hot_t mrn_ucx_hot = {
	.generation = &mrn_ucx_still,
};

/*
 * Where each trampoline jumps: until bound, its stub in the assembly,
 * which binds first.
 */
#define MRN_UCX_POINTER(name)                                                                      \
	extern char mrn_ucx_unbound_##name[] MRN_UCX_HIDDEN;                                       \
	MRN_UCX_HIDDEN void *mrn_ucx_real_##name = mrn_ucx_unbound_##name;
MRN_UCX_POINTER(ucs_rcache_get)
MRN_UCX_WRAPPED(MRN_UCX_POINTER)
#if MRN_UCX_ENTRY_CHECKS
MRN_UCX_ENTRIES(MRN_UCX_POINTER)
#endif

static const struct mrn_ucx_slot {
	const char *name;
	void **real;
	void *unbound;
} mrn_ucx_slots[] = {
#define MRN_UCX_SLOT(name) {#name, &mrn_ucx_real_##name, mrn_ucx_unbound_##name},
	MRN_UCX_SLOT(ucs_rcache_get) MRN_UCX_WRAPPED(MRN_UCX_SLOT)
#if MRN_UCX_ENTRY_CHECKS
		MRN_UCX_ENTRIES(MRN_UCX_SLOT)
#endif
};
#define MRN_UCX_NSLOTS (sizeof(mrn_ucx_slots) / sizeof(mrn_ucx_slots[0]))

/*
 * Guarded by lock: everything but backend, which the slow path reads
 * without it (stored once, with release, before the backend can move the
 * generation).
 */
static struct {
	pthread_mutex_t lock;
	int bound;           /* to the process's UCX: for good */
	void *ucp, *ucs, *ucm; /* its libraries (RTLD_NOLOAD handles) */
	const struct mrn_ucx_backend *backend;
	char why[512]; /* no backend: the reason */
} mrn_ucx_shim = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* MRNOTIFY_UCX_PROBE=version: the probe's line says it all. */
static int mrn_ucx_probing;

/* This thread is binding: a call that comes back here resolves by name only. */
static __thread int mrn_ucx_binding;

/*
 * The library of that soname if the process has loaded it, never loading
 * it. The reference this takes is kept: the pointers into that UCX stay
 * valid if the program dlclose()s it.
 */
static void *mrn_ucx_loaded(const char *soname)
{
	return dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
}

/*
 * NAME in the process's own UCX (or rdma-core): the libraries bound to
 * first, then whatever follows this object in the global scope.
 */
static void *mrn_ucx_find(const char *name)
{
	void *const handles[] = {mrn_ucx_shim.ucp, mrn_ucx_shim.ucs, mrn_ucx_shim.ucm};
	void *p = NULL;

	for (size_t i = 0; p == NULL && i < sizeof(handles) / sizeof(handles[0]); i++)
		if (handles[i] != NULL)
			p = dlsym(handles[i], name);
	if (p == NULL && strcmp(name, "ibv_fork_init") == 0) {
		/* UCX's IB module loads libibverbs privately. */
		void *verbs = mrn_ucx_loaded("libibverbs.so.1");

		if (verbs != NULL)
			p = dlsym(verbs, name);
	}
	if (p == NULL)
		p = dlsym(RTLD_NEXT, name);
	return p;
}

/* The directory a loaded library's file is in (DIR, of SIZE). */
static int mrn_ucx_dir_of(void *handle, char *dir, size_t size)
{
	struct link_map *map = NULL;
	char *slash;

	if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL || map->l_name == NULL ||
	    (size_t)snprintf(dir, size, "%s", map->l_name) >= size)
		return -1;
	slash = strrchr(dir, '/');
	if (slash == NULL)
		return -1;
	*slash = '\0';
	return 0;
}

/* What the backend is handed; the version is the running UCX's, read at binding. */
static struct mrn_ucx_shim mrn_ucx_iface = {
	.abi = MRN_UCX_SHIM_ABI,
	.hot = &mrn_ucx_hot,
	.real = mrn_ucx_find,
};

/*
 * The running UCX's version: libucp's, loaded beside the process's libucs
 * when the process uses UCT alone (its libucp is then the same release).
 */
static int mrn_ucx_read_version(void)
{
	void (*get)(unsigned *, unsigned *, unsigned *) = NULL;
	char path[PATH_MAX];

	if (mrn_ucx_shim.ucp == NULL && mrn_ucx_dir_of(mrn_ucx_shim.ucs, path, sizeof(path)) == 0 &&
	    strlen(path) + sizeof("/libucp.so.0") <= sizeof(path)) {
		strcat(path, "/libucp.so.0");
		mrn_ucx_shim.ucp = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	}
	if (mrn_ucx_shim.ucp != NULL)
		*(void **)&get = dlsym(mrn_ucx_shim.ucp, "ucp_get_version");
	if (get == NULL)
		return -1;
	get(&mrn_ucx_iface.version[0], &mrn_ucx_iface.version[1], &mrn_ucx_iface.version[2]);
	return 0;
}

/* Where the backends are: beside this library, unless built in (tests). */
static int mrn_ucx_backend_dir(char *dir, size_t size)
{
#ifdef MRN_UCX_BACKEND_DIR
	return (size_t)snprintf(dir, size, "%s", MRN_UCX_BACKEND_DIR) < size ? 0 : -1;
#else
	Dl_info info;
	char *slash;

	if (dladdr((void *)&mrn_ucx_shim, &info) == 0 || info.dli_fname == NULL ||
	    (size_t)snprintf(dir, size, "%s", info.dli_fname) >= size)
		return -1;
	slash = strrchr(dir, '/');
	if (slash == NULL)
		return (size_t)snprintf(dir, size, ".") < size ? 0 : -1;
	*slash = '\0';
	return 0;
#endif
}

/* The releases that have a backend in DIR ("1.13 1.18"), for messages. */
static void mrn_ucx_backends_in(const char *dir, char *list, size_t size)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	list[0] = '\0';
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		char path[PATH_MAX];

		if (strncmp(e->d_name, "ucx-", 4) != 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s/%s", dir, e->d_name,
				     MRN_UCX_BACKEND_NAME) >= sizeof(path) ||
		    access(path, R_OK) != 0)
			continue;
		n += (size_t)snprintf(list + n, n < size ? size - n : 0, "%s%s", n ? " " : "",
				      e->d_name + 4);
		if (n >= size) {
			list[size - 1] = '\0';
			break;
		}
	}
	closedir(d);
}

static int mrn_ucx_says(const char *value, const char *const *words)
{
	for (; *words != NULL; words++)
		if (strcasecmp(value, *words) == 0)
			return 1;
	return 0;
}

/*
 * The process that speaks for its job: rank 0 under any launcher that
 * says, and any process that is not a rank.
 */
static int mrn_ucx_first_of_job(void)
{
	static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
					    "SLURM_PROCID", "PALS_RANKID"};

	for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
		const char *v = getenv(ranks[i]);

		if (v != NULL && *v != '\0')
			return strcmp(v, "0") == 0;
	}
	return 1;
}

/* UCX_MRNOTIFY_ENABLE, read raw (the backend parses it as UCX does). */
static int mrn_ucx_enable_is(const char *const *words)
{
	const char *enable = getenv("UCX_MRNOTIFY_ENABLE");

	return enable != NULL && mrn_ucx_says(enable, words);
}

static const char *const mrn_ucx_yes[] = {"yes", "y", "1", "on", "true", NULL};

/* One write(2): the ranks of a job share one stderr. */
static void mrn_ucx_say(const char *format, const char *why)
{
	char line[sizeof(mrn_ucx_shim.why) + 160];
	int n = snprintf(line, sizeof(line), format, why);

	if (n > 0 &&
	    write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0) {
		/* Nothing to do about it. */
	}
}

/* No backend serves this process: one line per job, unless told try or no. */
static void mrn_ucx_say_not_used(void)
{
	static const char *const quiet[] = {"try", "no", "n", "0", "off", "false", NULL};

	if (mrn_ucx_enable_is(quiet) || mrn_ucx_enable_is(mrn_ucx_yes) || !mrn_ucx_first_of_job() ||
	    mrn_ucx_probing)
		return;
	mrn_ucx_say("libmrnotify-ucx: not used: %s; UCX runs as configured\n", mrn_ucx_shim.why);
}

/*
 * ucp_init_version() where no backend serves the process and
 * UCX_MRNOTIFY_ENABLE=yes: every UCX release returns a ucs_status_t, and
 * none of the arguments is read.
 */
static signed char mrn_ucx_refuse_init(void)
{
	mrn_ucx_say("libmrnotify-ucx: UCX_MRNOTIFY_ENABLE=yes, but %s; no UCP context is created "
		    "(UCX_MRNOTIFY_ENABLE=try runs UCX as configured instead)\n",
		    mrn_ucx_shim.why);
	return -22; /* UCS_ERR_UNSUPPORTED */
}


/* The backend for the running UCX, or NULL with the reason in why. */
static const struct mrn_ucx_backend *mrn_ucx_load_backend(void)
{
	const unsigned *v = mrn_ucx_iface.version;
	char dir[PATH_MAX], path[PATH_MAX], have[256];
	const struct mrn_ucx_backend *b;
	mrn_ucx_attach_fn attach;
	void *h;

	if (mrn_ucx_backend_dir(dir, sizeof(dir)) != 0 ||
	    (size_t)snprintf(path, sizeof(path), "%s/ucx-%u.%u/%s", dir, v[0], v[1],
			     MRN_UCX_BACKEND_NAME) >= sizeof(path)) {
		snprintf(mrn_ucx_shim.why, sizeof(mrn_ucx_shim.why),
			 "cannot tell where its backends are");
		return NULL;
	}
	if (access(path, R_OK) != 0) {
		mrn_ucx_backends_in(dir, have, sizeof(have));
		snprintf(mrn_ucx_shim.why, sizeof(mrn_ucx_shim.why),
			 "this process runs UCX %u.%u.%u, for which it has no build (%.256s has: %.128s)",
			 v[0], v[1], v[2], dir, have[0] ? have : "none");
		return NULL;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(mrn_ucx_shim.why, sizeof(mrn_ucx_shim.why), "%s", dlerror());
		return NULL;
	}
	*(void **)&attach = dlsym(h, MRN_UCX_BACKEND_ATTACH);
	b = attach != NULL ? attach(&mrn_ucx_iface) : NULL;
	if (b == NULL || b->abi != MRN_UCX_SHIM_ABI) {
		/* Left loaded: it may have registered something with UCX. */
		snprintf(mrn_ucx_shim.why, sizeof(mrn_ucx_shim.why), "%.400s did not attach", path);
		return NULL;
	}
	return b;
}

static void *mrn_ucx_override_of(const struct mrn_ucx_backend *b, const char *name)
{
	for (const struct mrn_ucx_override *o = b != NULL ? b->overrides : NULL;
	     o != NULL && o->name != NULL; o++)
		if (strcmp(o->name, name) == 0)
			return o->fn;
	return NULL;
}

/*
 * With the lock held: bind to the UCX in the process, if there is one yet.
 * Every pointer gets the backend's function or UCX's; one whose function
 * is nowhere stays at its stub, which looks again when it is called.
 */
static void mrn_ucx_bind_locked(void)
{
	const struct mrn_ucx_backend *b = NULL;

	if (mrn_ucx_shim.bound || mrn_ucx_binding)
		return;
	mrn_ucx_shim.ucs = mrn_ucx_loaded("libucs.so.0");
	if (mrn_ucx_shim.ucs == NULL)
		return;
	mrn_ucx_binding = 1;
	mrn_ucx_shim.ucp = mrn_ucx_loaded("libucp.so.0");
	mrn_ucx_shim.ucm = mrn_ucx_loaded("libucm.so.0");
	if (mrn_ucx_read_version() != 0)
		snprintf(mrn_ucx_shim.why, sizeof(mrn_ucx_shim.why),
			 "the process's UCX does not say its version (no libucp.so.0 beside its "
			 "libucs)");
	else
		b = mrn_ucx_load_backend();
	for (size_t i = 0; i < MRN_UCX_NSLOTS; i++) {
		const struct mrn_ucx_slot *s = &mrn_ucx_slots[i];
		void *p = mrn_ucx_override_of(b, s->name);

		if (p == NULL)
			p = mrn_ucx_find(s->name);
		if (p != NULL)
			__atomic_store_n(s->real, p, __ATOMIC_RELEASE);
	}
	if (b == NULL && mrn_ucx_enable_is(mrn_ucx_yes))
		__atomic_store_n(&mrn_ucx_real_ucp_init_version, (void *)mrn_ucx_refuse_init,
				 __ATOMIC_RELEASE);
	__atomic_store_n(&mrn_ucx_shim.backend, b, __ATOMIC_RELEASE);
	mrn_ucx_shim.bound = 1;
	mrn_ucx_binding = 0;
	if (b == NULL)
		mrn_ucx_say_not_used();
}

static void mrn_ucx_bind(void)
{
	pthread_mutex_lock(&mrn_ucx_shim.lock);
	mrn_ucx_bind_locked();
	pthread_mutex_unlock(&mrn_ucx_shim.lock);
}

/*
 * From a stub (entry_<arch>.S), with the caller's arguments saved: the
 * pointer REAL must lead somewhere before the stub jumps through it.
 */
MRN_UCX_HIDDEN __attribute__((used, noinline)) void mrn_ucx_bind_call(void **real)
{
	const struct mrn_ucx_slot *s = NULL;

	pthread_mutex_lock(&mrn_ucx_shim.lock);
	mrn_ucx_bind_locked();
	for (size_t i = 0; i < MRN_UCX_NSLOTS; i++)
		if (mrn_ucx_slots[i].real == real)
			s = &mrn_ucx_slots[i];
	if (s != NULL && *real == s->unbound) {
		/* No UCX bound (yet): the next definition, as without us. */
		void *p = mrn_ucx_find(s->name);

		if (p == NULL) {
			pthread_mutex_unlock(&mrn_ucx_shim.lock);
			fprintf(stderr,
				"libmrnotify-ucx: the program calls %s, which no library in the "
				"process defines\n",
				s->name);
			abort();
		}
		__atomic_store_n(real, p, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mrn_ucx_shim.lock);
}

/* From a checked function's slow path: only a backend moves the generation. */
MRN_UCX_HIDDEN __attribute__((used, noinline)) void mrn_ucx_entry_slow(int kind)
{
	const struct mrn_ucx_backend *b = __atomic_load_n(&mrn_ucx_shim.backend, __ATOMIC_ACQUIRE);

	if (b != NULL)
		b->slow(kind);
}

/*
 * fork(): registered at load, before UCX can register its own (prepare
 * handlers run in the reverse order, so the backend's runs after UCX's has
 * purged idle regions through it); nothing may be binding in the child.
 */
static void mrn_ucx_fork_prepare(void)
{
	const struct mrn_ucx_backend *b;

	pthread_mutex_lock(&mrn_ucx_shim.lock);
	b = mrn_ucx_shim.backend;
	if (b != NULL)
		b->fork_prepare();
}

static void mrn_ucx_fork_parent(void)
{
	const struct mrn_ucx_backend *b = mrn_ucx_shim.backend;

	if (b != NULL)
		b->fork_parent();
	pthread_mutex_unlock(&mrn_ucx_shim.lock);
}

static void mrn_ucx_fork_child(void)
{
	const struct mrn_ucx_backend *b = mrn_ucx_shim.backend;

	if (b != NULL)
		b->fork_child();
	pthread_mutex_unlock(&mrn_ucx_shim.lock);
}

/*
 * MRNOTIFY_UCX_PROBE=version: which releases have a backend here, which UCX
 * the process runs (where it loaded none, the one a program linked against
 * libucp.so.0 gets from the search path), and whether it is served.
 */
static void mrn_ucx_probe(void)
{
	char dir[PATH_MAX], have[256] = "";

	if (!mrn_ucx_shim.bound && dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL) != NULL)
		mrn_ucx_bind();
	if (mrn_ucx_backend_dir(dir, sizeof(dir)) == 0)
		mrn_ucx_backends_in(dir, have, sizeof(have));
	if (!mrn_ucx_shim.bound || mrn_ucx_shim.ucp == NULL)
		fprintf(stderr, "libmrnotify-ucx: built for UCX %s, runs no UCX: unsupported\n",
			have[0] ? have : "(none)");
	else
		fprintf(stderr, "libmrnotify-ucx: built for UCX %s, runs UCX %u.%u.%u: %s%s%s\n",
			have[0] ? have : "(none)", mrn_ucx_iface.version[0],
			mrn_ucx_iface.version[1], mrn_ucx_iface.version[2],
			mrn_ucx_shim.backend != NULL ? "supported" : "unsupported",
			mrn_ucx_shim.backend != NULL ? "" : ": ",
			mrn_ucx_shim.backend != NULL ? "" : mrn_ucx_shim.why);
}

__attribute__((constructor)) static void mrn_ucx_shim_init(void)
{
	const char *probe = getenv("MRNOTIFY_UCX_PROBE");

	mrn_ucx_probing = probe != NULL && strcmp(probe, "version") == 0;
	pthread_atfork(mrn_ucx_fork_prepare, mrn_ucx_fork_parent, mrn_ucx_fork_child);
	/*
	 * UCX linked into the program (already initialized: the preload's
	 * constructor runs after the program's libraries'): bind now, so that
	 * its configuration listing (ucx_info -c) has the plugin's settings.
	 */
	if (mrn_ucx_loaded("libucs.so.0") != NULL)
		mrn_ucx_bind();
	if (mrn_ucx_probing)
		mrn_ucx_probe();
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libmrnotify-ofi-preload.so: what mrnotify-ofi-run(1) preloads. It stands
 * in for the libfabric calls that come before any registration cache can
 * exist (fi_getinfo, fi_fabric, fi_fabric2, fi_open), imports mrnotify's
 * monitor at the first of them (mrn_ofi_import, in libmrnotify), and hands
 * every call to libfabric unchanged.
 *
 * It links nothing but libc: a process that never calls libfabric loads
 * neither libfabric nor libmrnotify, and runs as if nothing was preloaded.
 * Open MPI's own import (opal/common/ofi, with its memory hooks active) comes
 * after its first fi_getinfo(), where ours is made: Open MPI's then finds the
 * place taken and goes without (it logs that at verbose level only).
 *
 * The definitions carry libfabric's symbol versions (libmrnotify-ofi-
 * preload.map), so that binaries linked against libfabric bind to them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fi_info;
struct fi_fabric_attr;
struct fid_fabric;
struct fid;

#ifndef MRN_OFI_LIBDIR
#define MRN_OFI_LIBDIR ""
#endif
#define MRN_OFI_SONAME "libmrnotify.so.0"

/* This thread is inside the import (whose fi_open comes back here). */
static __thread int importing;
static pthread_once_t import_once = PTHREAD_ONCE_INIT;

static void *open_library(void)
{
	char path[4096];
	void *h;

	/* The installed one first; in a build tree, the search path. */
	if (MRN_OFI_LIBDIR[0] &&
	    snprintf(path, sizeof(path), "%s/%s", MRN_OFI_LIBDIR, MRN_OFI_SONAME) <
		    (int)sizeof(path) &&
	    (h = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
		return h;
	return dlopen(MRN_OFI_SONAME, RTLD_NOW | RTLD_LOCAL);
}

static void import_monitor(void)
{
	const char *off = getenv("MRNOTIFY_OFI");
	int (*import)(void);
	void *h;

	if (off && strcmp(off, "0") == 0)
		return;
	h = open_library();
	if (!h) {
		fprintf(stderr,
			"libmrnotify-ofi-preload: %s; libfabric keeps its own memory monitor\n",
			dlerror());
		return;
	}
	*(void **)&import = dlsym(h, "mrn_ofi_import");
	if (import)
		(void)import(); /* it says why when it cannot */
}

static void before_libfabric(void)
{
	if (importing)
		return;
	importing = 1;
	pthread_once(&import_once, import_monitor);
	importing = 0;
}

/*
 * The next definition of name@version: libfabric's. RTLD_NEXT searches the
 * global scope only; a libfabric loaded with RTLD_LOCAL (under a Python
 * extension, or NCCL's plugin) is not there, yet its callers' references,
 * and libfabric's own (a layered provider's fi_getinfo), still bind here.
 * Then the copy already loaded is asked by name.
 */
static void *next(const char *name, const char *version)
{
	void *f = dlvsym(RTLD_NEXT, name, version);

	if (!f) {
		void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD);

		if (h) {
			f = dlvsym(h, name, version);
			dlclose(h); /* it stays: someone else loaded it */
		}
	}
	if (!f)
		fprintf(stderr, "libmrnotify-ofi-preload: %s@%s not found in libfabric\n", name,
			version);
	return f;
}

/*
 * FORWARD(ret, cname, name, version, params, args): cname stands in for
 * name@version and hands the call to libfabric's name@version.
 */
#define FORWARD(ret, cname, name, version, params, args)                                           \
	ret cname params;                                                                          \
	ret cname params                                                                           \
	{                                                                                          \
		static ret(*real) params;                                                          \
		ret(*f) params = __atomic_load_n(&real, __ATOMIC_ACQUIRE);                         \
		before_libfabric();                                                                \
		if (!f) {                                                                          \
			*(void **)&f = next(name, version);                                        \
			if (!f)                                                                    \
				return -38; /* -FI_ENOSYS */                                       \
			__atomic_store_n(&real, f, __ATOMIC_RELEASE);                              \
		}                                                                                  \
		return f args;                                                                     \
	}

#define GETINFO_PARAMS                                                                             \
	(uint32_t version, const char *node, const char *service, uint64_t flags,                  \
	 const struct fi_info *hints, struct fi_info **info)
#define GETINFO_ARGS (version, node, service, flags, hints, info)

/* Binaries built against libfabric 1.x bind fi_getinfo@FABRIC_1.3, those
 * built against 2.x fi_getinfo@FABRIC_1.8 (its struct fi_info is larger). */
FORWARD(int, getinfo_1_3, "fi_getinfo", "FABRIC_1.3", GETINFO_PARAMS, GETINFO_ARGS)
__asm__(".symver getinfo_1_3, fi_getinfo@FABRIC_1.3");
FORWARD(int, getinfo_1_8, "fi_getinfo", "FABRIC_1.8", GETINFO_PARAMS, GETINFO_ARGS)
__asm__(".symver getinfo_1_8, fi_getinfo@@FABRIC_1.8");
FORWARD(int, fi_fabric, "fi_fabric", "FABRIC_1.1",
	(struct fi_fabric_attr * attr, struct fid_fabric **fabric, void *context),
	(attr, fabric, context))
FORWARD(int, fi_fabric2, "fi_fabric2", "FABRIC_1.8",
	(struct fi_info * info, struct fid_fabric **fabric, uint64_t flags, void *context),
	(info, fabric, flags, context))
FORWARD(int, fi_open, "fi_open", "FABRIC_1.5",
	(uint32_t version, const char *name, void *attr, size_t attr_len, uint64_t flags,
	 struct fid **fid, void *context),
	(version, name, attr, attr_len, flags, fid, context))

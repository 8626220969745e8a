/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The check on every lookup. The hit paths themselves are assembly
 * (entry_x86_64.S, entry_aarch64.S: the same paths, tested without UCX by
 * tests/ucx/test_trampolines.c): ucs_rcache_get(), every lookup of every cache in UCX
 * 1.13 and every miss later, and from 1.14 on a trampoline for each UCP
 * entry point in entry_list.h. Here: what they read and jump through.
 */
#include "plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#if !defined(__x86_64__) && !defined(__aarch64__)
#define MRN_UCX_GET_IN_C 1
#if MRN_UCX_ENTRY_CHECKS
#error "libmrnotify-ucx: the UCP entry-point checks (UCX >= 1.14) have assembly for x86-64 and aarch64 only"
#endif
#endif

__attribute__((visibility("hidden"))) mrn_ucx_hot_t mrn_ucx_hot = {
	.generation = &mrn_ucx_still,
};

#ifdef MRN_UCX_GET_IN_C
/* Elsewhere, C: signature-agnostic only as long as this compiles to a tail jump. */
MRN_UCX_EXPORT ucs_status_t ucs_rcache_get(MRN_UCX_GET_PARAMS)
{
	if (MRN_UCX_UNLIKELY(mrn_ucx_hot.count_checks))
		return mrn_ucx_get_counted(MRN_UCX_GET_ARGS);
	if (MRN_UCX_UNLIKELY(mrn_ucx_moved()))
		return mrn_ucx_get_after_drain(MRN_UCX_GET_ARGS);
	return ((mrn_rcache_get_fn)mrn_ucx_hot.real_get)(MRN_UCX_GET_ARGS);
}
#endif

#if MRN_UCX_ENTRY_CHECKS
/* UCX's functions; the trampolines jump through them. */
#define MRN_UCX_ENTRY_REAL(name) __attribute__((visibility("hidden"))) void *mrn_ucx_real_##name;
MRN_UCX_ENTRIES(MRN_UCX_ENTRY_REAL)

static const struct mrn_ucx_entry {
	const char *name;
	void **real;
} mrn_ucx_entries[] = {
#define MRN_UCX_ENTRY_ROW(name) {#name, &mrn_ucx_real_##name},
	MRN_UCX_ENTRIES(MRN_UCX_ENTRY_ROW)};

/*
 * A name this plugin exports that the running UCX lacks: the dynamic linker
 * would have refused the program; say so instead of jumping to nothing.
 */
MRN_UCX_ASM_TARGET void mrn_ucx_entry_missing(void)
{
	fprintf(stderr,
		"libmrnotify-ucx: the program calls a UCP function that this UCX "
		"(%u.%u.%u) does not have\n",
		mrn_ucx.version[0], mrn_ucx.version[1], mrn_ucx.version[2]);
	abort();
}

void mrn_ucx_entries_resolve(void)
{
	for (size_t i = 0; i < sizeof(mrn_ucx_entries) / sizeof(mrn_ucx_entries[0]); i++) {
		void *p = dlsym(RTLD_NEXT, mrn_ucx_entries[i].name);

		*mrn_ucx_entries[i].real = p != NULL ? p : (void *)mrn_ucx_entry_missing;
	}
}
#else
void mrn_ucx_entries_resolve(void) {}
#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the preloaded object (shim.c, no UCX headers, no UCX library) and
 * the backend it loads for the running UCX (the other files, built against
 * one UCX release) hand each other. Plain C types only: the shim is built
 * once for every UCX.
 */
#ifndef MRN_UCX_SHIM_H
#define MRN_UCX_SHIM_H

#include "entry_hot.h"

/* Moves when either side's half of this interface changes. */
#define MRN_UCX_SHIM_ABI 1

/* <the shim's directory>/ucx-MAJOR.MINOR/ holds the backend for that UCX. */
#define MRN_UCX_BACKEND_NAME   "libmrnotify-ucx-backend.so"
#define MRN_UCX_BACKEND_ATTACH "mrn_ucx_backend_attach"

struct mrn_ucx_shim {
	unsigned abi;
	/* Read by the hit paths; the backend points it at its watch's word. */
	mrn_ucx_hot_t *hot;
	/* The UCX this process runs (the one the shim bound to). */
	unsigned version[3];
	/* A function of the process's own UCX (or rdma-core), by name; NULL if none. */
	void *(*real)(const char *name);
};

/* The function that stands in for NAME (one of MRN_UCX_WRAPPED). */
struct mrn_ucx_override {
	const char *name;
	void *fn;
};

struct mrn_ucx_backend {
	unsigned abi;
	const struct mrn_ucx_override *overrides; /* ends with a NULL name */
	/* From the checked functions' slow path (MRN_UCX_SLOW_*). */
	void (*slow)(int kind);
	/* pthread_atfork()'s, registered by the shim at load. */
	void (*fork_prepare)(void);
	void (*fork_parent)(void);
	void (*fork_child)(void);
};

/* NULL: the backend cannot serve this process (it said why). */
typedef const struct mrn_ucx_backend *(*mrn_ucx_attach_fn)(const struct mrn_ucx_shim *shim);

#endif

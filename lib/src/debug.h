// SPDX-License-Identifier: BSD-3-Clause
//
// Invariant checks, compiled in by configure --enable-debug (MRN_DEBUG).
// They state the cache's protocol (reference counts, lock ownership) where it
// is relied on; release builds pay nothing for them.
#ifndef MRN_DEBUG_H
#define MRN_DEBUG_H

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifdef MRN_DEBUG
#include <cstdio>
#include <cstdlib>
#define MRN_ASSERT(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			std::fprintf(stderr, "libmrnotify: %s:%d: assertion failed: %s\n",         \
				     __FILE__, __LINE__, #cond);                                   \
			std::abort();                                                              \
		}                                                                                  \
	} while (0)
#else
#define MRN_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif

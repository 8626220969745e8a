// SPDX-License-Identifier: BSD-3-Clause
//
// Compiler hints for the hit path.
#ifndef MRN_COMPILER_H
#define MRN_COMPILER_H

// The steps of a cache hit (the reader section, the index lookup, the
// reference count) are small functions in headers. GCC's inliner, at -O2,
// kept Cache::get and RangeIndex::find_covering out of line in the
// benchmarks' builds (three calls per hit); each step is inlined by force
// so that a hit compiles to one straight sequence wherever it is used.
#define MRN_HOT_INLINE inline __attribute__((always_inline))
// The same for a lambda: [x](...) MRN_HOT_LAMBDA { ... }.
#define MRN_HOT_LAMBDA __attribute__((always_inline))

#endif

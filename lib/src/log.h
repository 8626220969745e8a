// SPDX-License-Identifier: BSD-3-Clause
#ifndef MRN_LOG_H
#define MRN_LOG_H

namespace mrn {

// Process-wide verbosity: the highest any cache asked for (messages of
// level 0 are errors and always printed).
void raise_verbosity(int level);
int verbosity();

// printf-style message to stderr, prefixed "libmrnotify: ", if level allows.
void log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace mrn

#endif

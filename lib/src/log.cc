// SPDX-License-Identifier: BSD-3-Clause
#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace mrn {

namespace {
std::atomic<int> g_verbosity{0};
}

void raise_verbosity(int level)
{
	int cur = g_verbosity.load();
	while (level > cur && !g_verbosity.compare_exchange_weak(cur, level)) {
	}
}

int verbosity()
{
	return g_verbosity.load(std::memory_order_relaxed);
}

void log(int level, const char *fmt, ...)
{
	if (level > verbosity())
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	std::fprintf(stderr, "libmrnotify: %s\n", buf);
}

} // namespace mrn

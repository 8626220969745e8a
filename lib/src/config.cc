// SPDX-License-Identifier: BSD-3-Clause
// Configuration defaults, the MRNOTIFY_* environment, and string parsing.
#include "log.h"
#include "mrnotify.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool parse_bool(const char *s, int *out)
{
	static const char *const yes[] = {"1", "y", "yes", "on", "true"};
	static const char *const no[] = {"0", "n", "no", "off", "false"};
	for (const char *y : yes)
		if (!strcasecmp(s, y))
			return *out = 1, true;
	for (const char *n : no)
		if (!strcasecmp(s, n))
			return *out = 0, true;
	return false;
}

bool parse_uint(const char *s, uint64_t *out)
{
	if (!*s || *s == '-' || *s == '+')
		return false;
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

int bad(const char *var, const char *value, const char *expected)
{
	mrn::log(0, "%s=\"%s\" is not valid: expected %s", var, value, expected);
	return -EINVAL;
}

} // namespace

extern "C" int mrn_monitor_from_string(const char *s, mrn_monitor_t *out)
{
	static const struct {
		const char *name;
		mrn_monitor_t kind;
	} names[] = {{"auto", MRN_MONITOR_AUTO},
		     {"kernel", MRN_MONITOR_KERNEL},
		     {"uffd", MRN_MONITOR_UFFD},
		     {"none", MRN_MONITOR_NONE}};
	// `external` is not accepted here: it is only safe in a program that
	// reports every unmap itself, which the program says in code, never a
	// user through MRNOTIFY_MONITOR.
	if (!s)
		return -EINVAL;
	for (const auto &n : names)
		if (!strcasecmp(s, n.name))
			return *out = n.kind, 0;
	return -EINVAL;
}

extern "C" const char *mrn_monitor_to_string(mrn_monitor_t m)
{
	switch (m) {
	case MRN_MONITOR_AUTO:
		return "auto";
	case MRN_MONITOR_KERNEL:
		return "kernel";
	case MRN_MONITOR_UFFD:
		return "uffd";
	case MRN_MONITOR_NONE:
		return "none";
	case MRN_MONITOR_EXTERNAL:
		return "external";
	case MRN_MONITOR_AUTO_EXTERNAL:
		return "auto-external";
	}
	return "unknown";
}

extern "C" int mrn_fork_policy_from_string(const char *s, mrn_fork_policy_t *out)
{
	if (!s)
		return -EINVAL;
	if (!strcasecmp(s, "dontfork"))
		return *out = MRN_FORK_DONTFORK, 0;
	if (!strcasecmp(s, "none"))
		return *out = MRN_FORK_NONE, 0;
	if (!strcasecmp(s, "auto"))
		return *out = MRN_FORK_AUTO, 0;
	return -EINVAL;
}

extern "C" const char *mrn_fork_policy_to_string(mrn_fork_policy_t p)
{
	switch (p) {
	case MRN_FORK_DONTFORK:
		return "dontfork";
	case MRN_FORK_NONE:
		return "none";
	case MRN_FORK_AUTO:
		return "auto";
	}
	return "unknown";
}

extern "C" int mrn_size_from_string(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	unsigned shift = 0;
	if (*end) {
		switch (*end) {
		case 'k':
		case 'K':
			shift = 10;
			break;
		case 'm':
		case 'M':
			shift = 20;
			break;
		case 'g':
		case 'G':
			shift = 30;
			break;
		case 't':
		case 'T':
			shift = 40;
			break;
		default:
			return -EINVAL;
		}
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'b' || *end == 'B')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = uint64_t(v) << shift;
	return 0;
}

extern "C" int mrn_config_init(struct mrn_config *c)
{
	if (!c)
		return -EINVAL;
	*c = mrn_config{};
	c->size = sizeof(*c);
	c->monitor = MRN_MONITOR_AUTO;
	c->fork_policy = MRN_FORK_AUTO;
	c->leave_pinned = 1;

	const char *v;
	if ((v = getenv("MRNOTIFY_MONITOR")) && mrn_monitor_from_string(v, &c->monitor) < 0)
		return bad("MRNOTIFY_MONITOR", v, "auto, kernel, uffd or none");
	if ((v = getenv("MRNOTIFY_LEAVE_PINNED")) && !parse_bool(v, &c->leave_pinned))
		return bad("MRNOTIFY_LEAVE_PINNED", v, "0 or 1");
	if ((v = getenv("MRNOTIFY_MAX_PINNED")) &&
	    mrn_size_from_string(v, &c->max_pinned_bytes) < 0)
		return bad("MRNOTIFY_MAX_PINNED", v,
			   "a byte count >= 0 with an optional K, M, G or T suffix (0: no limit)");
	if ((v = getenv("MRNOTIFY_MAX_ENTRIES")) && !parse_uint(v, &c->max_entries))
		return bad("MRNOTIFY_MAX_ENTRIES", v, "a count >= 0 (0: no limit)");
	if ((v = getenv("MRNOTIFY_FORK")) && mrn_fork_policy_from_string(v, &c->fork_policy) < 0)
		return bad("MRNOTIFY_FORK", v, "auto, dontfork or none");
	if ((v = getenv("MRNOTIFY_VERBOSE"))) {
		uint64_t n;
		if (!parse_uint(v, &n) || n > 3)
			return bad("MRNOTIFY_VERBOSE", v, "0, 1, 2 or 3");
		c->verbose = int(n);
	}
	if ((v = getenv("MRNOTIFY_STATS")) && !parse_bool(v, &c->print_stats))
		return bad("MRNOTIFY_STATS", v, "0 or 1");
	return 0;
}

// SPDX-License-Identifier: BSD-3-Clause
// Everything mrnotify-check reads from sysfs, in one function: the module's
// files (parameters in sysfs, module-wide counters in debugfs) are read
// here only.
#include "node_facts.h"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace mrn::check {

namespace {

bool read_first_line(const std::string &path, std::string *out)
{
	std::ifstream in(path);
	return in && std::getline(in, *out);
}

} // namespace

ModuleSysfs read_module_sysfs(const std::string &sysfs_root)
{
	ModuleSysfs m;
	const std::string mod = sysfs_root + "/module/mrnotify";
	struct stat st;
	m.loaded = stat(mod.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
	if (!m.loaded)
		return m;
	std::string v;
	// MODULE_VERSION() creates "version"; every module has "srcversion".
	for (const char *name : {"version", "srcversion", "refcnt"})
		if (read_first_line(mod + "/" + name, &v))
			m.values[name] = v;
	for (const char *name :
	     {"max_registrations", "max_user_registrations", "max_user_contexts"})
		if (read_first_line(mod + "/parameters/" + name, &v))
			m.values[name] = v;

	// Module-wide usage: debugfs, one value per file, root only (it sums
	// over every process and user); docs/kernel-abi.md lists the files.
	const std::string dbg = sysfs_root + "/kernel/debug/mrnotify";
	if (stat(dbg.c_str(), &st) != 0) {
		m.stats_error = dbg + " does not exist (debugfs not mounted, or not root: "
				      "mount -t debugfs none /sys/kernel/debug)";
		return m;
	}
	for (const char *name :
	     {"contexts", "registrations", "invalidated", "drained", "user_limit_hits"}) {
		if (read_first_line(dbg + "/" + name, &v))
			m.values[name] = v;
		else
			m.stats_error = dbg + "/" + name + " is not readable (root only)";
	}
	return m;
}

} // namespace mrn::check

// SPDX-License-Identifier: BSD-3-Clause
// Everything mrnotify-check reads from sysfs, in one function: the module's
// parameters and its module-wide usage (/sys/class/misc/mrnotify/, the
// module's ABI; debugfs is not, and is not read) are read here only.
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

	// Module-wide usage, one value per file, root only (it sums over every
	// process and user); docs/kernel-abi.md lists the files.
	const std::string dev = sysfs_root + "/class/misc/mrnotify";
	if (stat(dev.c_str(), &st) != 0) {
		m.stats_error = dev + " does not exist (the module is loading or unloading)";
		return m;
	}
	for (const char *name :
	     {"contexts", "registrations", "invalidated", "drained", "user_limit_hits"}) {
		if (read_first_line(dev + "/" + name, &v))
			m.values[name] = v;
		else if (stat((dev + "/" + name).c_str(), &st) != 0)
			m.stats_error = dev + "/" + name +
					" does not exist (a module older than this tool)";
		else
			m.stats_error = dev + "/" + name + " is not readable (root only)";
	}
	return m;
}

} // namespace mrn::check

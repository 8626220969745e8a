// SPDX-License-Identifier: BSD-3-Clause
// Everything mrnotify-check reads from sysfs, in one function: the module's
// files are an interface still settling (one value per file is planned for
// the module-wide counters), so a change there is a change here only.
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
	if (read_first_line(mod + "/parameters/max_registrations", &v))
		m.values["max_registrations"] = v;

	// Module-wide usage: "name value" lines in the device's stats file
	// (root only: it sums over every process).
	const std::string stats = sysfs_root + "/class/misc/mrnotify/stats";
	std::ifstream in(stats);
	if (!in) {
		m.stats_error = stat(stats.c_str(), &st) == 0 ? stats + " is readable by root only"
							      : stats + " does not exist";
		return m;
	}
	std::string line;
	while (std::getline(in, line)) {
		std::istringstream words(line);
		std::string key, value;
		if (words >> key >> value)
			m.values[key] = value;
	}
	return m;
}

} // namespace mrn::check

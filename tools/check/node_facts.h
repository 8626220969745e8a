// SPDX-License-Identifier: BSD-3-Clause
// What mrnotify-check finds out about a node: each gatherer fills one part
// and says, in plain words, what is wrong (an empty problem = fine).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mrn::check {

// One line of the report: a name, a value, and whether it is a problem.
struct Fact {
	std::string key;
	std::string value;
};

struct Section {
	explicit Section(std::string section_name) : name(std::move(section_name)) {}

	std::string name;
	std::vector<Fact> facts;
	std::vector<std::string> problems; // each makes the node degraded
	std::vector<std::string> notes;    // said, but not a problem
	bool skipped = false;              // not applicable (e.g. Open MPI not installed)

	void add(std::string key, std::string value)
	{
		facts.push_back({std::move(key), std::move(value)});
	}
};

// Paths a test can point elsewhere (options of mrnotify-check).
struct Paths {
	std::string device;   // /dev/mrnotify (MRN_DEVICE_PATH)
	std::string sysfs;    // /sys
	std::string plugin;   // the installed libmrnotify-ucx.so
	std::string ofi_preload; // the installed libmrnotify-ofi-preload.so
	std::string shadow;   // the installed grdma-shadow directory
	std::string mca_conf; // Open MPI's openmpi-mca-params.conf
};

// The module's sysfs files, all read by read_module_sysfs (the one place
// that knows their names and format).
struct ModuleSysfs {
	bool loaded = false;
	std::map<std::string, std::string> values; // version, srcversion, max_registrations,
						   // contexts, registrations, ...
	std::string stats_error;                   // why the usage counters are missing
};
ModuleSysfs read_module_sysfs(const std::string &sysfs_root);

Section check_module(const Paths &paths);
Section check_device(const Paths &paths);
Section check_monitor();
Section check_openmpi(const Paths &paths);
Section check_ucx(const Paths &paths);
Section check_ofi(const Paths &paths);

} // namespace mrn::check

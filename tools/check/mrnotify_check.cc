// SPDX-License-Identifier: BSD-3-Clause
// mrnotify-check: is this node ready for registration caches fed by
// mrnotify.ko? For administrators and health checks; see mrnotify-check(1).
// Exit status: 0 ok, 1 degraded (a problem was found), 2 usage error.
#include "node_facts.h"

#include <linux/mrnotify.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#ifndef MRN_CHECK_PKGLIBDIR
#define MRN_CHECK_PKGLIBDIR "/usr/local/lib/mrnotify"
#endif

namespace {

using mrn::check::Section;

constexpr int kExitOk = 0;
constexpr int kExitDegraded = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

void usage(std::FILE *to)
{
	std::fprintf(to,
		     "Usage: mrnotify-check [--json] [--quiet] [--no-mpi] [--device PATH]\n"
		     "                      [--sysfs DIR] [--mca-params FILE]\n"
		     "Reports whether mrnotify.ko is loaded (version, ABI), the device's\n"
		     "permissions, limits and usage, which monitor a registration cache would\n"
		     "pick and why, and whether Open MPI, UCX and libfabric can use the mrnotify\n"
		     "component, plugin and monitor.\n"
		     "  --json        machine-readable output\n"
		     "  --quiet       print nothing; the exit status says it\n"
		     "  --no-mpi      skip the Open MPI, UCX and libfabric checks\n"
		     "  --device PATH the device (default %s)\n"
		     "  --sysfs DIR   where sysfs is mounted (default /sys)\n"
		     "  --mca-params FILE\n"
		     "                Open MPI's system parameter file (default\n"
		     "                /etc/openmpi/openmpi-mca-params.conf)\n"
		     "Exit status: 0 ok, 1 degraded or unusable (each problem is named),\n"
		     "2 usage error, 3 internal error.\n",
		     MRN_DEVICE_PATH);
}

std::string json_string(const std::string &s)
{
	std::string out = "\"";
	for (unsigned char c : s) {
		switch (c) {
		case '"':
			out += "\\\"";
			break;
		case '\\':
			out += "\\\\";
			break;
		case '\n':
			out += "\\n";
			break;
		case '\t':
			out += "\\t";
			break;
		default:
			if (c < 0x20) {
				char buf[8];
				std::snprintf(buf, sizeof buf, "\\u%04x", c);
				out += buf;
			} else {
				out += static_cast<char>(c);
			}
		}
	}
	return out + "\"";
}

std::string json_list(const std::vector<std::string> &items)
{
	std::string out = "[";
	for (size_t i = 0; i < items.size(); ++i)
		out += (i ? ", " : "") + json_string(items[i]);
	return out + "]";
}

void print_json(const std::vector<Section> &sections, int status)
{
	std::cout << "{\n  \"tool\": \"mrnotify-check\",\n  \"version\": "
		  << json_string(PACKAGE_VERSION)
		  << ",\n  \"status\": " << json_string(status == kExitOk ? "ok" : "degraded")
		  << ",\n  \"exit_status\": " << status << ",\n  \"sections\": {";
	for (size_t i = 0; i < sections.size(); ++i) {
		const Section &s = sections[i];
		std::cout << (i ? "," : "") << "\n    " << json_string(s.name) << ": {\n"
			  << "      \"skipped\": " << (s.skipped ? "true" : "false") << ",\n"
			  << "      \"facts\": {";
		for (size_t j = 0; j < s.facts.size(); ++j)
			std::cout << (j ? ", " : "") << json_string(s.facts[j].key) << ": "
				  << json_string(s.facts[j].value);
		std::cout << "},\n      \"problems\": " << json_list(s.problems)
			  << ",\n      \"notes\": " << json_list(s.notes) << "\n    }";
	}
	std::cout << "\n  }\n}\n";
}

void print_text(const std::vector<Section> &sections, int status)
{
	std::cout << "mrnotify-check " << PACKAGE_VERSION << ": "
		  << (status == kExitOk ? "OK" : "DEGRADED") << "\n";
	for (const Section &s : sections) {
		std::cout << "[" << s.name << "]" << (s.skipped ? " (skipped)" : "") << "\n";
		for (const auto &f : s.facts)
			std::cout << "  " << f.key << ": " << f.value << "\n";
		for (const auto &p : s.problems)
			std::cout << "  PROBLEM: " << p << "\n";
		for (const auto &n : s.notes)
			std::cout << "  note: " << n << "\n";
	}
}

int run(int argc, char **argv)
{
	bool json = false, quiet = false, mpi = true;
	mrn::check::Paths paths{MRN_DEVICE_PATH,
				"/sys",
				MRN_CHECK_PKGLIBDIR "/libmrnotify-ucx.so",
				MRN_CHECK_PKGLIBDIR "/libmrnotify-ofi-preload.so",
				MRN_CHECK_PKGLIBDIR "/grdma-shadow",
				"/etc/openmpi/openmpi-mca-params.conf"};
	for (int i = 1; i < argc; ++i) {
		const std::string a = argv[i];
		auto value = [&](std::string *out) {
			if (i + 1 >= argc) {
				std::fprintf(stderr, "mrnotify-check: %s needs a value\n",
					     a.c_str());
				return false;
			}
			*out = argv[++i];
			return true;
		};
		if (a == "--json") {
			json = true;
		} else if (a == "--quiet" || a == "-q") {
			quiet = true;
		} else if (a == "--no-mpi") {
			mpi = false;
		} else if (a == "--device") {
			if (!value(&paths.device))
				return kExitUsage;
		} else if (a == "--sysfs") {
			if (!value(&paths.sysfs))
				return kExitUsage;
		} else if (a == "--mca-params") {
			if (!value(&paths.mca_conf))
				return kExitUsage;
		} else if (a == "-h" || a == "--help") {
			usage(stdout);
			return kExitOk;
		} else if (a == "--version") {
			std::printf("mrnotify-check %s (kernel ABI %d)\n", PACKAGE_VERSION,
				    MRN_ABI_VERSION);
			return kExitOk;
		} else {
			std::fprintf(stderr, "mrnotify-check: unknown argument '%s'\n", a.c_str());
			usage(stderr);
			return kExitUsage;
		}
	}

	std::vector<Section> sections;
	sections.push_back(mrn::check::check_module(paths));
	sections.push_back(mrn::check::check_device(paths));
	sections.push_back(mrn::check::check_monitor());
	if (mpi) {
		sections.push_back(mrn::check::check_openmpi(paths));
		sections.push_back(mrn::check::check_ucx(paths));
		sections.push_back(mrn::check::check_ofi(paths));
	}
	int status = kExitOk;
	for (const auto &s : sections)
		if (!s.problems.empty())
			status = kExitDegraded;
	if (json)
		print_json(sections, status);
	else if (!quiet)
		print_text(sections, status);
	return status;
}

} // namespace

int main(int argc, char **argv)
{
	try {
		return run(argc, argv);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "mrnotify-check: %s\n", e.what());
		return kExitInternal;
	}
}

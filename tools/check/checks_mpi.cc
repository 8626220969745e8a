// SPDX-License-Identifier: BSD-3-Clause
// Whether this node's Open MPI, UCX and libfabric can use the component, the
// plugin and the imported monitor.
#include "node_facts.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef MRN_CHECK_OMPI_COMPONENT_DIR
#define MRN_CHECK_OMPI_COMPONENT_DIR ""
#endif
#ifndef MRN_CHECK_OMPI_BUILT_VERSION
#define MRN_CHECK_OMPI_BUILT_VERSION ""
#endif

namespace mrn::check {

namespace {

bool is_dir(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string quote(const std::string &s)
{
	std::string q = "'";
	for (char c : s)
		q += c == '\'' ? std::string("'\\''") : std::string(1, c);
	return q + "'";
}

// Output (stdout and stderr) of a shell command, bounded in time: a health
// check must not hang on a broken installation.
std::string run(const std::string &cmd, int *status)
{
	std::string out;
	FILE *p = popen(("timeout 60 " + cmd + " 2>&1").c_str(), "r");
	if (!p) {
		*status = -1;
		return out;
	}
	char buf[512];
	while (fgets(buf, sizeof buf, p))
		out += buf;
	*status = pclose(p);
	return out;
}

std::string line_after(const std::string &text, const std::string &label)
{
	std::istringstream in(text);
	std::string line;
	while (std::getline(in, line)) {
		const auto at = line.find(label);
		if (at == std::string::npos)
			continue;
		std::string v = line.substr(at + label.size());
		v.erase(0, v.find_first_not_of(" \t"));
		return v;
	}
	return "";
}

std::vector<std::string> split(const std::string &s, char sep)
{
	std::vector<std::string> parts;
	std::string part;
	std::istringstream in(s);
	while (std::getline(in, part, sep))
		parts.push_back(part);
	return parts;
}

// The value of the MCA parameter NAME a job started here gets (its
// environment, else the node's openmpi-mca-params.conf, else FALLBACK), and
// where it comes from.
std::string mca_param(const Paths &paths, const std::string &name, const std::string &fallback,
		      std::string *source)
{
	const std::string var = "OMPI_MCA_" + name;
	if (const char *env = getenv(var.c_str())) {
		*source = "environment (" + var + ")";
		return env;
	}
	std::ifstream in(paths.mca_conf);
	std::string line, found;
	while (std::getline(in, line)) {
		const auto eq = line.find('=');
		if (line.empty() || line[0] == '#' || eq == std::string::npos)
			continue;
		std::string key = line.substr(0, eq);
		key.erase(key.find_last_not_of(" \t") + 1);
		if (key != name)
			continue;
		found = line.substr(eq + 1);
		found.erase(0, found.find_first_not_of(" \t"));
		found.erase(found.find_last_not_of(" \t\r") + 1);
	}
	if (!found.empty()) {
		*source = paths.mca_conf;
		return found;
	}
	*source = "Open MPI's default";
	return fallback;
}

// "yes" when this environment's LD_PRELOAD names the object.
std::string preloaded_here(const std::string &object)
{
	const char *preload = getenv("LD_PRELOAD");
	return preload && std::string(preload).find(object) != std::string::npos ? "yes" : "no";
}

} // namespace

Section check_openmpi(const Paths &paths)
{
	Section s("openmpi");
	int status = 0;
	const std::string version = run("ompi_info --version", &status);
	if (status != 0) {
		s.skipped = true;
		s.notes.push_back("Open MPI is not installed (no working ompi_info)");
		return s;
	}
	std::string running = line_after(version, "Open MPI v");
	s.add("version", running);
	const std::string built = MRN_CHECK_OMPI_BUILT_VERSION;
	s.add("component_built_for", built.empty() ? "(not built)" : built);
	const std::string pkglibdir = line_after(run("ompi_info --path pkglibdir", &status),
						 "Pkglibdir:");
	s.add("component_directory", pkglibdir);

	const std::string ours = std::string(MRN_CHECK_OMPI_COMPONENT_DIR) +
				 "/mca_rcache_mrnotify.so";
	const bool have_component = is_file(ours);
	s.add("component", have_component ? ours : "(not installed)");
	const std::string shadow_so = paths.shadow + "/mca_rcache_grdma.so";
	const bool have_shadow = is_file(shadow_so);
	s.add("grdma_shadow", have_shadow ? shadow_so : "(not installed)");
	if (!have_component && !have_shadow) {
		s.notes.push_back("the Open MPI component is not installed (mrnotify-openmpi)");
		return s;
	}
	if (!built.empty() && running != built)
		s.problems.push_back("the component was built for Open MPI " + built +
				     " and refuses to load into " + running +
				     " (rebuild mrnotify against it)");
	if (have_component && !pkglibdir.empty() &&
	    std::string(MRN_CHECK_OMPI_COMPONENT_DIR) != pkglibdir)
		s.notes.push_back("the component is not in Open MPI's own directory: it needs " +
				  std::string(MRN_CHECK_OMPI_COMPONENT_DIR) +
				  " in mca_base_component_path");

	std::string source;
	const std::string path =
		mca_param(paths, "mca_base_component_path", "SYS_DEFAULT:USER_DEFAULT", &source);
	s.add("component_path", path);
	s.add("component_path_from", source);
	int shadow_at = -1, sys_at = -1, i = 0;
	for (const auto &dir : split(path, ':')) {
		if (dir == "SYS_DEFAULT")
			sys_at = i;
		else if (dir == "USER_DEFAULT")
			; // ~/.openmpi/components: only a problem when not last (see docs/openmpi.md)
		else if (dir == paths.shadow)
			shadow_at = i;
		else if (!is_dir(dir))
			s.problems.push_back("component path entry " + dir +
					     " does not exist: Open MPI stops its scan there");
		++i;
	}
	if (shadow_at >= 0 && !have_shadow)
		s.problems.push_back("the component path names " + paths.shadow +
				     ", which is missing: Open MPI stops its scan there");
	std::string place;
	if (shadow_at < 0)
		place = "absent: transports asking for grdma get Open MPI's own";
	else if (sys_at >= 0 && shadow_at > sys_at)
		place = "after SYS_DEFAULT: Open MPI's own grdma wins";
	else
		place = "first: transports asking for grdma get mrnotify's";
	s.add("grdma_shadow_in_path", place);
	// What the modulefiles and the example configuration set instead of a path.
	std::string serve_from;
	const std::string serve = mca_param(paths, "rcache_mrnotify_serve_grdma", "0", &serve_from);
	s.add("serve_grdma", serve);
	s.add("serve_grdma_from", serve_from);
	const bool serving = serve == "kernel" || serve == "1" || serve == "true" || serve == "yes";
	std::string served_by;
	if (shadow_at >= 0 && (sys_at < 0 || shadow_at < sys_at))
		served_by = "mrnotify's (the grdma-named build first in the component path)";
	else if (serving && have_component)
		served_by = serve == "kernel"
				    ? "mrnotify's in each process that can use the device, else Open MPI's "
				      "own (serve_grdma=kernel)"
				    : "mrnotify's (serve_grdma=" + serve + ")";
	else
		served_by = "Open MPI's own";
	s.add("grdma_served_by", served_by);
	if (sys_at < 0)
		s.problems.push_back("SYS_DEFAULT is missing from the component path: every stock "
				     "component is lost");
	return s;
}

Section check_ucx(const Paths &paths)
{
	Section s("ucx");
	if (!is_file(paths.plugin)) {
		s.skipped = true;
		s.notes.push_back("the UCX plugin is not installed (mrnotify-ucx)");
		return s;
	}
	s.add("plugin", paths.plugin);
	// What mrnotify-ucx-run asks: the plugin itself says which UCX the
	// program gets and whether it supports it.
	int status = 0;
	std::string probe = run("env MRNOTIFY_UCX_PROBE=version LD_PRELOAD=" + quote(paths.plugin) +
					" /bin/true",
				&status);
	probe = line_after(probe, "libmrnotify-ucx:");
	s.add("probe", probe.empty() ? "(no answer)" : probe);
	if (probe.find(": supported") == std::string::npos)
		s.problems.push_back("the UCX plugin cannot be used with this node's UCX: " +
				     (probe.empty() ? std::string("it did not answer") : probe));
	s.add("preloaded_here", preloaded_here(paths.plugin));
	for (const char *var :
	     {"UCX_MRNOTIFY_ENABLE", "UCX_MEM_MMAP_HOOK_MODE", "UCX_MEM_MALLOC_HOOKS"}) {
		const char *v = getenv(var);
		s.add(var, v ? v : "(unset)");
	}
	return s;
}

Section check_ofi(const Paths &paths)
{
	Section s("libfabric");
	if (!is_file(paths.ofi_preload)) {
		s.skipped = true;
		s.notes.push_back("libfabric's monitor is not installed (mrnotify-ofi)");
		return s;
	}
	s.add("preload", paths.ofi_preload);
	// The libfabric programs on this node get: fi_version() needs no
	// initialisation (fi_ini runs at the first fi_getinfo, not at load).
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		s.add("libfabric", "(none)");
		s.notes.push_back("libfabric is not installed: no program here has an MR cache to monitor");
		return s;
	}
	uint32_t (*version)(void) = nullptr;
	*reinterpret_cast<void **>(&version) = dlsym(h, "fi_version");
	const uint32_t v = version ? version() : 0;
	dlclose(h);
	// FI_VERSION(major, minor) is major << 16 | minor.
	const unsigned major = v >> 16, minor = v & 0xffff;
	s.add("libfabric", std::to_string(major) + "." + std::to_string(minor));
	if (v < (1u << 16 | 13))
		s.problems.push_back("libfabric " + std::to_string(major) + "." +
				     std::to_string(minor) +
				     " cannot import a memory monitor (1.13 and later): its own "
				     "monitor stays");
	const char *monitor = getenv("FI_MR_CACHE_MONITOR");
	s.add("FI_MR_CACHE_MONITOR", monitor ? monitor : "(unset)");
	if (monitor && std::string(monitor) == "disabled")
		s.notes.push_back("FI_MR_CACHE_MONITOR=disabled: libfabric caches nothing, and "
				  "nothing is imported");
	const char *off = getenv("MRNOTIFY_OFI");
	if (off && std::string(off) == "0")
		s.notes.push_back("MRNOTIFY_OFI=0: the preload imports nothing");
	s.add("preloaded_here", preloaded_here(paths.ofi_preload));
	return s;
}

} // namespace mrn::check

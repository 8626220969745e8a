// SPDX-License-Identifier: BSD-3-Clause
// The module, the device and the monitor a cache would pick. ABI facts come
// from the uapi header's macros and from the module itself (QUERY, status
// page), never from numbers written here.
#include "mrnotify.h"
#include "node_facts.h"

#include <linux/mrnotify.h>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace mrn::check {

namespace {

std::string errno_text(int err)
{
	return std::string(strerror(err));
}

// An open file descriptor, closed when it goes.
class Fd {
public:
	explicit Fd(int fd) : fd_(fd) {}
	~Fd()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	int get() const { return fd_; }

private:
	int fd_;
};

std::string octal_mode(mode_t mode)
{
	char buf[8];
	snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
	return buf;
}

} // namespace

Section check_module(const Paths &paths)
{
	Section s("module");
	const ModuleSysfs m = read_module_sysfs(paths.sysfs);
	s.add("loaded", m.loaded ? "yes" : "no");
	if (!m.loaded) {
		s.problems.push_back("mrnotify.ko is not loaded (modprobe mrnotify; "
				     "is mrnotify-dkms built for this kernel? dkms status)");
		return s;
	}
	for (const auto &[key, value] : m.values)
		s.add(key, value);
	if (!m.values.count("version"))
		s.notes.push_back(
			"the module reports no version (srcversion identifies the build)");
	if (!m.stats_error.empty())
		s.notes.push_back("module-wide usage not shown: " + m.stats_error);
	return s;
}

Section check_device(const Paths &paths)
{
	Section s("device");
	s.add("path", paths.device);
	s.add("header_abi_version", std::to_string(MRN_ABI_VERSION));
	struct stat st;
	if (stat(paths.device.c_str(), &st) != 0) {
		s.add("exists", "no");
		s.problems.push_back(paths.device + ": " + errno_text(errno));
		return s;
	}
	s.add("exists", "yes");
	s.add("mode", octal_mode(st.st_mode));
	s.add("owner", std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid));
	if (!S_ISCHR(st.st_mode)) {
		s.problems.push_back(paths.device + " is not a character device");
		return s;
	}
	if ((st.st_mode & 0666) != 0666)
		s.notes.push_back("mode " + octal_mode(st.st_mode) +
				  ": not every user may open it (the udev rule sets 0666)");
	const bool can = access(paths.device.c_str(), R_OK | W_OK) == 0;
	s.add("usable_by_this_user", can ? "yes" : "no");
	if (!can) {
		s.problems.push_back("this user cannot open " + paths.device +
				     " for reading and writing");
		return s;
	}

	Fd fd(open(paths.device.c_str(), O_RDWR | O_CLOEXEC));
	if (fd.get() < 0) {
		s.problems.push_back("open " + paths.device + ": " + errno_text(errno));
		return s;
	}
	// The status page says which ABI the running module speaks.
	const long page = sysconf(_SC_PAGESIZE);
	void *p = mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_SHARED, fd.get(), 0);
	if (p == MAP_FAILED) {
		s.problems.push_back("mmap of the status page: " + errno_text(errno));
	} else {
		const auto *status = static_cast<const struct mrn_status *>(p);
		s.add("module_abi_version", std::to_string(status->abi_version));
		if (!MRN_ABI_SERVES(status->abi_version))
			s.problems.push_back(
				"the module speaks ABI " + std::to_string(status->abi_version) +
				", older than the " + std::to_string(MRN_ABI_VERSION) +
				" this tool was built for");
		munmap(p, static_cast<size_t>(page));
	}
	struct mrn_query q;
	memset(&q, 0, sizeof q);
	q.size = sizeof q;
	if (ioctl(fd.get(), MRN_IOC_QUERY, &q) != 0) {
		s.problems.push_back("QUERY ioctl: " + errno_text(errno));
		return s;
	}
	s.add("max_registrations_per_context", std::to_string(q.max_registrations));
	s.add("bytes_per_registration", std::to_string(q.reg_bytes));
	return s;
}

namespace {

int no_register(void *, void *, void *, size_t, uint32_t, void *)
{
	return -ENOTSUP;
}

int no_deregister(void *, void *)
{
	return 0;
}

// stderr into a temporary file while alive: the library says why it picked
// a monitor at verbose level 1, on stderr.
class StderrCapture {
public:
	StderrCapture()
	{
		fflush(stderr);
		tmp_ = tmpfile();
		saved_ = dup(STDERR_FILENO);
		if (tmp_ && saved_ >= 0)
			dup2(fileno(tmp_), STDERR_FILENO);
	}
	~StderrCapture()
	{
		restore();
		if (tmp_)
			fclose(tmp_);
	}
	StderrCapture(const StderrCapture &) = delete;
	StderrCapture &operator=(const StderrCapture &) = delete;

	std::string text()
	{
		restore();
		std::string out;
		if (!tmp_)
			return out;
		rewind(tmp_);
		char buf[512];
		while (fgets(buf, sizeof buf, tmp_))
			out += buf;
		return out;
	}

private:
	void restore()
	{
		fflush(stderr);
		if (saved_ >= 0) {
			dup2(saved_, STDERR_FILENO);
			close(saved_);
			saved_ = -1;
		}
	}
	FILE *tmp_ = nullptr;
	int saved_ = -1;
};

std::string trim_lines(std::string text)
{
	for (auto &c : text)
		if (c == '\n')
			c = ' ';
	while (!text.empty() && text.back() == ' ')
		text.pop_back();
	return text;
}

} // namespace

// Creates a cache the way every user of the library does (mrn_config_init:
// the MRNOTIFY_* environment applies) and asks which monitor it got.
Section check_monitor()
{
	Section s("monitor");
	struct mrn_config cfg;
	StderrCapture capture;
	int rc = mrn_config_init(&cfg);
	if (rc != 0) {
		s.problems.push_back("mrn_config_init: " + trim_lines(capture.text()));
		return s;
	}
	s.add("requested", mrn_monitor_to_string(cfg.monitor));
	cfg.name = "mrnotify-check";
	cfg.reg = no_register;
	cfg.dereg = no_deregister;
	cfg.payload_size = sizeof(void *);
	cfg.verbose = 1;
	cfg.print_stats = 0;
	mrn_cache_t *cache = nullptr;
	rc = mrn_cache_create(&cfg, &cache);
	const std::string why = trim_lines(capture.text());
	if (rc != 0) {
		s.add("picked", "(none: the cache could not be created)");
		s.add("why", why);
		s.problems.push_back("mrn_cache_create: " + errno_text(-rc));
		return s;
	}
	const std::string picked = mrn_monitor_to_string(mrn_cache_monitor(cache));
	mrn_cache_destroy(cache);
	s.add("picked", picked);
	s.add("why", why);
	if (picked != "kernel")
		s.problems.push_back("a cache would not use the kernel monitor (" + picked +
				     "): see why");
	return s;
}

} // namespace mrn::check

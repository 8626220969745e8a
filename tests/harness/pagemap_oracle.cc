// SPDX-License-Identifier: BSD-3-Clause
#include "pagemap_oracle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace {

// /proc/pid/pagemap: one 64-bit entry per virtual page. Bit 63 "present",
// bits 0-54 the PFN (zero unless CAP_SYS_ADMIN). See
// Documentation/admin-guide/mm/pagemap.rst.
constexpr uint64_t kPresent = UINT64_C(1) << 63;
constexpr uint64_t kPfnMask = (UINT64_C(1) << 55) - 1;

size_t page_size()
{
	return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

class Fd {
public:
	explicit Fd(int fd) : fd_(fd) {}
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	~Fd()
	{
		if (fd_ >= 0)
			close(fd_);
	}
	int get() const { return fd_; }

private:
	int fd_;
};

} // namespace

extern "C" size_t mrn_oracle_page_count(const void *addr, size_t len)
{
	if (len == 0)
		return 0;
	const uintptr_t ps = page_size();
	const uintptr_t first = reinterpret_cast<uintptr_t>(addr) / ps;
	const uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + len - 1) / ps;
	return last - first + 1;
}

extern "C" int mrn_oracle_read_pfns(const void *addr, size_t len, uint64_t *pfns)
{
	const size_t n = mrn_oracle_page_count(addr, len);
	if (n == 0)
		return 0;
	if (reinterpret_cast<uintptr_t>(addr) + len < reinterpret_cast<uintptr_t>(addr))
		return -EINVAL;
	Fd fd(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
	if (fd.get() < 0)
		return -errno;
	const off_t off = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) / page_size() *
					     sizeof(uint64_t));
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd.get(), pfns + done, (n - done) * sizeof(uint64_t),
				  off + static_cast<off_t>(done * sizeof(uint64_t)));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0 || r % sizeof(uint64_t) != 0)
			return -EIO;
		done += static_cast<size_t>(r) / sizeof(uint64_t);
	}
	for (size_t i = 0; i < n; i++)
		pfns[i] = (pfns[i] & kPresent) ? (pfns[i] & kPfnMask) : MRN_ORACLE_NOT_PRESENT;
	return 0;
}

extern "C" int mrn_oracle_available(void)
{
	const size_t ps = page_size();
	void *p = mmap(nullptr, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	*static_cast<volatile char *>(p) = 1;
	uint64_t pfn = 0;
	const int rc = mrn_oracle_read_pfns(p, ps, &pfn);
	munmap(p, ps);
	return rc == 0 && pfn != MRN_ORACLE_NOT_PRESENT;
}

extern "C" long mrn_oracle_count_stale(const void *addr, size_t len, const uint64_t *pinned_pfns)
{
	const size_t n = mrn_oracle_page_count(addr, len);
	std::vector<uint64_t> now(n);
	const int rc = mrn_oracle_read_pfns(addr, len, now.data());
	if (rc < 0)
		return rc;
	long stale = 0;
	// A page that is no longer present is stale too: the pinned page is not
	// what a later access would map.
	for (size_t i = 0; i < n; i++)
		if (now[i] == MRN_ORACLE_NOT_PRESENT || now[i] != pinned_pfns[i])
			stale++;
	return stale;
}

namespace mrn::test {

PinnedSnapshot::PinnedSnapshot(const void *addr, size_t len)
    : addr_(addr), len_(len), pfns_(mrn_oracle_page_count(addr, len))
{
	const int rc = mrn_oracle_read_pfns(addr, len, pfns_.data());
	if (rc < 0)
		throw std::system_error(-rc, std::generic_category(), "reading /proc/self/pagemap");
}

long PinnedSnapshot::stale_pages() const
{
	const long r = mrn_oracle_count_stale(addr_, len_, pfns_.data());
	if (r < 0)
		throw std::system_error(static_cast<int>(-r), std::generic_category(),
					"reading /proc/self/pagemap");
	return r;
}

bool PinnedSnapshot::all_present() const
{
	for (uint64_t p : pfns_)
		if (p == MRN_ORACLE_NOT_PRESENT)
			return false;
	return true;
}

} // namespace mrn::test

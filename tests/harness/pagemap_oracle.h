/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The stale-translation oracle for tests: reads the page frame numbers that a
 * range of this process maps right now from /proc/self/pagemap, and tells
 * whether a registration taken earlier (its PFNs snapshotted while pinned)
 * still maps to the pages that are mapped now.
 *
 * Only root (CAP_SYS_ADMIN) sees real PFNs; others read zeros, which
 * mrn_oracle_available() detects so tests can refuse to draw conclusions.
 * C linkage so the C glue tests (Open MPI, UCX) can use it too.
 */
#ifndef MRN_TESTS_PAGEMAP_ORACLE_H
#define MRN_TESTS_PAGEMAP_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PFN value for a page that is not present (never faulted in, or swapped). */
#define MRN_ORACLE_NOT_PRESENT UINT64_C(0)

/*
 * Fill pfns[0..n) with the PFNs of the n pages covering [addr, addr+len),
 * n = mrn_oracle_page_count(addr, len). Returns 0, or -errno.
 */
int mrn_oracle_read_pfns(const void *addr, size_t len, uint64_t *pfns);

/* Number of pages that [addr, addr+len) touches (0 for len == 0). */
size_t mrn_oracle_page_count(const void *addr, size_t len);

/* 1 if this process can see real PFNs (it touches a page to find out). */
int mrn_oracle_available(void);

/*
 * Compare a snapshot taken with mrn_oracle_read_pfns() (the pages a
 * registration pinned) with what is mapped now. Returns the number of pages
 * that differ (0: the registration is current), or -errno.
 */
long mrn_oracle_count_stale(const void *addr, size_t len, const uint64_t *pinned_pfns);

#ifdef __cplusplus
}

#include <vector>

namespace mrn::test {

/* The PFNs a registration pinned, and the check against what is mapped now. */
class PinnedSnapshot {
public:
	/* Snapshot the pages of [addr, addr+len); throws std::system_error. */
	PinnedSnapshot(const void *addr, size_t len);

	/* Pages whose mapping no longer is the pinned page. */
	long stale_pages() const;
	bool is_stale() const { return stale_pages() != 0; }
	bool all_present() const;
	const std::vector<uint64_t> &pfns() const { return pfns_; }

private:
	const void *addr_;
	size_t len_;
	std::vector<uint64_t> pfns_;
};

} // namespace mrn::test
#endif

#endif

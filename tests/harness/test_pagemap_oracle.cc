// SPDX-License-Identifier: BSD-3-Clause
// The oracle must tell a current registration from a stale one. To make the
// "stale" cases deterministic without an RDMA device, the old pages are kept
// alive by a memfd (the role a pin plays for a real registration): otherwise
// the allocator could hand the freed page straight back to the new mapping.
#include "harness/pagemap_oracle.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

class Oracle : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (!mrn_oracle_available())
			GTEST_SKIP() << "no real PFNs in /proc/self/pagemap (needs root)";
	}
};

// A memfd-backed shared mapping of n pages, touched, at a fixed-free address.
struct PinnedByMemfd {
	explicit PinnedByMemfd(size_t pages) : len(pages * kPage)
	{
		fd = memfd_create("oracle", MFD_CLOEXEC);
		EXPECT_GE(fd, 0);
		EXPECT_EQ(0, ftruncate(fd, static_cast<off_t>(len)));
		addr = static_cast<char *>(
			mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
		EXPECT_NE(MAP_FAILED, addr);
		memset(addr, 0x5a, len);
	}
	~PinnedByMemfd() { close(fd); }
	int fd;
	size_t len;
	char *addr;
};

char *remap_anonymous(void *at, size_t len, bool touch = true)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		       0);
	if (p == MAP_FAILED)
		return nullptr;
	if (touch)
		memset(p, 0xa5, len);
	return static_cast<char *>(p);
}

TEST(OracleMath, PageCount)
{
	char *base = reinterpret_cast<char *>(0x100000);
	EXPECT_EQ(0u, mrn_oracle_page_count(base, 0));
	EXPECT_EQ(1u, mrn_oracle_page_count(base, 1));
	EXPECT_EQ(1u, mrn_oracle_page_count(base, kPage));
	EXPECT_EQ(2u, mrn_oracle_page_count(base, kPage + 1));
	EXPECT_EQ(2u, mrn_oracle_page_count(base + kPage - 1, 2));
	EXPECT_EQ(3u, mrn_oracle_page_count(base + 1, 2 * kPage));
}

TEST_F(Oracle, UnchangedMappingIsCurrent)
{
	PinnedByMemfd m(8);
	mrn::test::PinnedSnapshot snap(m.addr, m.len);
	EXPECT_TRUE(snap.all_present());
	EXPECT_EQ(0, snap.stale_pages());
	memset(m.addr, 1, m.len); // writing in place keeps the same pages
	EXPECT_FALSE(snap.is_stale());
	munmap(m.addr, m.len);
}

TEST_F(Oracle, DistinctPagesHaveDistinctFrames)
{
	PinnedByMemfd m(4);
	mrn::test::PinnedSnapshot snap(m.addr, m.len);
	for (size_t i = 0; i < snap.pfns().size(); i++)
		for (size_t j = i + 1; j < snap.pfns().size(); j++)
			EXPECT_NE(snap.pfns()[i], snap.pfns()[j]);
	munmap(m.addr, m.len);
}

// The seed's scenario: register, munmap, mmap MAP_FIXED at the same address.
TEST_F(Oracle, RemapAtSameAddressIsStale)
{
	PinnedByMemfd m(4);
	mrn::test::PinnedSnapshot snap(m.addr, m.len);
	ASSERT_EQ(0, munmap(m.addr, m.len));
	ASSERT_EQ(m.addr, remap_anonymous(m.addr, m.len));
	EXPECT_EQ(4, snap.stale_pages());
	munmap(m.addr, m.len);
}

TEST_F(Oracle, OneReplacedPageInTheMiddle)
{
	PinnedByMemfd m(5);
	mrn::test::PinnedSnapshot snap(m.addr, m.len);
	ASSERT_EQ(m.addr + 2 * kPage, remap_anonymous(m.addr + 2 * kPage, kPage));
	EXPECT_EQ(1, snap.stale_pages());
	munmap(m.addr, m.len);
}

TEST_F(Oracle, UnpopulatedReplacementIsStale)
{
	PinnedByMemfd m(2);
	mrn::test::PinnedSnapshot snap(m.addr, m.len);
	ASSERT_EQ(m.addr, remap_anonymous(m.addr, m.len, /*touch=*/false));
	EXPECT_EQ(2, snap.stale_pages());
	munmap(m.addr, m.len);
}

TEST_F(Oracle, SubPageRangeUsesItsPages)
{
	PinnedByMemfd m(3);
	// 10 bytes straddling the boundary between pages 1 and 2.
	char *a = m.addr + 2 * kPage - 5;
	mrn::test::PinnedSnapshot snap(a, 10);
	ASSERT_EQ(2u, snap.pfns().size());
	ASSERT_EQ(m.addr, remap_anonymous(m.addr, kPage)); // page 0: outside the range
	EXPECT_EQ(0, snap.stale_pages());
	ASSERT_EQ(m.addr + 2 * kPage, remap_anonymous(m.addr + 2 * kPage, kPage));
	EXPECT_EQ(1, snap.stale_pages());
	munmap(m.addr, m.len);
}

TEST(OracleErrors, WrappingRangeIsRejected)
{
	uint64_t pfn[2];
	EXPECT_EQ(-EINVAL,
		  mrn_oracle_read_pfns(reinterpret_cast<void *>(UINTPTR_MAX - 10), 100, pfn));
}

} // namespace

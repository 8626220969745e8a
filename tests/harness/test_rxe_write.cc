// SPDX-License-Identifier: BSD-3-Clause
// Runs in the guest with Soft-RoCE: real ibv_reg_mr pinning and real RDMA
// WRITEs over a loopback RC QP pair on rxe0. Proves the harness and the
// oracle against a real pinned registration, and shows the problem mrnotify
// exists for: after munmap + mmap MAP_FIXED, the NIC keeps the old pages.
#include "harness/pagemap_oracle.h"
#include "harness/rc_loopback.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

char *map_anonymous(size_t len, void *at = nullptr)
{
	const int fixed = at ? MAP_FIXED : 0;
	void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
	return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

class Rxe : public ::testing::Test {
protected:
	mrn::test::RcLoopback rc{"rxe0"};
};

TEST_F(Rxe, RdmaWriteArrives)
{
	const size_t len = 16 * kPage + 123;
	std::vector<char> src(len), dst(len, 0);
	for (size_t i = 0; i < len; i++)
		src[i] = static_cast<char>(i * 7 + 1);
	auto smr = rc.reg_mr(src.data(), len);
	auto dmr = rc.reg_mr(dst.data(), len);
	rc.rdma_write(src.data(), smr->lkey, dst.data(), dmr->rkey, len);
	EXPECT_EQ(0, memcmp(src.data(), dst.data(), len));
}

TEST_F(Rxe, RegisteredPagesAreCurrentWhileMapped)
{
	ASSERT_TRUE(mrn_oracle_available());
	const size_t len = 8 * kPage;
	char *buf = map_anonymous(len);
	ASSERT_NE(nullptr, buf);
	auto mr = rc.reg_mr(buf, len); // pins (and faults in) every page
	mrn::test::PinnedSnapshot snap(buf, len);
	EXPECT_TRUE(snap.all_present());
	EXPECT_EQ(0, snap.stale_pages());
	mr.reset();
	munmap(buf, len);
}

// Register, munmap, mmap MAP_FIXED at the same address: the oracle calls
// the registration stale, and an RDMA WRITE through it lands in the old
// (pinned, now unmapped) pages, not in what the process sees there now.
TEST_F(Rxe, RemappedRegistrationIsStaleAndWritesGoToOldPages)
{
	ASSERT_TRUE(mrn_oracle_available());
	const size_t len = 4 * kPage;
	char *target = map_anonymous(len);
	ASSERT_NE(nullptr, target);
	memset(target, 'o', len);
	auto tmr = rc.reg_mr(target, len);
	mrn::test::PinnedSnapshot snap(target, len);
	ASSERT_EQ(0, snap.stale_pages());

	ASSERT_EQ(0, munmap(target, len));
	ASSERT_EQ(target, map_anonymous(len, target));
	memset(target, 'n', len);
	EXPECT_EQ(4, snap.stale_pages());

	std::vector<char> src(len, 'X');
	auto smr = rc.reg_mr(src.data(), len);
	rc.rdma_write(src.data(), smr->lkey, target, tmr->rkey, len);
	for (size_t i = 0; i < len; i++)
		ASSERT_EQ('n', target[i]) << "byte " << i << " reached the new mapping";
	munmap(target, len);
}

} // namespace

// SPDX-License-Identifier: BSD-3-Clause
// The README's demo, run inside the guest on Soft-RoCE (rxe0): registers a
// buffer with ibv_reg_mr, RDMA-WRITEs into it, then shows the stale
// registration problem that mrnotify exists to solve: after munmap and
// mmap(MAP_FIXED) at the same address, the NIC still writes the old pages.
#include "oracle/pagemap_oracle.h"
#include "rdma/rc_loopback.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

char *map_at(void *at, size_t len)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	if (p == MAP_FAILED)
		throw std::runtime_error(std::string("mmap: ") + strerror(errno));
	return static_cast<char *>(p);
}

std::string head(const char *p, size_t n = 16) { return std::string(p, n); }

int run()
{
	mrn::test::RcLoopback rc("rxe0");
	const size_t len = 4 * kPage;
	std::vector<char> src(len);

	char *buf = map_at(nullptr, len);
	memset(buf, '.', len);
	auto mr = rc.reg_mr(buf, len);
	std::printf("1. ibv_reg_mr(%zu KiB at %p) on %s: lkey 0x%x rkey 0x%x, pages pinned\n",
		    len / 1024, static_cast<void *>(buf), rc.device_name().c_str(), mr->lkey,
		    mr->rkey);
	mrn::test::PinnedSnapshot pinned(buf, len);

	memset(src.data(), 'A', len);
	auto smr = rc.reg_mr(src.data(), len);
	rc.rdma_write(src.data(), smr->lkey, buf, mr->rkey, len);
	std::printf("2. RDMA WRITE of \"AAAA...\" through the registration: buffer reads \"%s\"\n",
		    head(buf).c_str());

	munmap(buf, len);
	map_at(buf, len);
	memset(buf, '.', len);
	std::printf("3. munmap + mmap(MAP_FIXED) at the same address: the process now has new pages;\n"
		    "   the pagemap oracle counts %ld of %zu registered pages as stale\n",
		    pinned.stale_pages(), len / kPage);

	memset(src.data(), 'B', len);
	rc.rdma_write(src.data(), smr->lkey, buf, mr->rkey, len);
	const bool lost = buf[0] == '.';
	std::printf("4. RDMA WRITE of \"BBBB...\" through the cached registration: buffer reads \"%s\"\n"
		    "   -> %s\n",
		    head(buf).c_str(),
		    lost ? "the data went to the old, unmapped pages: a cache that keeps this\n"
			   "      registration silently loses data. mrnotify's kernel module tells the\n"
			   "      cache before munmap returns, so it registers the new pages instead."
			 : "the data arrived (unexpected: the registration should be stale)");
	munmap(buf, len);
	return lost ? 0 : 1;
}

} // namespace

int main()
{
	try {
		return run();
	} catch (const std::exception &e) {
		std::fprintf(stderr, "mrnotify-demo: %s\n", e.what());
		return 1;
	}
}

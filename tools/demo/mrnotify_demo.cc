// SPDX-License-Identifier: BSD-3-Clause
// The README's demo, run inside the guest with mrnotify.ko and Soft-RoCE
// (rxe0). The seed's scenario, twice: a buffer is registered through the
// cache and written by RDMA; the program unmaps it and maps new memory at
// the same address; the cache is asked again and a second RDMA WRITE goes
// through what it returns. Without invalidation the cache hands back the
// old registration and the data lands in the old pages; with mrnotify the
// kernel has told the cache before munmap returned, and the data arrives.
#include "mrnotify.h"
#include "harness/rc_loopback.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
const size_t kLen = 4 * kPage;

int reg(void *pd, void *, void *addr, size_t len, uint32_t access, void *payload)
{
	ibv_mr *mr = ibv_reg_mr(static_cast<ibv_pd *>(pd), addr, len, int(access));
	if (!mr)
		return -errno;
	*static_cast<ibv_mr **>(payload) = mr;
	return 0;
}

int dereg(void *, void *payload)
{
	return -ibv_dereg_mr(*static_cast<ibv_mr **>(payload));
}

char *map_at(void *at)
{
	void *p = mmap(at, kLen, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	if (p == MAP_FAILED)
		throw std::runtime_error(std::string("mmap: ") + strerror(errno));
	return static_cast<char *>(p);
}

class Demo {
public:
	explicit Demo(mrn::test::RcLoopback &rc)
	    : rc_(rc), src_(kLen), src_mr_(rc.reg_mr(src_.data(), kLen))
	{}

	// RDMA-WRITE c over buf through the cache; returns what buf then holds.
	std::string write(mrn_cache_t *cache, char *buf, char c, bool *hit)
	{
		mrn_stats before{}, after{};
		mrn_cache_stats(cache, &before, sizeof(before));
		mrn_entry_t *e = nullptr;
		if (mrn_get(cache, buf, kLen, mrn::test::kFullAccess, nullptr, &e) < 0)
			throw std::runtime_error("mrn_get failed");
		mrn_cache_stats(cache, &after, sizeof(after));
		*hit = after.hits > before.hits;
		ibv_mr *mr = *static_cast<ibv_mr **>(mrn_entry_payload(e));
		memset(src_.data(), c, kLen);
		rc_.rdma_write(src_.data(), src_mr_->lkey, buf, mr->rkey, kLen);
		mrn_put(cache, e);
		return std::string(buf, 8) + "...";
	}

	bool scenario(mrn_monitor_t monitor, const char *title)
	{
		mrn_config cfg;
		mrn_config_init(&cfg);
		cfg.name = "demo";
		cfg.monitor = monitor;
		cfg.reg = reg;
		cfg.dereg = dereg;
		cfg.context = rc_.pd();
		cfg.payload_size = sizeof(ibv_mr *);
		mrn_cache_t *cache = nullptr;
		if (mrn_cache_create(&cfg, &cache) < 0)
			throw std::runtime_error("mrn_cache_create failed");
		std::printf("\n%s (monitor: %s)\n", title,
			    mrn_monitor_to_string(mrn_cache_monitor(cache)));
		bool hit = false;
		char *buf = map_at(nullptr);
		memset(buf, '.', kLen);
		std::string got = write(cache, buf, 'A', &hit);
		std::printf("  get + RDMA WRITE 'A': %-6s buffer reads %s\n",
			    hit ? "hit," : "miss,", got.c_str());
		munmap(buf, kLen);
		map_at(buf);
		memset(buf, '.', kLen);
		std::printf("  munmap, then mmap(MAP_FIXED) new memory at the same address\n");
		got = write(cache, buf, 'B', &hit);
		const bool arrived = buf[0] == 'B';
		std::printf("  get + RDMA WRITE 'B': %-6s buffer reads %s  -> %s\n",
			    hit ? "hit," : "miss,", got.c_str(),
			    arrived ? "correct: the cache registered the new pages"
				    : "WRONG: the stale registration wrote the old pages");
		mrn_stats s{};
		mrn_cache_stats(cache, &s, sizeof(s));
		std::printf("  statistics: %llu hits, %llu misses, %llu invalidated, %llu drains\n",
			    (unsigned long long)s.hits, (unsigned long long)s.misses,
			    (unsigned long long)s.invalidations, (unsigned long long)s.drains);
		munmap(buf, kLen);
		mrn_cache_destroy(cache);
		return arrived;
	}

private:
	mrn::test::RcLoopback &rc_;
	std::vector<char> src_;
	mrn::test::MrPtr src_mr_;
};

} // namespace

int main()
{
	try {
		mrn::test::RcLoopback rc("rxe0");
		Demo demo(rc);
		std::printf("A 16 KiB buffer, registered with ibv_reg_mr on %s through "
			    "libmrnotify's cache.\n",
			    rc.device_name().c_str());
		const bool stale_ok = demo.scenario(MRN_MONITOR_EXTERNAL,
						    "1. A cache that is never told about unmaps");
		const bool mrn_ok = demo.scenario(MRN_MONITOR_KERNEL,
						  "2. The same cache, told by mrnotify.ko");
		std::printf("\n%s\n",
			    !stale_ok && mrn_ok
				    ? "mrnotify turned a silent data loss into a cache miss."
				    : "unexpected result: see above");
		return !stale_ok && mrn_ok ? 0 : 1;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "mrnotify-demo: %s\n", e.what());
		return 1;
	}
}

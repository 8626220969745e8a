// SPDX-License-Identifier: BSD-3-Clause
//
// The component under a pinning transport, in the guest on rxe0: Open MPI's
// rcache API with a register function that calls ibv_reg_mr and data moved
// by RDMA WRITE through the registration the cache hands out, next to the
// stock grdma. (Open MPI 4.1's transports that take an rcache cannot run
// over rxe with Debian's build: see tests/mca/README.md, "A pinning transport".)
//
// For each cache: register a buffer and RDMA-WRITE into it; release it
// (idle, leave pinned); replace its pages behind Open MPI's hooks
// (syscall(SYS_munmap), syscall(SYS_mmap, MAP_FIXED)) or through libc;
// ask the cache again and RDMA-WRITE through what it returns; check the
// bytes the process sees.
//
//   grdma, raw syscalls      the blind negative control: the old
//                            registration comes back and the write lands
//                            in the old pages; the process sees nothing.
//                            It must corrupt, or the test proves nothing.
//   mrnotify (kernel), raw   a new registration; the write arrives.
//   mrnotify (kernel), libc  the same through munmap/mmap.
//   mrnotify, many rounds    hits between remaps reuse the registration,
//                            every write arrives.
//
// Usage: rcache_rxe_test   (component path and monitor from the
// environment: OMPI_MCA_mca_base_component_path,
// OMPI_MCA_rcache_mrnotify_monitor). Exits 0, 1 on a failure, 77 when there
// is no rxe0.
extern "C" {
#include "opal_config.h"
// Open MPI 5.0.7's opal/mca/base/mca_base_alias.h and opal/util/event.h open
// more extern "C" blocks (BEGIN_C_DECLS) than they close, which C does not
// notice. This block gives the headers C linkage already: their own
// BEGIN/END_C_DECLS are made empty, so the imbalance cannot swallow the rest
// of the file.
#undef BEGIN_C_DECLS
#undef END_C_DECLS
#define BEGIN_C_DECLS
#define END_C_DECLS

#include "opal/mca/base/base.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"
#include "opal/runtime/opal.h"
#include "opal/runtime/opal_params.h"
}

#include "harness/rc_loopback.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

namespace {

using mrn::test::all_are;
using mrn::test::map_anon;
using mrn::test::MrPtr;
using mrn::test::RcLoopback;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kPages = 8;

int passed, failed;

void result(bool ok, const char *name, const char *detail)
{
	std::printf("%s - %s%s%s\n", ok ? "ok" : "not ok", name, detail ? ": " : "",
		    detail ? detail : "");
	std::fflush(stdout);
	(ok ? passed : failed)++;
}

// The transport: a registration is an ibv_mr on the loopback's PD.
struct rxe_reg {
	mca_rcache_base_registration_t base;
	ibv_mr *mr;
};

struct ctx {
	RcLoopback *rc;
	long regs, deregs;
};

int rxe_register(void *reg_data, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
	auto *c = static_cast<ctx *>(reg_data);
	auto *r = reinterpret_cast<rxe_reg *>(reg);

	r->mr = ibv_reg_mr(c->rc->pd(), base, size, mrn::test::kFullAccess);
	if (!r->mr)
		return OPAL_ERR_OUT_OF_RESOURCE;
	c->regs++;
	return OPAL_SUCCESS;
}

int rxe_deregister(void *reg_data, mca_rcache_base_registration_t *reg)
{
	auto *c = static_cast<ctx *>(reg_data);
	auto *r = reinterpret_cast<rxe_reg *>(reg);

	if (r->mr && ibv_dereg_mr(r->mr) == 0)
		c->deregs++;
	r->mr = nullptr;
	return OPAL_SUCCESS;
}

mca_rcache_base_module_t *create(const char *component, ctx *c)
{
	mca_rcache_base_resources_t res{};

	res.cache_name = const_cast<char *>("rxe0");
	res.reg_data = c;
	res.sizeof_reg = sizeof(rxe_reg);
	res.register_mem = rxe_register;
	res.deregister_mem = rxe_deregister;
	return mca_rcache_base_module_create(component, nullptr, &res);
}

struct Bench {
	RcLoopback &rc;
	std::vector<char> src = std::vector<char>(kPages * kPage);
	MrPtr src_mr;

	explicit Bench(RcLoopback &r) : rc(r), src_mr(r.reg_mr(src.data(), src.size())) {}

	// RDMA-WRITE c into [dst, dst + len) through the cache's registration.
	// Returns the registration used (released again: idle in the cache).
	rxe_reg *write_through(mca_rcache_base_module_t *m, char *dst, size_t len, char c)
	{
		mca_rcache_base_registration_t *reg = nullptr;

		if (m->rcache_register(m, dst, len, 0, MCA_RCACHE_ACCESS_ANY, &reg) != OPAL_SUCCESS)
			return nullptr;
		auto *r = reinterpret_cast<rxe_reg *>(reg);
		std::memset(src.data(), c, len);
		rc.rdma_write(src.data(), src_mr->lkey, dst, r->mr->rkey, len);
		m->rcache_deregister(m, reg);
		return r;
	}
};

// One remap scenario. Returns 1 if the second write arrived, 0 if it was
// lost, -1 on a set-up failure (reported).
int remap_scenario(Bench &b, const char *component, bool raw, const char *name, long *regs_out,
		   bool *reused)
{
	ctx c{&b.rc, 0, 0};
	mca_rcache_base_module_t *m = create(component, &c);
	const size_t len = kPages * kPage;
	char *buf;
	rxe_reg *first, *second;
	int arrived;

	if (!m) {
		result(false, name, "cannot create the cache");
		return -1;
	}
	buf = map_anon(nullptr, len, false);
	std::memset(buf, '.', len);
	first = b.write_through(m, buf, len, 'A');
	if (!first || !all_are(buf, len, 'A')) {
		result(false, name, "the first RDMA WRITE did not arrive");
		mca_rcache_base_module_destroy(m);
		return -1;
	}
	if (raw ? syscall(SYS_munmap, buf, len) != 0 : munmap(buf, len) != 0) {
		result(false, name, "munmap failed");
		return -1;
	}
	if (map_anon(buf, len, raw) != buf) {
		result(false, name, "mmap MAP_FIXED failed");
		return -1;
	}
	std::memset(buf, 'n', len);
	second = b.write_through(m, buf, len, 'B');
	arrived = second && all_are(buf, len, 'B');
	*reused = second == first && c.regs == 1;
	*regs_out = c.regs;
	mca_rcache_base_module_destroy(m);
	munmap(buf, len);
	if (c.regs != c.deregs) {
		result(false, name, "registrations leaked");
		return -1;
	}
	return arrived;
}

void run(RcLoopback &rc)
{
	Bench b(rc);
	char detail[200];
	long regs;
	bool reused;
	int arrived;

	{
		const char *T = "grdma, raw munmap + mmap: the old registration, the RDMA WRITE "
				"lost (blind negative control)";
		arrived = remap_scenario(b, "grdma", true, T, &regs, &reused);
		if (arrived >= 0) {
			std::snprintf(detail, sizeof(detail),
				      "%s, %ld registration(s), the write %s",
				      reused ? "old registration reused" : "new registration", regs,
				      arrived ? "arrived" : "went to the old pages");
			result(!arrived && reused, T, detail);
		}
	}
	for (int raw = 1; raw >= 0; raw--) {
		const char *T = raw ? "mrnotify, raw munmap + mmap: a new registration, the RDMA "
				      "WRITE arrives"
				    : "mrnotify, munmap + mmap through libc: a new registration, "
				      "the RDMA WRITE arrives";
		arrived = remap_scenario(b, "mrnotify", raw, T, &regs, &reused);
		if (arrived >= 0) {
			std::snprintf(detail, sizeof(detail), "%ld registrations, the write %s",
				      regs, arrived ? "arrived" : "went to the old pages (STALE)");
			result(arrived && !reused && regs == 2, T, detail);
		}
	}

	// Rounds: hits between remaps; every write must arrive, no stale hit.
	{
		const char *T = "mrnotify, 50 rounds of 4 writes with a raw remap between rounds: "
				"every write arrives";
		ctx c{&rc, 0, 0};
		mca_rcache_base_module_t *m = create("mrnotify", &c);
		const size_t len = 2 * kPage;
		char *buf = map_anon(nullptr, len, false);
		int lost = 0, rounds = 50;

		if (!m || !buf) {
			result(false, T, "set-up failed");
			return;
		}
		for (int r = 0; r < rounds; r++) {
			std::memset(buf, 0, len);
			for (int w = 0; w < 4; w++) {
				const char ch = static_cast<char>('a' + (r + w) % 26);

				if (!b.write_through(m, buf, len, ch) || !all_are(buf, len, ch))
					lost++;
			}
			syscall(SYS_munmap, buf, len);
			if (map_anon(buf, len, true) != buf) {
				result(false, T, "mmap MAP_FIXED failed");
				return;
			}
		}
		mca_rcache_base_module_destroy(m);
		munmap(buf, len);
		std::snprintf(detail, sizeof(detail),
			      "%d of %d writes lost, %ld registrations (%d expected)", lost,
			      rounds * 4, c.regs, rounds);
		result(lost == 0 && c.regs == rounds && c.regs == c.deregs, T, detail);
	}
}

} // namespace

int main(int argc, char **argv)
{
	if (access("/sys/class/infiniband/rxe0", F_OK) != 0) {
		std::printf("1..0 # SKIP no rxe0 (run in the guest with --rxe)\n");
		return 77;
	}
	if (opal_init(&argc, &argv) != OPAL_SUCCESS ||
	    mca_base_framework_open(&opal_rcache_base_framework, MCA_BASE_OPEN_DEFAULT) !=
		    OPAL_SUCCESS) {
		std::fprintf(stderr,
			     "rcache_rxe_test: cannot initialize OPAL and the rcache framework\n");
		return 2;
	}
	try {
		RcLoopback rc("rxe0");
		run(rc);
	} catch (const std::exception &e) {
		std::printf("not ok - verbs: %s\n", e.what());
		failed++;
	}
	std::printf("# rcache_rxe_test: %d passed, %d failed\n", passed, failed);
	std::printf("1..%d\n", passed + failed); // TAP's plan: none after a crash
	std::fflush(stdout);
	mca_base_framework_close(&opal_rcache_base_framework);
	return failed ? 1 : 0;
}

// SPDX-License-Identifier: BSD-3-Clause
#include "config.h"
#include "ucs_baseline.h"

extern "C" {
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "ucx_versions.h"
}

#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <stdexcept>

namespace mrn::bench {

struct UcsOps {
	static ucs_status_t reg(void *ctx, ucs_rcache_t *, void *, ucs_rcache_region_t *, uint16_t)
	{
		static_cast<UcsRcache *>(ctx)->registrations_++;
		return UCS_OK;
	}
	static void dereg(void *, ucs_rcache_t *, ucs_rcache_region_t *) {}
	// UCX 1.18 calls it, unchecked, for each region a new one absorbs.
	static void merge(void *, ucs_rcache_t *, void *, ucs_rcache_region_t *) {}
};

namespace {
ucs_rcache_ops_t make_ops()
{
	ucs_rcache_ops_t o{};
	o.mem_reg = UcsOps::reg;
	o.mem_dereg = UcsOps::dereg;
	MRN_RCACHE_OPS_SET_MERGE(&o, UcsOps::merge);
	return o;
}
ucs_rcache_ops_t ops = make_ops();
const size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
} // namespace

UcsRcache::UcsRcache()
{
	ucs_rcache_params_t p{};
	// The region plus an 8-byte payload, like ours.
	p.region_struct_size = sizeof(ucs_rcache_region_t) + 8;
	MRN_RCACHE_PARAMS_ALIGN(&p, page_size, page_size);
	p.ucm_events = UCM_EVENT_VM_UNMAPPED;
	p.ucm_event_priority = 1000;
	p.ops = &ops;
	p.context = this;
	p.flags = 0;
	p.max_regions = ULONG_MAX;
	p.max_size = SIZE_MAX;
	p.max_unreleased = SIZE_MAX;
	description_ = "ucs_rcache (UCX " MRN_UCX_VERSION ", UCM unmap events)";
	if (ucs_rcache_create(&p, "bench", nullptr, &rcache_) == UCS_OK)
		return;
	// Without UCM hooks (UCX_MEM_EVENTS=no) only an event-less cache works.
	p.ucm_events = 0;
	description_ = "ucs_rcache (UCX " MRN_UCX_VERSION ", no UCM events)";
	if (ucs_rcache_create(&p, "bench", nullptr, &rcache_) != UCS_OK)
		throw std::runtime_error("ucs_rcache_create failed");
}

UcsRcache::~UcsRcache()
{
	ucs_rcache_destroy(rcache_);
}

ucs_rcache_region *UcsRcache::get(void *addr, size_t len)
{
	ucs_rcache_region_t *r = nullptr;
	const ucs_status_t st =
		MRN_RCACHE_GET_ALIGNED(ucs_rcache_get, rcache_, addr, len, page_size,
				       PROT_READ | PROT_WRITE, nullptr, &r);
	if (st != UCS_OK)
		return nullptr;
	return r;
}

void UcsRcache::put(ucs_rcache_region *r)
{
	ucs_rcache_region_put(rcache_, r);
}

} // namespace mrn::bench

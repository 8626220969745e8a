// SPDX-License-Identifier: BSD-3-Clause
#include "config.h"
#include "ucs_baseline.h"

extern "C" {
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "ucx_versions.h"
}

#ifdef MRN_HAVE_UCS_RCACHE_INL
// Internal headers (rcache_int.h and what it needs) from the same release's
// source tree, after the installed ones. They are C; UCP includes them from
// C, so their casts from void * are C's.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
extern "C" {
// What rcache.inl uses without including it.
#include <ucs/datastruct/queue.h>
#include <ucs/debug/log.h>
#include <ucs/profile/profile.h>

#include <ucs/memory/rcache.inl>
}
#pragma GCC diagnostic pop
#endif

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

#ifdef MRN_HAVE_UCS_RCACHE_INL
std::string UcsRcache::unsafe_missing()
{
	// The source's layout of struct ucs_rcache against the library's: a
	// cache made by libucs must read back as made.
	try {
		UcsRcache probe;
		if (!probe.rcache_->name || std::string(probe.rcache_->name) != "bench")
			return "UCX's source tree does not match the installed library "
			       "(struct ucs_rcache reads wrong)";
		static char buf[2 * 4096] __attribute__((aligned(4096)));
		ucs_rcache_region *r = probe.get(buf, 4096);
		if (!r)
			return "ucs_rcache_get failed";
		probe.put(r);
		ucs_rcache_region *u = ucs_rcache_lookup_unsafe(probe.rcache_, buf, 4096,
								page_size,
								PROT_READ | PROT_WRITE);
		if (u)
			ucs_rcache_region_put_unsafe(probe.rcache_, u);
		if (u != r)
			return "ucs_rcache_lookup_unsafe does not find what ucs_rcache_get "
			       "cached (layouts differ?)";
	} catch (const std::exception &e) {
		return e.what();
	}
	return {};
}

ucs_rcache_region *UcsRcache::get_unsafe(void *addr, size_t len)
{
	ucs_rcache_region_t *r =
		ucs_rcache_lookup_unsafe(rcache_, addr, len, page_size, PROT_READ | PROT_WRITE);
	return r ? r : get(addr, len);
}

void UcsRcache::put_unsafe(ucs_rcache_region *r)
{
	ucs_rcache_region_put_unsafe(rcache_, r);
}
#else
std::string UcsRcache::unsafe_missing()
{
#if MRN_UCX_UCP_INLINES_HITS
	return "built without UCX's source (configure --with-ucx-source=DIR: "
	       "rcache.inl and rcache_int.h are not installed)";
#else
	return "UCX " MRN_UCX_VERSION " has no lock-free lookup (UCP's from 1.14)";
#endif
}

ucs_rcache_region *UcsRcache::get_unsafe(void *addr, size_t len)
{
	return get(addr, len);
}

void UcsRcache::put_unsafe(ucs_rcache_region *r)
{
	put(r);
}
#endif

} // namespace mrn::bench

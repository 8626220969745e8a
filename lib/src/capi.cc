// SPDX-License-Identifier: BSD-3-Clause
// The C API: thin wrappers over mrn::Cache. No exception crosses it.
#include "cache.h"
#include "log.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <new>

using mrn::Cache;
using mrn::Entry;

namespace {

Cache *impl(mrn_cache_t *c)
{
	return reinterpret_cast<Cache *>(c);
}
const Cache *impl(const mrn_cache_t *c)
{
	return reinterpret_cast<const Cache *>(c);
}
Entry *impl(mrn_entry_t *e)
{
	return reinterpret_cast<Entry *>(e);
}
const Entry *impl(const mrn_entry_t *e)
{
	return reinterpret_cast<const Entry *>(e);
}

// No exception may cross into C: out of memory becomes -ENOMEM (or the
// given value), anything else (a bug of ours, or a system_error) -EIO.
template <typename F>
auto guarded(F f, decltype(f()) on_oom, decltype(f()) on_error = -EIO) -> decltype(f())
{
	try {
		return f();
	} catch (const std::bad_alloc &) {
		mrn::log(0, "out of memory");
		return on_oom;
	} catch (const std::exception &e) {
		mrn::log(0, "internal error: %s", e.what());
		return on_error;
	} catch (...) {
		mrn::log(0, "internal error");
		return on_error;
	}
}

template <typename E>
bool in_range(const E &field, E lowest, E highest)
{
	std::underlying_type_t<E> v;
	static_assert(sizeof(v) == sizeof(field), "an enum is stored as its underlying type");
	std::memcpy(&v, &field, sizeof(v));
	return v >= std::underlying_type_t<E>(lowest) && v <= std::underlying_type_t<E>(highest);
}

} // namespace

extern "C" int mrn_cache_create(const struct mrn_config *config, mrn_cache_t **cache)
{
	if (!config || !cache || config->size < sizeof(mrn_config))
		return -EINVAL;
	// A C caller can store any int in an enum field: read it as one
	// (loading an out-of-range enum is undefined in C++).
	if (!(in_range(config->monitor, MRN_MONITOR_AUTO, MRN_MONITOR_NONE) ||
	      in_range(config->monitor, MRN_MONITOR_EXTERNAL, MRN_MONITOR_AUTO_EXTERNAL)) ||
	    !in_range(config->fork_policy, MRN_FORK_DONTFORK, MRN_FORK_AUTO)) {
		mrn::log(0, "mrn_cache_create: unknown monitor or fork policy");
		return -EINVAL;
	}
	return guarded(
		[&] {
			std::unique_ptr<Cache> c;
			const mrn_monitor_t want = config->monitor;
			const int rc = Cache::create(
				*config,
				[want](std::unique_ptr<mrn::Monitor> *m, std::string *why) {
					return mrn::open_monitor(want, m, why);
				},
				&c);
			if (rc == 0)
				*cache = reinterpret_cast<mrn_cache_t *>(c.release());
			return rc;
		},
		-ENOMEM);
}

extern "C" void mrn_cache_destroy(mrn_cache_t *cache)
{
	// delete of nullptr is a no-op, as free(NULL) is. ~Cache allocates
	// nothing and throws nothing.
	delete impl(cache);
}

extern "C" int mrn_get(mrn_cache_t *cache, void *addr, size_t len, uint32_t access, void *arg,
		       mrn_entry_t **entry)
{
	if (!cache || !entry)
		return -EINVAL;
	return guarded(
		[&] {
			Entry *e = nullptr;
			const int rc = impl(cache)->get(addr, len, access, &e, arg);
			if (rc == 0)
				*entry = reinterpret_cast<mrn_entry_t *>(e);
			return rc;
		},
		-ENOMEM);
}

extern "C" int mrn_get_flags(mrn_cache_t *cache, void *addr, size_t len, uint32_t access,
			     uint32_t flags, void *arg, mrn_entry_t **entry)
{
	if (!cache || !entry || (flags & ~(MRN_GET_UNCACHED | MRN_GET_EXACT)) ||
	    ((flags & MRN_GET_EXACT) && !(flags & MRN_GET_UNCACHED)))
		return -EINVAL;
	if (!(flags & MRN_GET_UNCACHED))
		return mrn_get(cache, addr, len, access, arg, entry);
	return guarded(
		[&] {
			Entry *e = nullptr;
			const int rc = impl(cache)->get_uncached(addr, len, access,
								 flags & MRN_GET_EXACT, arg, &e);
			if (rc == 0)
				*entry = reinterpret_cast<mrn_entry_t *>(e);
			return rc;
		},
		-ENOMEM);
}

extern "C" void mrn_put(mrn_cache_t *cache, mrn_entry_t *entry)
{
	if (!cache || !entry)
		return;
	guarded(
		[&] {
			impl(cache)->put(impl(entry));
			return 0;
		},
		0, 0);
}

extern "C" int mrn_find(mrn_cache_t *cache, void *addr, size_t len, mrn_entry_t **entry)
{
	if (!cache || !entry)
		return -EINVAL;
	return guarded(
		[&] {
			Entry *e = nullptr;
			const int rc = impl(cache)->find(addr, len, &e);
			if (rc == 0)
				*entry = reinterpret_cast<mrn_entry_t *>(e);
			return rc;
		},
		-ENOMEM);
}

// The accessors answer NULL or 0 for a NULL entry rather than crash.
extern "C" void *mrn_entry_payload(const mrn_entry_t *entry)
{
	return entry ? const_cast<Entry *>(impl(entry))->payload() : nullptr;
}
extern "C" mrn_entry_t *mrn_entry_from_payload(void *payload)
{
	return payload ? reinterpret_cast<mrn_entry_t *>(Entry::from_payload(payload)) : nullptr;
}
extern "C" void *mrn_entry_addr(const mrn_entry_t *entry)
{
	return entry ? reinterpret_cast<void *>(impl(entry)->start) : nullptr;
}
extern "C" size_t mrn_entry_length(const mrn_entry_t *entry)
{
	return entry ? impl(entry)->length() : 0;
}
extern "C" uint32_t mrn_entry_access(const mrn_entry_t *entry)
{
	return entry ? impl(entry)->access : 0;
}

extern "C" long mrn_invalidate_range(mrn_cache_t *cache, void *addr, size_t len)
{
	if (!cache)
		return -EINVAL;
	return guarded([&] { return impl(cache)->invalidate(addr, len); }, long(-ENOMEM));
}

// Async-signal-safe: no guard (nothing here throws or allocates).
extern "C" int mrn_report_unmap(mrn_cache_t *cache, void *addr, size_t len)
{
	if (!cache)
		return -EINVAL;
	return impl(cache)->report_unmap(addr, len);
}

extern "C" int mrn_evict_one(mrn_cache_t *cache)
{
	if (!cache)
		return 0;
	return guarded([&] { return impl(cache)->evict_one() ? 1 : 0; }, 0, 0);
}

extern "C" long mrn_flush(mrn_cache_t *cache)
{
	if (!cache)
		return -EINVAL;
	return guarded([&] { return impl(cache)->flush(); }, long(-ENOMEM));
}

extern "C" mrn_monitor_t mrn_cache_monitor(const mrn_cache_t *cache)
{
	return cache ? impl(cache)->monitor_kind() : MRN_MONITOR_NONE;
}

// The statistics a caller built before the uffd fields knows of.
constexpr size_t kStatsSizeV1 = offsetof(mrn_stats, uffd_ranges);

extern "C" int mrn_cache_stats(mrn_cache_t *cache, struct mrn_stats *stats, size_t size)
{
	if (!cache || !stats || size < kStatsSizeV1)
		return -EINVAL;
	return guarded(
		[&] {
			mrn_stats all{};
			impl(cache)->stats(&all);
			std::memcpy(stats, &all, std::min(size, sizeof(all)));
			return 0;
		},
		-ENOMEM);
}

extern "C" void mrn_cache_print_stats(mrn_cache_t *cache)
{
	if (!cache)
		return;
	guarded(
		[&] {
			impl(cache)->print_stats();
			return 0;
		},
		0, 0);
}

extern "C" size_t mrn_cache_bytes_per_entry(mrn_cache_t *cache)
{
	if (!cache)
		return 0;
	return guarded([&] { return impl(cache)->bytes_per_entry(); }, size_t(0), size_t(0));
}

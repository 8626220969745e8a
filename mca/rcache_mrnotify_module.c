/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rcache/mrnotify: the module functions.
 *
 * Locking: this file takes no lock of its own. The library drops its lock
 * around the transport's register and deregister functions, and the memory
 * hook path (invalidate_range, monitor none only) only queues the range in a
 * lock-free ring. So no thread can hold a lock here that a memory hook, or
 * the transport's deregister, waits for: grdma's eviction-versus-hook
 * deadlock (open-mpi/ompi#7303) has no counterpart.
 */
#include "rcache_mrnotify.h"

#include "opal/util/output.h"
#include "opal/util/sys_limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * The module and flags of the registration in progress on this thread: the
 * library calls our register callback synchronously from mrn_get(), and the
 * callback needs both to fill in the registration.
 */
struct mrn_reg_call {
	mrn_rcache_module_t *module;
	uint32_t flags;
};
static __thread const struct mrn_reg_call *mrn_current_call;

static int opal_to_errno(int rc)
{
	switch (rc) {
	case OPAL_SUCCESS:
		return 0;
	case OPAL_ERR_OUT_OF_RESOURCE:
	case OPAL_ERR_TEMP_OUT_OF_RESOURCE:
		/* The library evicts idle registrations and retries, as grdma. */
		return -ENOMEM;
	default:
		return -EIO;
	}
}

static int errno_to_opal(int rc)
{
	switch (rc) {
	case 0:
		return OPAL_SUCCESS;
	case -ENOMEM:
	case -EAGAIN:
		return OPAL_ERR_OUT_OF_RESOURCE;
	case -EINVAL:
		return OPAL_ERR_BAD_PARAM;
	case -ENOENT:
		return OPAL_ERR_NOT_FOUND;
	default:
		return OPAL_ERROR;
	}
}

/* Fills in the framework's part of a registration for [addr, addr + len). */
static void reg_init(mca_rcache_base_registration_t *reg, size_t sizeof_reg,
		     mca_rcache_base_module_t *rcache, void *addr, size_t len, uint32_t flags,
		     int32_t access)
{
	memset(reg, 0, sizeof_reg);
	OBJ_CONSTRUCT(reg, mca_rcache_base_registration_t);
	reg->rcache = rcache;
	reg->base = addr;
	reg->bound = (unsigned char *)addr + len - 1;	/* inclusive */
	reg->flags = flags;
	reg->access_flags = access;
	reg->ref_count = 1;
}

int mrn_reg_callback(void *context, void *addr, size_t len, uint32_t access, void *payload)
{
	mrn_shared_cache_t *s = context;
	const struct mrn_reg_call *call = mrn_current_call;
	mca_rcache_base_registration_t *reg = payload;

	/*
	 * Fields are set before the transport's function runs: openib reads
	 * them there. reg->rcache is the module that asked; transports
	 * release through their own module pointer, never through it.
	 */
	reg_init(reg, s->sizeof_reg, call ? &call->module->super : NULL, addr, len,
		 call ? call->flags : 0, (int32_t)access);
	return opal_to_errno(s->register_mem(s->reg_data, addr, len, reg));
}

int mrn_dereg_callback(void *context, void *payload)
{
	mrn_shared_cache_t *s = context;
	mca_rcache_base_registration_t *reg = payload;

	reg->ref_count = 0;
	return opal_to_errno(s->deregister_mem(s->reg_data, reg));
}

/* --- invalidations from Open MPI's memory hooks (monitor none) -------------- */

void mrn_hook_ring_init(struct mrn_hook_ring *r)
{
	for (uint64_t i = 0; i < MRN_HOOK_RING_SIZE; i++)
		r->slots[i].seq = i;
}

/*
 * Bounded multi-producer queue (each slot's sequence says whose turn it
 * is). Runs inside free()/munmap() on any thread: no lock, no allocation.
 */
static void hook_ring_push(struct mrn_hook_ring *r, uintptr_t start, size_t len)
{
	uint64_t pos = __atomic_load_n(&r->head, __ATOMIC_RELAXED);

	for (;;) {
		struct mrn_hook_slot *slot = &r->slots[pos % MRN_HOOK_RING_SIZE];
		const uint64_t seq = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);

		if (seq == pos) {
			if (__atomic_compare_exchange_n(&r->head, &pos, pos + 1, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				slot->start = start;
				slot->len = len;
				__atomic_store_n(&slot->seq, pos + 1, __ATOMIC_RELEASE);
				__atomic_fetch_add(&r->queued, 1, __ATOMIC_RELAXED);
				return;
			}
		} else if (seq < pos) {
			/* Full: the consumer drops everything instead. */
			__atomic_store_n(&r->overflow, 1, __ATOMIC_RELEASE);
			__atomic_fetch_add(&r->overflows, 1, __ATOMIC_RELAXED);
			return;
		} else {
			pos = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
		}
	}
}

static bool hook_ring_pop(struct mrn_hook_ring *r, uintptr_t *start, size_t *len)
{
	uint64_t pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);

	for (;;) {
		struct mrn_hook_slot *slot = &r->slots[pos % MRN_HOOK_RING_SIZE];
		const uint64_t seq = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);

		if (seq == pos + 1) {
			if (__atomic_compare_exchange_n(&r->tail, &pos, pos + 1, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				*start = slot->start;
				*len = slot->len;
				__atomic_store_n(&slot->seq, pos + MRN_HOOK_RING_SIZE,
						 __ATOMIC_RELEASE);
				return true;
			}
		} else if (seq < pos + 1) {
			return false;
		} else {
			pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
		}
	}
}

/* Applies what the hooks queued. Called with no lock held. */
static void hook_ring_drain(mrn_shared_cache_t *s)
{
	struct mrn_hook_ring *r = s->ring;
	uintptr_t start;
	size_t len;

	if (__atomic_load_n(&r->tail, __ATOMIC_RELAXED) ==
		    __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) &&
	    !__atomic_load_n(&r->overflow, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_exchange_n(&r->overflow, 0, __ATOMIC_ACQ_REL)) {
		/* Ranges were lost: nothing cached may be trusted. */
		const size_t all = ~(size_t)0 >> 1;

		mrn_log(2, "cache %s: memory hook queue overflowed; invalidating everything", s->name);
		(void)mrn_invalidate_range(s->cache, NULL, all);
	}
	while (hook_ring_pop(r, &start, &len)) {
		const long n = mrn_invalidate_range(s->cache, (void *)start, len);

		if (n > 0)
			__atomic_fetch_add(&s->hook_invalidations, (uint64_t)n, __ATOMIC_RELAXED);
	}
}

static inline void sync_hooks(mrn_shared_cache_t *s)
{
	if (s->ring)
		hook_ring_drain(s);
}

static int mrn_invalidate_range_hook(mca_rcache_base_module_t *rcache, void *addr, size_t size)
{
	mrn_rcache_module_t *m = (mrn_rcache_module_t *)rcache;

	/*
	 * Always success: any error makes Open MPI end the process. An entry
	 * still in use is deregistered when its last user releases it.
	 */
	if (size)
		hook_ring_push(m->shared->ring, (uintptr_t)addr, size);
	return OPAL_SUCCESS;
}

/* --- registrations outside the cache ----------------------------------------- */

/*
 * BYPASS (never looked up or kept), PERSIST (always registered anew, never
 * idle in the cache) and INVALID (must not be handed out again): a
 * registration of their own, deregistered when released.
 */
static int register_uncached(mrn_rcache_module_t *m, void *addr, size_t size, uint32_t flags,
			     int32_t access, mca_rcache_base_registration_t **out)
{
	mrn_shared_cache_t *s = m->shared;
	const uintptr_t page = (uintptr_t)opal_getpagesize();
	const uintptr_t base = (uintptr_t)addr & ~(page - 1);
	const uintptr_t end = ((uintptr_t)addr + size + page - 1) & ~(page - 1);
	mca_rcache_base_registration_t *reg;
	void *mem;
	int rc;

	if (posix_memalign(&mem, 64, s->sizeof_reg))
		return OPAL_ERR_OUT_OF_RESOURCE;
	reg = mem;
	reg_init(reg, s->sizeof_reg, &m->super, (void *)base, end - base,
		 flags | MRN_REG_FLAG_UNCACHED, access);
	while ((rc = s->register_mem(s->reg_data, (void *)base, end - base, reg)) ==
	       OPAL_ERR_OUT_OF_RESOURCE) {
		/* As grdma: give back one idle registration and try again. */
		if (mrn_evict_one(s->cache) <= 0)
			break;
	}
	if (rc != OPAL_SUCCESS) {
		free(mem);
		return rc;
	}
	__atomic_fetch_add(&s->uncached_live, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->uncached_total, 1, __ATOMIC_RELAXED);
	*out = reg;
	return OPAL_SUCCESS;
}

/* --- the module ----------------------------------------------------------------- */

static int mod_register(mca_rcache_base_module_t *rcache, void *addr, size_t size, uint32_t flags,
			int32_t access_flags, mca_rcache_base_registration_t **reg)
{
	mrn_rcache_module_t *m = (mrn_rcache_module_t *)rcache;
	mrn_shared_cache_t *s = m->shared;
	struct mrn_reg_call call = {m, flags};
	mrn_entry_t *e;
	int rc;

	*reg = NULL;
	if (OPAL_UNLIKELY(flags & MCA_RCACHE_FLAGS_CUDA_GPU_MEM))
		return OPAL_ERR_NOT_SUPPORTED;
	if (OPAL_UNLIKELY(size == 0))
		size = 1;	/* a registration covers at least its page */
	sync_hooks(s);
	if (flags & (MCA_RCACHE_FLAGS_CACHE_BYPASS | MCA_RCACHE_FLAGS_PERSIST |
		     MCA_RCACHE_FLAGS_INVALID))
		return register_uncached(m, addr, size, flags, access_flags, reg);

	mrn_current_call = &call;
	rc = mrn_get(s->cache, addr, size, (uint32_t)access_flags, &e);
	mrn_current_call = NULL;
	if (OPAL_UNLIKELY(rc < 0))
		return errno_to_opal(rc);
	*reg = mrn_entry_payload(e);
	return OPAL_SUCCESS;
}

static int mod_deregister(mca_rcache_base_module_t *rcache, mca_rcache_base_registration_t *reg)
{
	mrn_shared_cache_t *s = ((mrn_rcache_module_t *)rcache)->shared;
	int rc;

	if (OPAL_UNLIKELY(reg->flags & MRN_REG_FLAG_UNCACHED)) {
		reg->ref_count = 0;
		rc = s->deregister_mem(s->reg_data, reg);
		__atomic_fetch_sub(&s->uncached_live, 1, __ATOMIC_RELAXED);
		free(reg);
		return rc;
	}
	/* Idle (kept for reuse) or deregistered now: the library decides. */
	mrn_put(s->cache, mrn_entry_from_payload(reg));
	return OPAL_SUCCESS;
}

static int mod_find(mca_rcache_base_module_t *rcache, void *addr, size_t size,
		    mca_rcache_base_registration_t **reg)
{
	mrn_shared_cache_t *s = ((mrn_rcache_module_t *)rcache)->shared;
	mrn_entry_t *e;
	int rc;

	*reg = NULL;
	sync_hooks(s);
	rc = mrn_find(s->cache, addr, size ? size : 1, &e);
	if (rc < 0)
		return errno_to_opal(rc);
	/* A reference: released with rcache_deregister, as with grdma. */
	*reg = mrn_entry_payload(e);
	return OPAL_SUCCESS;
}

static bool mod_evict(mca_rcache_base_module_t *rcache)
{
	mrn_shared_cache_t *s = ((mrn_rcache_module_t *)rcache)->shared;

	sync_hooks(s);
	return mrn_evict_one(s->cache) > 0;
}

static void mod_finalize(mca_rcache_base_module_t *rcache)
{
	mrn_rcache_module_t *m = (mrn_rcache_module_t *)rcache;

	if (m->shared->ring)
		hook_ring_drain(m->shared);
	mrn_shared_release(m->shared);
	OBJ_DESTRUCT(&m->super.lock);
	free(m->name);
	free(m);
}

void mrn_module_setup(mrn_rcache_module_t *m)
{
	m->super.rcache_component = &mca_rcache_mrnotify_component.super;
	m->super.rcache_register = mod_register;
	m->super.rcache_deregister = mod_deregister;
	m->super.rcache_find = mod_find;
	/*
	 * With the kernel or uffd monitor the library hears of every unmap
	 * itself: no invalidate function, so Open MPI's memory hooks skip this
	 * module (and the job may run with --mca memory ^patcher).
	 */
	m->super.rcache_invalidate_range = m->shared->hooks ? mrn_invalidate_range_hook : NULL;
	m->super.rcache_finalize = mod_finalize;
	m->super.rcache_evict = mod_evict;
	/* Unused by this module; constructed because the framework owns it. */
	OBJ_CONSTRUCT(&m->super.lock, opal_mutex_t);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Our callbacks around each cache's: every cache that listens to
 * VM_UNMAPPED gets them at ucs_rcache_create(). They ask the kernel to
 * watch each region's range (the region's, not the user buffer's: UCX merges
 * and aligns regions) before UCX pins it, and stop watching when UCX
 * deregisters it. Also the two UCM calls a cache's life goes through:
 * ucm_set_event_handler() (to learn the cache's own handler) and
 * ucm_test_external_events() (answered by our self-test).
 */
#include "plugin.h"

#include <linux/mrnotify.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set while our ucs_rcache_create() runs UCX's, to see its event handler. */
static __thread mrn_ucx_rcache_t *mrn_ucx_creating;

static mrn_ucx_region_t *mrn_ucx_trailer(mrn_ucx_rcache_t *rc, ucs_rcache_region_t *region)
{
	return (mrn_ucx_region_t *)((char *)region + rc->trailer);
}

/*
 * Keeps a region nobody watches out of its own cache, and only its own:
 * the cache's VM_UNMAPPED handler finds its page-table lock taken (UCX
 * calls mem_reg with it held), queues the range, and the cache's next
 * lookup drops the region. Other caches' regions of the range are watched,
 * and stay.
 */
static void mrn_ucx_drop_unwatched(mrn_ucx_rcache_t *rc, void *start, size_t len)
{
	ucm_event_t event;

	if (rc->unmapped_cb == NULL) {
		/* Not seen (cannot happen with UCX 1.13): every cache then. */
		ucm_vm_munmap(start, len);
		return;
	}
	memset(&event, 0, sizeof(event));
	event.vm_unmapped.address = start;
	event.vm_unmapped.size = len;
	rc->unmapped_cb(UCM_EVENT_VM_UNMAPPED, &event, rc->unmapped_arg);
}

static ucs_status_t mrn_ucx_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
				    ucs_rcache_region_t *region, uint16_t flags)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);
	void *start = (void *)region->super.start;
	size_t len = region->super.end - region->super.start;
	ucs_status_t status;
	int err = -ENODEV;

	/*
	 * Watch before UCX pins: an unmap racing the registration then makes
	 * the (fresh) region look dead, which costs a miss, never a stale hit.
	 * A range another cache's region already watches (UCP's cache
	 * registers each region on the IB domain, whose cache then registers
	 * the same range) shares that watch: the kernel reports the range,
	 * which removes it from every cache.
	 */
	mrn_ucx_lock();
	tr->hold = 0;
	if (mrn_ucx.set != NULL) {
		int shared = 0;

		err = mrn_watch_set_hold(mrn_ucx.set, start, len, &tr->hold, &shared);
		if (err == 0) {
			mrn_ucx.stats.watched++;
			mrn_ucx.stats.shared += shared;
		}
	}
	mrn_ucx_unlock();

	status = rc->ops->mem_reg(rc->context, rcache, arg, region, flags);

	if (status != UCS_OK) {
		/* UCX keeps a failed region without deregistering it. */
		mrn_ucx_lock();
		if (tr->hold != 0 && mrn_watch_set_release(mrn_ucx.set, tr->hold) >= 0)
			mrn_ucx.stats.watched--;
		tr->hold = 0;
		mrn_ucx_unlock();
		return status;
	}

	if (err != 0) {
		/*
		 * Nobody would tell us when this region dies, so it must not
		 * stay cached. The caller still gets it, registered and valid,
		 * for this use.
		 */
		mrn_ucx_count(&mrn_ucx.stats.watch_failures, 1);
		ucs_diag("mrnotify: %s: cannot watch %p..%p (%s); not caching it", rc->name, start,
			 (char *)start + len, strerror(-err));
		mrn_ucx_drop_unwatched(rc, start, len);
	}
	return UCS_OK;
}

static void mrn_ucx_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);

	mrn_ucx_lock();
	/* A region from before fork() holds in the parent's set: refused. */
	if (tr->hold != 0) {
		const int rc_release = mrn_watch_set_release(mrn_ucx.set, tr->hold);

		if (rc_release >= 0)
			mrn_ucx.stats.unwatched++;
		if (rc_release == 1)
			mrn_ucx.stats.unwatched_dirty++;
	}
	tr->hold = 0;
	mrn_ucx_unlock();
	rc->ops->mem_dereg(rc->context, rcache, region);
}

static void mrn_ucx_dump_region(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region,
				char *buf, size_t max)
{
	mrn_ucx_rcache_t *rc = context;
	mrn_ucx_region_t *tr = mrn_ucx_trailer(rc, region);
	size_t n;

	if (rc->ops->dump_region != NULL)
		rc->ops->dump_region(rc->context, rcache, region, buf, max);
	else if (max > 0)
		buf[0] = '\0';
	n = strnlen(buf, max);
	if (n + 1 < max)
		snprintf(buf + n, max - n, " mrnotify_hold=0x%" PRIx64, tr->hold);
}

#if MRN_UCX_OPS_HAVE_MERGE
/* UCX calls it, unchecked, for each region a new one absorbs. */
static void mrn_ucx_merge(void *context, ucs_rcache_t *rcache, void *arg,
			  ucs_rcache_region_t *region)
{
	mrn_ucx_rcache_t *rc = context;

	if (rc->ops->merge != NULL)
		rc->ops->merge(rc->context, rcache, arg, region);
}
#endif

static const ucs_rcache_ops_t mrn_ucx_ops = {
	.mem_reg = mrn_ucx_mem_reg,
	.mem_dereg = mrn_ucx_mem_dereg,
#if MRN_UCX_OPS_HAVE_MERGE
	.merge = mrn_ucx_merge,
#endif
	.dump_region = mrn_ucx_dump_region,
};

ucs_status_t mrn_ucx_rcache_create(const ucs_rcache_params_t *params, const char *name,
				   ucs_stats_node_t *stats_parent, ucs_rcache_t **rcache_p)
{
	ucs_rcache_params_t ours;
	mrn_ucx_rcache_t *rc;
	ucs_status_t status;

	mrn_ucx_activate();
	/* The params are read only when active: their layout is then the headers'. */
	if (mrn_ucx_state() != MRN_UCX_STATE_ACTIVE ||
	    !(params->ucm_events & UCM_EVENT_VM_UNMAPPED))
		return mrn_ucx.real_create(params, name, stats_parent, rcache_p);

	rc = calloc(1, sizeof(*rc));
	if (rc == NULL)
		return UCS_ERR_NO_MEMORY;
	rc->ops = params->ops;
	rc->context = params->context;
	rc->trailer = (params->region_struct_size + 7) & ~(size_t)7;
	snprintf(rc->name, sizeof(rc->name), "%s", name ? name : "?");

	ours = *params;
	ours.ops = &mrn_ucx_ops;
	ours.context = rc;
	ours.region_struct_size = rc->trailer + sizeof(mrn_ucx_region_t);
	mrn_ucx_creating = rc;
	status = mrn_ucx.real_create(&ours, name, stats_parent, rcache_p);
	mrn_ucx_creating = NULL;
	if (status != UCS_OK) {
		free(rc);
		return status;
	}
	rc->rcache = *rcache_p;
	mrn_ucx_lock();
	rc->next = mrn_ucx.rcaches;
	mrn_ucx.rcaches = rc;
	mrn_ucx.stats.rcaches++;
	mrn_ucx_hook_attach(rc);
	mrn_ucx_unlock();
	ucs_debug("mrnotify: rcache %s (%p): regions watched by %s", rc->name, (void *)rc->rcache,
		  MRN_DEVICE_PATH);
	return UCS_OK;
}

void mrn_ucx_rcache_destroy(ucs_rcache_t *rcache)
{
	mrn_ucx_rcache_t **pp, *rc = NULL;

	/*
	 * Out of the list before UCX frees the cache: a fork or a forked
	 * child's reopen walks the list and points each cache at a new word
	 * (lookup_hook.c).
	 */
	mrn_ucx_lock();
	for (pp = &mrn_ucx.rcaches; *pp != NULL; pp = &(*pp)->next) {
		if ((*pp)->rcache == rcache) {
			rc = *pp;
			*pp = rc->next;
			break;
		}
	}
	mrn_ucx_unlock();
	/* UCX deregisters the remaining regions through our callbacks (rc). */
	mrn_ucx.real_destroy(rcache);
	free(rc);
}

/*
 * The rcache registers its VM_UNMAPPED handler while UCX creates it: note
 * the handler, which invalidates a range in that cache alone.
 */
ucs_status_t mrn_ucx_set_event_handler(int events, int priority, ucm_event_callback_t cb,
				       void *arg)
{
	mrn_ucx_rcache_t *rc = mrn_ucx_creating;

	/*
	 * Decided before the first handler for these events: once the plugin
	 * has declared VM_UNMAPPED external, UCM installs no hook for it, and
	 * every cache, whoever creates it, hears of unmaps from the kernel.
	 */
	if (events & (UCM_EVENT_VM_MAPPED | UCM_EVENT_VM_UNMAPPED))
		mrn_ucx_activate();
	if (rc != NULL && (events & UCM_EVENT_VM_UNMAPPED)) {
		rc->unmapped_cb = cb;
		rc->unmapped_arg = arg;
	}
	return mrn_ucx.real_set_handler(events, priority, cb, arg);
}

ucs_status_t mrn_ucx_test_external_events(int events)
{
	const char *why = NULL;
	int rc;

	mrn_ucx_activate();
	if (mrn_ucx_state() == MRN_UCX_STATE_ACTIVE && (events & UCM_EVENT_VM_UNMAPPED)) {
		/*
		 * UCM's test wants the event inside munmap(); ours arrives
		 * before the next lookup, which is what caches need. Answer
		 * for VM_UNMAPPED with our own test, UCM for the rest.
		 */
		rc = mrn_ucx_self_test(&why);
		if (rc < 0) {
			ucs_warn("mrnotify: self-test failed: %s (%s)", why, strerror(-rc));
			return UCS_ERR_UNSUPPORTED;
		}
		events &= ~UCM_EVENT_VM_UNMAPPED;
		if (events == 0)
			return UCS_OK;
	}
	return mrn_ucx.real_test_external(events);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCX's lookup hook, where the running libucs has one: the external
 * validity source of ucx-plugin/upstream/ (a patch proposed to UCX, not in
 * any release). Each cache we wrap is handed the kernel's generation word
 * and a refresh: every lookup of that cache, UCP's inline one included,
 * then misses while the word moved, and ucs_rcache_get() calls the refresh,
 * our drain, before it takes a lock. UCX checks at lookup what the entry
 * points (entry_points.c) otherwise check at each call into UCP; they stay,
 * and cost their compare.
 *
 * Looked up by name when the shim attaches the backend, so that the one
 * build serves a stock UCX (no hook: nothing here runs) and a patched one
 * alike. UCX_MRNOTIFY_LOOKUP_HOOK=n
 * leaves it unused (the negative control of the hook's tests).
 */
#include "plugin.h"

typedef void (*mrn_ucx_refresh_fn)(void *arg, ucs_rcache_t *rcache);
typedef void (*mrn_ucx_set_validity_fn)(ucs_rcache_t *rcache, const volatile uint64_t *generation,
					mrn_ucx_refresh_fn refresh, void *arg);

static mrn_ucx_set_validity_fn mrn_ucx_set_validity;

void mrn_ucx_hook_resolve(void *(*real)(const char *name))
{
	*(void **)&mrn_ucx_set_validity = real("ucs_rcache_set_external_validity");
}

int mrn_ucx_hook_present(void)
{
	return mrn_ucx_set_validity != NULL;
}

/* UCX calls it, with none of the cache's locks held, when the word moved. */
static void mrn_ucx_hook_refresh(void *arg, ucs_rcache_t *rcache)
{
	(void)arg, (void)rcache;
	mrn_ucx_count(&mrn_ucx.stats.hook_refreshes, 1);
	mrn_ucx_drain();
}

/* With the lock held: RC's cache follows the word the hit paths follow. */
void mrn_ucx_hook_attach(mrn_ucx_rcache_t *rc)
{
	MRN_UCX_ASSERT_LOCKED();
	if (mrn_ucx_set_validity == NULL || !mrn_ucx.config.lookup_hook)
		return;
	mrn_ucx_set_validity(rc->rcache, mrn_ucx.hot->generation, mrn_ucx_hook_refresh, NULL);
	if (!rc->hooked)
		mrn_ucx.stats.hooked++;
	rc->hooked = 1;
}

/*
 * With the lock held, after the word changed (a forked child's, then its
 * own watch's): every hooked cache follows it. A refresh in progress ends
 * by noting the forked word's value, which the new word never takes (the
 * watch set's forked word, UINT64_MAX), so the next lookup refreshes once
 * more.
 */
void mrn_ucx_hook_follow(void)
{
	mrn_ucx_rcache_t *rc;

	MRN_UCX_ASSERT_LOCKED();

	for (rc = mrn_ucx.rcaches; rc != NULL; rc = rc->next)
		if (rc->hooked)
			mrn_ucx_hook_attach(rc);
}

/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UCX patch's own test (0001-ucs-rcache-external-validity-source.patch),
 * built against a UCX with the patch and its source tree (rcache.inl and
 * rcache_int.h, which UCX does not install): an rcache as UCP makes it
 * (synchronous events), a buffer registered and released, then its pages
 * replaced with a raw mmap(MAP_FIXED) system call, which UCM's hooks do not
 * see. A stand-in for the kernel module's dirty list and counter reports the
 * replacement: it moves the generation and, when asked, names the range.
 *
 *   ext_validity_test --with-source     the source set (expected: fresh)
 *   ext_validity_test --without-source  the negative control (stale)
 *
 * Prints what UCP's inline lookup (ucs_rcache_lookup_unsafe) and then
 * ucs_rcache_get returned: "fresh" when both missed the old region and a
 * new registration was made, "stale" when the old region came back. Exit
 * status 0 when the result is the one expected for the mode, 1 otherwise,
 * 2 on a usage or set-up error.
 */
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
/* What rcache.inl uses without including it, as UCP's sources have it. */
#include <ucs/datastruct/queue.h>
#include <ucs/debug/log.h>
#include <ucs/profile/profile.h>
#include <ucs/memory/rcache.inl>
#include <ucs/type/status.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BUF_LEN (64 * 1024)

static int registrations;

/* A region says which registration made it: a freed region's memory is
 * reused for the next one, so its address does not tell them apart. */
struct test_region {
	ucs_rcache_region_t super;
	int serial;
};

static int serial_of(ucs_rcache_region_t *region)
{
	return ucs_container_of(region, struct test_region, super)->serial;
}

static ucs_status_t mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
			    ucs_rcache_region_t *region, uint16_t flags)
{
	(void)context, (void)rcache, (void)arg, (void)flags;
	ucs_container_of(region, struct test_region, super)->serial = ++registrations;
	return UCS_OK;
}

static void mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
	(void)context, (void)rcache, (void)region;
}

static void dump_region(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region,
			char *buf, size_t max)
{
	(void)context, (void)rcache, (void)region;
	snprintf(buf, max, "test region");
}

static const ucs_rcache_ops_t ops = {
	.mem_reg = mem_reg, .mem_dereg = mem_dereg, .dump_region = dump_region};

/* The stand-in for the module: a counter and the one range it saw die. */
struct source {
	volatile uint64_t generation;
	void *stale;
	size_t stale_len;
	int refreshes;
};

static void refresh(void *arg, ucs_rcache_t *rcache)
{
	struct source *s = arg;

	s->refreshes++;
	if (s->stale) {
		ucs_rcache_invalidate_external(rcache, s->stale, s->stale_len);
		s->stale = NULL;
	}
}

int main(int argc, char **argv)
{
	struct source src = {.generation = 7};
	ucs_rcache_params_t params;
	ucs_rcache_region_t *first, *looked, *got;
	ucs_rcache_t *rcache;
	int with_source, fresh, first_serial;
	void *buf;

	if (argc != 2 || (strcmp(argv[1], "--with-source") && strcmp(argv[1], "--without-source"))) {
		fprintf(stderr, "usage: %s --with-source|--without-source\n", argv[0]);
		return 2;
	}
	with_source = !strcmp(argv[1], "--with-source");

	ucs_rcache_set_default_params(&params);
	params.region_struct_size = sizeof(struct test_region);
	params.ucm_events = UCM_EVENT_VM_UNMAPPED;
	params.ops = &ops;
	params.flags = UCS_RCACHE_FLAG_SYNC_EVENTS; /* as UCP's cache */
	if (ucs_rcache_create(&params, "ext-validity-test", NULL, &rcache) != UCS_OK) {
		fprintf(stderr, "ucs_rcache_create failed\n");
		return 2;
	}
	if (with_source)
		ucs_rcache_set_external_validity(rcache, &src.generation, refresh, &src);

	buf = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED || ucs_rcache_get(rcache, buf, BUF_LEN, 1, PROT_READ | PROT_WRITE,
						NULL, &first) != UCS_OK) {
		fprintf(stderr, "the first registration failed\n");
		return 2;
	}
	first_serial = serial_of(first);
	ucs_rcache_region_put(rcache, first);
	/* A hit, as UCP has it, before anything changed. */
	looked = ucs_rcache_lookup_unsafe(rcache, buf, BUF_LEN, 1, PROT_READ | PROT_WRITE);
	if (looked != first) {
		fprintf(stderr, "no hit before the replacement\n");
		return 2;
	}
	ucs_rcache_region_put_unsafe(rcache, looked);

	/* New pages behind UCM's back; the module marks and counts it. */
	if ((void *)syscall(SYS_mmap, buf, BUF_LEN, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != buf) {
		fprintf(stderr, "mmap(MAP_FIXED) failed\n");
		return 2;
	}
	src.stale = buf;
	src.stale_len = BUF_LEN;
	__atomic_add_fetch(&src.generation, 1, __ATOMIC_RELEASE);

	looked = ucs_rcache_lookup_unsafe(rcache, buf, BUF_LEN, 1, PROT_READ | PROT_WRITE);
	if (looked && serial_of(looked) != first_serial) {
		fprintf(stderr, "lookup_unsafe found a region never registered\n");
		return 2;
	}
	if (looked)
		ucs_rcache_region_put_unsafe(rcache, looked);
	if (ucs_rcache_get(rcache, buf, BUF_LEN, 1, PROT_READ | PROT_WRITE, NULL, &got) !=
	    UCS_OK) {
		fprintf(stderr, "the registration after the replacement failed\n");
		return 2;
	}
	fresh = looked == NULL && serial_of(got) != first_serial && registrations == 2;
	printf("%s source: lookup_unsafe %s, ucs_rcache_get %s, %d registrations, "
	       "%d refreshes: %s\n",
	       with_source ? "with the" : "without a", looked ? "hit the old region" : "missed",
	       serial_of(got) == first_serial ? "returned the old region" : "registered anew", registrations,
	       src.refreshes, fresh ? "fresh" : "stale");
	ucs_rcache_region_put(rcache, got);
	ucs_rcache_destroy(rcache);
	munmap(buf, BUF_LEN);
	return fresh == with_source ? 0 : 1;
}

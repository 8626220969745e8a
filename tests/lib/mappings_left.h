// SPDX-License-Identifier: BSD-3-Clause
//
// Issue #21's scenario: a process caches tens of thousands of small
// registrations, then asks for 200 more mappings and a large malloc. The
// cache must leave the application its mappings (vm.max_map_count). Shared
// by the uffd test on the host and the kernel-monitor test in the guest.
//
// Each scenario runs in a forked child: a cache that used the mappings up
// would break the test process itself (malloc fails).
#ifndef MRN_TESTS_MAPPINGS_LEFT_H
#define MRN_TESTS_MAPPINGS_LEFT_H

#include "mrnotify.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace mrn::test {

inline size_t page_size()
{
	return size_t(sysconf(_SC_PAGESIZE));
}

// Lines of /proc/self/maps: the process's mappings.
inline size_t mapping_count()
{
	FILE *f = std::fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	size_t n = 0;
	for (int c; (c = std::fgetc(f)) != EOF;)
		n += c == '\n';
	std::fclose(f);
	return n;
}

// Mappings that overlap one of the ranges: how many pieces the
// application's own mappings are in (a sanitizer's runtime maps memory of
// its own as the program runs, so the process's total says less).
inline size_t mapping_count_in(const std::vector<std::pair<char *, size_t>> &ranges)
{
	FILE *f = std::fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	size_t n = 0;
	char line[512];
	while (std::fgets(line, sizeof(line), f)) {
		unsigned long s, e;
		if (std::sscanf(line, "%lx-%lx", &s, &e) != 2)
			continue;
		for (const auto &[p, len] : ranges)
			if (s < uintptr_t(p) + len && uintptr_t(p) < e) {
				n++;
				break;
			}
	}
	std::fclose(f);
	return n;
}

enum class Layout {
	kAlternatingPages, // every other page of one mapping
	kAdjacentPages,    // every page of one mapping
	kManyMappings,     // every other page of 1,000 mappings that cannot merge
};

struct MappingsLeft {
	int status = -1; // 0: ran to the end; else what failed (see run_mappings_left)
	size_t registrations = 0;
	// The application's mappings (mapping_count_in), and the process's.
	size_t maps_before = 0, maps_registered = 0, maps_destroyed = 0;
	size_t process_maps_before = 0, process_maps_registered = 0;
	size_t mmaps_failed = 0; // of 200
	int malloc_ok = 0;
	mrn_stats stats{};
};

// The cache under test, behind the public API's calls.
struct CacheUnderTest {
	std::function<int(void *addr, size_t len)> use; // get + put; 0 or -errno
	std::function<void(mrn_stats *)> stats;
	std::function<void()> destroy;
};

// In a child: make() the cache, register `regs` pages laid out as `layout`,
// then 200 mmaps of 1 MiB and a malloc of 64 MiB.
inline MappingsLeft run_mappings_left(Layout layout, size_t regs,
				      const std::function<bool(CacheUnderTest *)> &make)
{
	int fds[2];
	MappingsLeft r;
	if (pipe(fds) != 0)
		return r;
	const pid_t pid = fork();
	if (pid < 0)
		return r;
	if (pid == 0) {
		close(fds[0]);
		MappingsLeft c;
		const size_t pg = page_size();
		CacheUnderTest cache;
		std::vector<std::pair<char *, size_t>> mem;
		std::vector<char *> pages;
		auto map = [&](size_t len, int prot) {
			void *p = mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				       -1, 0);
			if (p == MAP_FAILED)
				return false;
			mem.emplace_back(static_cast<char *>(p), len);
			return true;
		};
		c.status = 1;
		if (!make(&cache))
			goto out;
		c.status = 2;
		switch (layout) {
		case Layout::kAlternatingPages:
			if (!map(2 * regs * pg, PROT_READ | PROT_WRITE))
				goto out;
			for (size_t i = 0; i < regs; i++)
				pages.push_back(mem[0].first + 2 * i * pg);
			break;
		case Layout::kAdjacentPages:
			if (!map(regs * pg, PROT_READ | PROT_WRITE))
				goto out;
			for (size_t i = 0; i < regs; i++)
				pages.push_back(mem[0].first + i * pg);
			break;
		case Layout::kManyMappings: {
			const size_t per = (regs + 999) / 1000;
			for (size_t m = 0; m < 1000; m++) {
				// Alternating protections: neighbours cannot merge.
				if (!map(2 * per * pg, m % 2 ? PROT_READ : PROT_READ | PROT_WRITE))
					goto out;
				for (size_t i = 0; i < per && pages.size() < regs; i++)
					pages.push_back(mem.back().first + 2 * i * pg);
			}
			break;
		}
		}
		c.maps_before = mapping_count_in(mem);
		c.process_maps_before = mapping_count();
		c.status = 3;
		for (char *p : pages) {
			if (cache.use(p, pg) != 0)
				goto out;
			c.registrations++;
		}
		c.maps_registered = mapping_count_in(mem);
		c.process_maps_registered = mapping_count();
		cache.stats(&c.stats);
		{
			std::vector<void *> got;
			for (int i = 0; i < 200; i++) {
				void *p = mmap(nullptr, 1 << 20, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (p == MAP_FAILED)
					c.mmaps_failed++;
				else
					got.push_back(p);
			}
			void *m = malloc(64 << 20);
			c.malloc_ok = m != nullptr;
			free(m);
			for (void *p : got)
				munmap(p, 1 << 20);
		}
		cache.destroy();
		c.maps_destroyed = mapping_count_in(mem);
		if (c.maps_destroyed > c.maps_before) {
			// For the failure message: what is left, its head only (the
			// control leaves tens of thousands of mappings).
			std::fprintf(stderr, "/proc/self/maps after the cache went (%zu mappings in the test's memory), its head:\n",
				     c.maps_destroyed);
			if (FILE *f = std::fopen("/proc/self/maps", "re")) {
				char line[512];
				for (int i = 0; i < 40 && std::fgets(line, sizeof(line), f); i++)
					std::fputs(line, stderr);
				std::fclose(f);
			}
		}
		c.status = 0;
out:
		for (auto &[p, len] : mem)
			munmap(p, len);
		if (write(fds[1], &c, sizeof(c)) != ssize_t(sizeof(c)))
			_exit(3);
		_exit(0);
	}
	close(fds[1]);
	ssize_t n;
	do
		n = read(fds[0], &r, sizeof(r));
	while (n < 0 && errno == EINTR);
	close(fds[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	if (n != ssize_t(sizeof(r)))
		r.status = -2; // the child died
	return r;
}

// The public API's cache with the given monitor and otherwise the defaults.
inline bool make_public_cache(mrn_monitor_t monitor, CacheUnderTest *out)
{
	mrn_config cfg;
	if (mrn_config_init(&cfg) != 0)
		return false;
	cfg.monitor = monitor;
	cfg.reg = [](void *, void *, void *, size_t, uint32_t, void *) { return 0; };
	cfg.dereg = [](void *, void *) { return 0; };
	mrn_cache_t *cache = nullptr;
	if (mrn_cache_create(&cfg, &cache) != 0 || mrn_cache_monitor(cache) != monitor)
		return false;
	out->use = [cache](void *p, size_t len) {
		mrn_entry_t *e = nullptr;
		const int rc = mrn_get(cache, p, len, 1, nullptr, &e);
		if (rc == 0)
			mrn_put(cache, e);
		return rc;
	};
	out->stats = [cache](mrn_stats *s) { mrn_cache_stats(cache, s, sizeof(*s)); };
	out->destroy = [cache] { mrn_cache_destroy(cache); };
	return true;
}

} // namespace mrn::test

#endif

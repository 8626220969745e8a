// SPDX-License-Identifier: BSD-3-Clause
//
// capi_bench: libmrnotify as an application meets it, through the shared
// library's C API (mrn_get/mrn_put, calls through the PLT), against UCX's
// ucs_rcache (ucs_rcache_get/ucs_rcache_region_put, calls into libucs) in
// the same run, on access patterns that MPI programs make:
//  - fixed: 8 buffers of 64 KiB used over and over;
//  - shuffled: 64 buffers of 64 KiB in random order (what order alone
//    costs: "sizes" without its sizes);
//  - sizes: 64 buffers from 1 KiB to 16 MiB (log-uniform), random order;
//  - overlapping: random ranges of 4 KiB to 1 MiB in a 64 MiB region,
//    which overlap and are merged by both caches;
//  - sliding: a 1 MiB window moved by a page over 16 MiB, again and again;
//  - mpi-like: half the requests on 4 large buffers, half on small ones
//    (4 to 64 KiB) that are each used 4 times and never again.
// For each: ns per get + put (both caches), the ratio, and how many times
// each called its register function. Both get the same no-op register
// function; the monitor is chosen with --monitor (default: external, to
// which nothing reports unmaps, so that the counter never moves, hits are
// the same code as with the kernel monitor and nothing needs the module). With --monitor kernel (in the
// guest) each of our misses includes the kernel's REGISTER ioctl.
//
// Prints a table; `capi_hit_speedup_vs_ucs_rcache=<lowest fixed-buffer
// ratio>` last.
#include "ucs_baseline.h"

#include <mrnotify.h>


#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

int count_reg(void *context, void *, void *, size_t, uint32_t, void *payload)
{
	++*static_cast<size_t *>(context);
	*static_cast<uint64_t *>(payload) = 1;
	return 0;
}
int no_dereg(void *, void *)
{
	return 0;
}

// Our cache, created and used through the public C API only.
class Ours {
public:
	explicit Ours(mrn_monitor_t monitor)
	{
		mrn_config c;
		if (mrn_config_init(&c) < 0)
			throw std::runtime_error("bad MRNOTIFY_* environment");
		c.name = "capi_bench";
		c.reg = count_reg;
		c.dereg = no_dereg;
		c.context = &registrations_;
		c.payload_size = 8;
		c.monitor = monitor;
		// ucs_rcache does not madvise either.
		c.fork_policy = MRN_FORK_NONE;
		if (mrn_cache_create(&c, &cache_) < 0)
			throw std::runtime_error(
				std::string("cannot create a cache with monitor ") +
				mrn_monitor_to_string(monitor));
	}
	~Ours() { mrn_cache_destroy(cache_); }
	Ours(const Ours &) = delete;
	Ours &operator=(const Ours &) = delete;
	void use(void *a, size_t len)
	{
		mrn_entry_t *e = nullptr;
		if (mrn_get(cache_, a, len, 1, nullptr, &e) != 0)
			throw std::runtime_error("mrn_get failed");
		mrn_put(cache_, e);
	}
	size_t registrations() const { return registrations_; }

private:
	mrn_cache_t *cache_ = nullptr;
	size_t registrations_ = 0;
};

class Ucs {
public:
	void use(void *a, size_t len)
	{
		ucs_rcache_region *r = rc_.get(a, len);
		if (!r)
			throw std::runtime_error("ucs_rcache_get failed");
		rc_.put(r);
	}
	size_t registrations() const { return rc_.registrations(); }
	const std::string &description() const { return rc_.description(); }

private:
	mrn::bench::UcsRcache rc_;
};

// One untouched reservation: the register functions do not touch memory,
// so none of it is ever backed.
class Region {
public:
	explicit Region(size_t len) : len_(len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			throw std::runtime_error("mmap of the region failed");
		base_ = static_cast<char *>(p);
	}
	~Region() { munmap(base_, len_); }
	Region(const Region &) = delete;
	Region &operator=(const Region &) = delete;
	char *at(size_t off) const { return base_ + off; }
	size_t offset(const char *p) const { return static_cast<size_t>(p - base_); }
	size_t size() const { return len_; }

private:
	size_t len_;
	char *base_;
};

struct Request {
	char *addr;
	size_t len;
};

// A pattern: the requests, in order, made on a region it owns.
struct Pattern {
	const char *name;
	std::unique_ptr<Region> region;
	std::vector<Request> requests;
	std::vector<Request> prefill; // used once, untimed, before a cold run
};

size_t round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

Pattern fixed_buffers(size_t n)
{
	Pattern p{"fixed", std::make_unique<Region>(8 * 128 * 1024), {}, {}};
	for (size_t i = 0; i < n; i++)
		p.requests.push_back({p.region->at(i % 8 * 128 * 1024), 64 * 1024});
	return p;
}

Pattern shuffled_buffers(size_t n, std::mt19937_64 &rng)
{
	Pattern p{"shuffled", std::make_unique<Region>(64 * 128 * 1024), {}, {}};
	std::uniform_int_distribution<size_t> pick(0, 63);
	for (size_t i = 0; i < n; i++)
		p.requests.push_back({p.region->at(pick(rng) * 128 * 1024), 64 * 1024});
	return p;
}

Pattern varying_sizes(size_t n, std::mt19937_64 &rng)
{
	std::vector<size_t> sizes;
	size_t total = 0;
	std::uniform_real_distribution<double> log_size(std::log(1024.0), std::log(16.0 * 1048576));
	for (int i = 0; i < 64; i++) {
		sizes.push_back(static_cast<size_t>(std::exp(log_size(rng))));
		total += round_up(sizes.back(), kPage) + kPage;
	}
	Pattern p{"sizes", std::make_unique<Region>(total), {}, {}};
	std::vector<Request> bufs;
	size_t off = 0;
	for (size_t s : sizes) {
		bufs.push_back({p.region->at(off), s});
		off += round_up(s, kPage) + kPage;
	}
	std::uniform_int_distribution<size_t> pick(0, bufs.size() - 1);
	for (size_t i = 0; i < n; i++)
		p.requests.push_back(bufs[pick(rng)]);
	return p;
}

Pattern overlapping(size_t n, std::mt19937_64 &rng)
{
	const size_t span = 64 << 20;
	Pattern p{"overlapping", std::make_unique<Region>(span + (1 << 20)), {}, {}};
	std::uniform_int_distribution<size_t> off(0, span / kPage - 1);
	std::uniform_int_distribution<size_t> len(4096, 1 << 20);
	for (size_t i = 0; i < n; i++)
		p.requests.push_back({p.region->at(off(rng) * kPage), len(rng)});
	return p;
}

Pattern sliding(size_t n)
{
	const size_t window = 1 << 20, span = 16 << 20;
	Pattern p{"sliding", std::make_unique<Region>(span + window), {}, {}};
	for (size_t i = 0; i < n; i++)
		p.requests.push_back({p.region->at(i * kPage % span), window});
	return p;
}

Pattern mpi_like(size_t n, std::mt19937_64 &rng)
{
	const size_t large = 4 << 20, small_max = 64 << 10;
	const size_t smalls = n / 2 / 4 + 1;
	const size_t prefills = 8192;
	Pattern p{"mpi-like",
		  std::make_unique<Region>(4 * (large + kPage) + (smalls + prefills) * small_max),
		  {},
		  {}};
	for (size_t i = 0; i < prefills; i++)
		p.prefill.push_back(
			{p.region->at(4 * (large + kPage) + (smalls + i) * small_max), small_max});
	std::uniform_int_distribution<size_t> small_len(4096, small_max);
	std::uniform_int_distribution<int> which(0, 3);
	size_t next_small = 0, uses = 0;
	size_t cur_len = small_len(rng);
	for (size_t i = 0; i < n; i++) {
		if (i % 2 == 0) {
			p.requests.push_back(
				{p.region->at(static_cast<size_t>(which(rng)) * (large + kPage)),
				 large});
			continue;
		}
		// A small buffer is used 4 times, then a new one (as a program
		// that mallocs its messages does) takes its place.
		p.requests.push_back(
			{p.region->at(4 * (large + kPage) + next_small * small_max), cur_len});
		if (++uses == 4) {
			uses = 0;
			next_small++;
			cur_len = small_len(rng);
		}
	}
	return p;
}

// ns per request, best of reps, after one untimed pass (which also makes
// the misses of a pattern whose buffers repeat).
template <typename C>
double run(C &c, const Pattern &p, int reps, bool warm)
{
	if (warm)
		for (const Request &r : p.requests)
			c.use(r.addr, r.len);
	else
		// A cold pattern is timed in steady state all the same: the
		// caches' one-time growth (first tables, first huge pages) is
		// not what a long-running program pays per miss.
		for (const Request &r : p.prefill)
			c.use(r.addr, r.len);
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		const auto t0 = Clock::now();
		for (const Request &r : p.requests)
			c.use(r.addr, r.len);
		best = std::min(
			best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
				      double(p.requests.size()));
	}
	return best;
}

int usage(const char *argv0)
{
	std::printf("usage: %s [--quick] [--monitor external|kernel|uffd|none|auto] [--dump FILE]\n"
		    "       [--only PATTERN]\n"
		    "libmrnotify through its C API against UCX's ucs_rcache on MPI-like\n"
		    "access patterns, in the same run (ns per get + put).\n"
		    "--dump: write the patterns' requests to FILE and time nothing, for\n"
		    "replaying them through Open MPI's rcache API (grdma and the component:\n"
		    "bench/rcache_bench patterns).\n"
		    "--only: time that pattern alone (for a profiler: valgrind --tool=cachegrind\n"
		    "--branch-sim=yes counts mispredicted branches where perf has no counters).\n",
		    argv0);
	return 2;
}

// One pattern, for a program that replays it: a header line
// "pattern NAME REGION_BYTES WARM PREFILLS REQUESTS", then one
// "OFFSET LENGTH" line per prefill and per request, offsets from the
// region's start. WARM 1: one untimed pass of the requests before timing;
// 0: the prefills instead, and one timed pass (the pattern's misses count).
bool dump(FILE *f, const Pattern &p, bool warm)
{
	if (std::fprintf(f, "pattern %s %zu %d %zu %zu\n", p.name, p.region->size(), warm ? 1 : 0,
			 p.prefill.size(), p.requests.size()) < 0)
		return false;
	for (const auto *list : {&p.prefill, &p.requests})
		for (const Request &r : *list)
			if (std::fprintf(f, "%zu %zu\n", p.region->offset(r.addr), r.len) < 0)
				return false;
	return true;
}

} // namespace

int main(int argc, char **argv)
{
	bool quick = false;
	const char *dump_to = nullptr;
	const char *only = nullptr;
	mrn_monitor_t monitor = MRN_MONITOR_EXTERNAL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = true;
		} else if (!strcmp(argv[i], "--dump") && i + 1 < argc) {
			dump_to = argv[++i];
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else if (!strcmp(argv[i], "--monitor") && i + 1 < argc) {
			const char *m = argv[++i];
			if (!strcmp(m, "external"))
				monitor = MRN_MONITOR_EXTERNAL;
			else if (mrn_monitor_from_string(m, &monitor) < 0)
				return usage(argv[0]);
		} else {
			return usage(argv[0]);
		}
	}
	const size_t n = quick ? 20000 : 200000;
	const int reps = quick ? 3 : 5;
	try {
		std::mt19937_64 rng(11);
		std::vector<Pattern> patterns;
		patterns.push_back(fixed_buffers(n));
		patterns.push_back(varying_sizes(n, rng));
		patterns.push_back(overlapping(n, rng));
		patterns.push_back(sliding(n));
		patterns.push_back(mpi_like(n, rng));
		// Last, so that the others' requests stay what they were.
		patterns.push_back(shuffled_buffers(n, rng));
		if (dump_to) {
			FILE *f = std::fopen(dump_to, "w");
			bool ok = f != nullptr;
			for (const Pattern &p : patterns)
				ok = ok && dump(f, p, strcmp(p.name, "mpi-like") != 0);
			if (f && std::fclose(f) != 0)
				ok = false;
			if (!ok) {
				std::fprintf(stderr, "capi_bench: cannot write %s: %s\n", dump_to,
					     std::strerror(errno));
				return 1;
			}
			return 0;
		}
		{
			Ucs probe;
			std::printf(
				"ours: libmrnotify C API (shared library), monitor %s; baseline: "
				"%s\n",
				monitor == MRN_MONITOR_EXTERNAL
					? "external (nothing reports unmaps: the counter never "
					  "moves; same hit path)"
					: mrn_monitor_to_string(monitor),
				probe.description().c_str());
		}
		std::printf("%-12s %10s %12s %14s %8s %12s %12s\n", "pattern", "requests",
			    "mrnotify ns", "ucs_rcache ns", "speedup", "our regs", "ucs regs");
		double fixed_ratio = 0;
		for (const Pattern &p : patterns) {
			if (only && strcmp(p.name, only) != 0)
				continue;
			// A fresh pair of caches per pattern. mpi-like's small
			// buffers are new only in its first pass: it is timed
			// once, with its misses.
			const bool warm = strcmp(p.name, "mpi-like") != 0;
			Ours ours(monitor);
			Ucs ucs;
			const double o = run(ours, p, warm ? reps : 1, warm);
			const double u = run(ucs, p, warm ? reps : 1, warm);
			std::printf("%-12s %10zu %12.1f %14.1f %7.2fx %12zu %12zu\n", p.name,
				    p.requests.size(), o, u, u / o, ours.registrations(),
				    ucs.registrations());
			if (!strcmp(p.name, "fixed"))
				fixed_ratio = u / o;
		}
		std::printf("capi_hit_speedup_vs_ucs_rcache=%.2f\n", fixed_ratio);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "capi_bench: %s\n", e.what());
		return 1;
	}
	return 0;
}

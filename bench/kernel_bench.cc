// SPDX-License-Identifier: GPL-2.0
// Benchmark of mrnotify.ko, run as root in the guest with the module loaded:
//  - munmap of a 1 MiB range covered by one registration, relative to the
//    same munmap with no context in the process and with a context that
//    does not watch the range (target: <= 1.2x);
//  - DRAIN of 10,000 dirty registrations;
//  - REGISTER / UNREGISTER cost and the cache-hit check (one load);
//  - kernel memory per registration (QUERY, and measured from /proc/meminfo);
//  - with verbs (MRN_BENCH_VERBS) and an RDMA device (rxe0 in the guest):
//    what REGISTER adds to a cache miss, as a share of the ibv_reg_mr and
//    ibv_dereg_mr the miss makes anyway.
// The guest is emulated (TCG): compare the ratios, not the absolute times.
//
// Build: g++ -std=c++17 -O2 -I kernel/include/uapi bench/kernel_bench.cc -o kernel_bench
// Usage: kernel_bench [iterations]   (default 200)
#include <linux/mrnotify.h>
#ifdef MRN_BENCH_VERBS
#include <infiniband/verbs.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// A counter from /sys/kernel/debug/mrnotify/ (root, debugfs mounted), or -1.
long long debug_counter(const char *name)
{
	std::string path = std::string("/sys/kernel/debug/mrnotify/") + name;
	FILE *f = fopen(path.c_str(), "r");
	long long v = -1;
	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0)
{
	return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? 0 : v[v.size() / 2];
}

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
const size_t kMiB = 1 << 20;

[[noreturn]] void die(const char *what)
{
	fprintf(stderr, "kernel_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

struct Ctx {
	int fd = -1;
	const mrn_status *st = nullptr;
	Ctx()
	{
		fd = open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			die("open " MRN_DEVICE_PATH " (is mrnotify.ko loaded?)");
		void *p = mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			die("mmap status page");
		st = static_cast<const mrn_status *>(p);
	}
	~Ctx()
	{
		munmap(const_cast<mrn_status *>(st), kPage);
		close(fd);
	}
	uint64_t reg(const void *a, size_t len, uint64_t cookie) const
	{
		mrn_register r{};
		r.size = sizeof(r);
		r.addr = reinterpret_cast<uintptr_t>(a);
		r.length = len;
		r.cookie = cookie;
		if (ioctl(fd, MRN_IOC_REGISTER, &r) != 0)
			die("REGISTER");
		return r.id;
	}
	int unreg(uint64_t id) const
	{
		mrn_unregister u{};
		u.size = sizeof(u);
		u.id = id;
		return ioctl(fd, MRN_IOC_UNREGISTER, &u);
	}
	// One DRAIN into buf; returns count, sets *more.
	uint32_t drain(std::vector<mrn_dirty_entry> &buf, bool *more) const
	{
		mrn_drain d{};
		d.size = sizeof(d);
		d.entries = reinterpret_cast<uintptr_t>(buf.data());
		d.capacity = static_cast<uint32_t>(buf.size());
		d.entry_size = sizeof(mrn_dirty_entry);
		if (ioctl(fd, MRN_IOC_DRAIN, &d) != 0)
			die("DRAIN");
		*more = d.out_flags & MRN_DRAIN_MORE;
		return d.count;
	}
	size_t drain_all() const
	{
		std::vector<mrn_dirty_entry> buf(1024);
		bool more = true;
		size_t n = 0;
		while (more)
			n += drain(buf, &more);
		return n;
	}
	mrn_query query() const
	{
		mrn_query q{};
		q.size = sizeof(q);
		if (ioctl(fd, MRN_IOC_QUERY, &q) != 0)
			die("QUERY");
		return q;
	}
};

char *map_1mib(bool populate)
{
	void *p = mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	char *c = static_cast<char *>(p);
	if (populate)
		for (size_t o = 0; o < kMiB; o += kPage)
			c[o] = 1;
	return c;
}

// One munmap table: the three medians and their ratios.
void print_munmap(const char *title, double none, double other, double watched, const char *target)
{
	printf("%s\n", title);
	printf("  no context in the process        %10.0f ns\n", none);
	printf("  context, range not registered    %10.0f ns\n", other);
	printf("  range covered by one registration %9.0f ns\n", watched);
	printf("  ratio registered / no context    %10.2fx%s\n", watched / none, target);
	printf("  ratio registered / unregistered  %10.2fx\n", watched / other);
}

// Median munmap time of a fresh 1 MiB mapping; ctx != null: a context exists
// in the process; watch: one registration covers the range.
double time_munmap(const Ctx *ctx, bool watch, bool populate, int iters)
{
	std::vector<double> t;
	for (int i = 0; i < iters; i++) {
		char *p = map_1mib(populate);
		if (ctx && watch)
			ctx->reg(p, kMiB, static_cast<uint64_t>(i));
		auto t0 = Clock::now();
		if (munmap(p, kMiB) != 0)
			die("munmap");
		t.push_back(ns_since(t0));
		if (ctx && watch && ctx->drain_all() != 1) {
			fprintf(stderr, "kernel_bench: the munmap was not reported\n");
			exit(1);
		}
	}
	return median(t);
}

// time_munmap() with no context, in a forked child (fresh mm).
double in_child(bool populate, int iters)
{
	int fds[2];
	if (pipe(fds) != 0)
		die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		double v = time_munmap(nullptr, false, populate, iters);
		_exit(write(fds[1], &v, sizeof(v)) == sizeof(v) ? 0 : 1);
	}
	double v = 0;
	if (read(fds[0], &v, sizeof(v)) != sizeof(v))
		die("child measurement");
	close(fds[0]);
	close(fds[1]);
	waitpid(pid, nullptr, 0);
	return v;
}

long long meminfo_bytes(const char *key)
{
	std::ifstream f("/proc/meminfo");
	std::string line, k = std::string(key) + ":";
	while (std::getline(f, line)) {
		if (line.compare(0, k.size(), k) == 0) {
			std::istringstream is(line.substr(k.size()));
			long long kb = 0;
			is >> kb;
			return kb * 1024;
		}
	}
	return -1;
}

#ifdef MRN_BENCH_VERBS
// A miss in a registration cache pins and registers the range with the NIC
// (ibv_reg_mr) and later deregisters it; with the kernel monitor it also
// makes REGISTER and UNREGISTER. Both timed on the same touched range, per
// size, medians of `iters` rounds.
void register_share(const Ctx &ctx, int iters)
{
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		printf("REGISTER against ibv_reg_mr: SKIP (no RDMA device)\n");
		if (list)
			ibv_free_device_list(list);
		return;
	}
	ibv_context *dev = ibv_open_device(list[0]);
	ibv_pd *pd = dev ? ibv_alloc_pd(dev) : nullptr;
	if (!pd)
		die("ibv_open_device / ibv_alloc_pd");
	printf("REGISTER + UNREGISTER against ibv_reg_mr + ibv_dereg_mr on %s "
	       "(the same touched range; medians):\n",
	       ibv_get_device_name(list[0]));
	printf("  %10s %16s %16s %8s\n", "bytes", "ibv_reg+dereg ns", "REG+UNREG ns", "share");
	const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	for (size_t len : {kPage, 16 * kPage, kMiB, 16 * kMiB}) {
		char *p = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE,
						   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		if (p == MAP_FAILED)
			die("mmap");
		memset(p, 1, len);
		std::vector<double> verbs, ours;
		const int rounds = len >= 16 * kMiB ? iters / 10 + 1 : iters;
		for (int i = 0; i < rounds; i++) {
			auto t0 = Clock::now();
			ibv_mr *mr = ibv_reg_mr(pd, p, len, access);
			if (!mr)
				die("ibv_reg_mr");
			if (ibv_dereg_mr(mr) != 0)
				die("ibv_dereg_mr");
			verbs.push_back(ns_since(t0));
			t0 = Clock::now();
			if (ctx.unreg(ctx.reg(p, len, static_cast<uint64_t>(i))) != 0)
				die("UNREGISTER");
			ours.push_back(ns_since(t0));
		}
		double v = median(verbs), o = median(ours);
		printf("  %10zu %16.0f %16.0f %7.1f%%\n", len, v, o, 100.0 * o / v);
		munmap(p, len);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(dev);
	ibv_free_device_list(list);
}
#endif

} // namespace

int main(int argc, char **argv)
{
	const int iters = argc > 1 ? atoi(argv[1]) : 200;
	if (iters <= 0) {
		fprintf(stderr, "usage: kernel_bench [iterations]\n");
		return 2;
	}
	printf("mrnotify kernel benchmark (%d iterations per figure; medians; emulated guest: use "
	       "the ratios)\n",
	       iters);

	// 1. munmap of 1 MiB. The "no context" case runs in forked children: a
	// child's fresh mm has no notifier machinery, while this process keeps it
	// from its first registration on. The cases alternate to cancel drift.
	Ctx ctx;
	std::vector<double> none_p, other_p, watched_p, none_u, other_u, watched_u;
	const int chunk = iters / 8 + 1;
	for (int r = 0; r < 8; r++) {
		none_p.push_back(in_child(true, chunk));
		other_p.push_back(time_munmap(&ctx, false, true, chunk));
		watched_p.push_back(time_munmap(&ctx, true, true, chunk));
		none_u.push_back(in_child(false, chunk));
		other_u.push_back(time_munmap(&ctx, false, false, chunk));
		watched_u.push_back(time_munmap(&ctx, true, false, chunk));
	}
	double none_pop = median(none_p), o_pop = median(other_p), w_pop = median(watched_p);
	double none_unpop = median(none_u), o_unpop = median(other_u), w_unpop = median(watched_u);
	print_munmap("munmap 1 MiB, populated (256 pages):", none_pop, o_pop, w_pop,
		     " (target <= 1.2x)");
	print_munmap("munmap 1 MiB, never touched (no pages to free, worst case for the ratio):",
		     none_unpop, o_unpop, w_unpop, "");

	// 2. DRAIN of 10,000 dirty registrations (one page each over 40 MiB),
	// in the largest batches the kernel hands out (MRN_DRAIN_MAX_BATCH per
	// call, so ten calls) and in batches of 100, to show what a call costs.
	const int n = 10000;
	std::vector<double> largest, batched, unmap10k;
	for (int round = 0; round < 6; round++) {
		size_t len = static_cast<size_t>(n) * kPage;
		void *v = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (v == MAP_FAILED)
			die("mmap 40 MiB");
		char *p = static_cast<char *>(v);
		for (int i = 0; i < n; i++)
			ctx.reg(p + static_cast<size_t>(i) * kPage, kPage,
				static_cast<uint64_t>(i));
		auto t0 = Clock::now();
		munmap(p, len);
		unmap10k.push_back(ns_since(t0));
		size_t got = 0;
		bool more = true;
		std::vector<mrn_dirty_entry> buf(round % 2 == 0 ? MRN_DRAIN_MAX_BATCH : 100);
		t0 = Clock::now();
		while (more)
			got += ctx.drain(buf, &more);
		(round % 2 == 0 ? largest : batched).push_back(ns_since(t0));
		if (got != static_cast<size_t>(n)) {
			fprintf(stderr, "kernel_bench: drained %zu of %d\n", got, n);
			return 1;
		}
	}
	printf("10,000 dirty registrations:\n");
	printf("  munmap that dirties them (40 MiB) %9.2f ms\n", median(unmap10k) / 1e6);
	printf("  DRAIN, batches of %-5d (largest)  %9.2f ms (%.0f ns per registration)\n",
	       MRN_DRAIN_MAX_BATCH, median(largest) / 1e6, median(largest) / n);
	printf("  DRAIN, batches of 100             %9.2f ms\n", median(batched) / 1e6);

	// 3. REGISTER / UNREGISTER and the hit check.
	{
		char *p = map_1mib(true);
		std::vector<uint64_t> ids(20000);
		auto t0 = Clock::now();
		for (size_t i = 0; i < ids.size(); i++)
			ids[i] = ctx.reg(p + (i % 256) * kPage, kPage, i);
		double reg_ns = ns_since(t0) / ids.size();
		t0 = Clock::now();
		for (uint64_t id : ids)
			if (ctx.unreg(id) != 0)
				die("UNREGISTER");
		double unreg_ns = ns_since(t0) / ids.size();
		const long loads = 10000000;
		uint64_t acc = 0;
		t0 = Clock::now();
		for (long i = 0; i < loads; i++)
			acc += __atomic_load_n(&ctx.st->generation, __ATOMIC_ACQUIRE);
		double load_ns = ns_since(t0) / loads;
		printf("REGISTER %.0f ns, UNREGISTER %.0f ns; hit check (acquire load of the "
		       "generation) %.2f ns%s\n",
		       reg_ns, unreg_ns, load_ns, acc == 1 ? " " : "");
		munmap(p, kMiB);
	}

	// 4. Kernel memory per registration.
	{
		const int m = 100000;
		char *p = map_1mib(true);
		long long s0 = meminfo_bytes("Slab");
		std::vector<uint64_t> ids(m);
		for (int i = 0; i < m; i++)
			ids[i] = ctx.reg(p + (i % 256) * kPage, 64, static_cast<uint64_t>(i));
		long long s1 = meminfo_bytes("Slab");
		mrn_query q = ctx.query();
		printf("kernel memory per registration: %u bytes (slab object, QUERY); %.1f bytes "
		       "measured "
		       "(Slab delta over %d registrations; target <= 128)\n",
		       q.reg_bytes, static_cast<double>(s1 - s0) / m, m);
		for (uint64_t id : ids)
			ctx.unreg(id);
		munmap(p, kMiB);
		// Module-wide counters (debugfs, root): kernel internals, not ABI.
		printf("precision: %lld notifier callbacks ignored, %lld registrations "
		       "invalidated (module-wide, /sys/kernel/debug/mrnotify; -1: not "
		       "readable)\n",
		       debug_counter("ignored"), debug_counter("invalidated"));
	}

#ifdef MRN_BENCH_VERBS
	// 5. REGISTER's share of a miss that registers with the NIC.
	register_share(ctx, iters);
#endif
	return 0;
}

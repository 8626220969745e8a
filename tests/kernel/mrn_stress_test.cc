// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko under load: threads unmapping while another drains (nothing
// lost, nothing twice), 1,000,000 registrations in one context (kernel
// memory per registration), and the per-context cap. Run as root.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "mrn_test_util.h"

using mrn::Ctx;
using mrn::Map;
using mrn::page_size;

namespace {

double secs_since(std::chrono::steady_clock::time_point t0)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Expect {
	std::unordered_map<uint64_t, uint64_t> cookie_of; // every id registered
	std::set<uint64_t> must_drain;                    // invalidated, left to DRAIN
	std::set<uint64_t> maybe_unregistered;            // invalidated, raced by UNREGISTER
	std::set<uint64_t> was_dirty;                     // UNREGISTER said WAS_DIRTY
	std::set<uint64_t> clean_unregistered;            // UNREGISTER said clean (0)
	long errors = 0;
};

TEST(Concurrency, UnmappersAndADrainerNothingLostNothingTwice)
{
	mrn::StatsDelta stats;
	Ctx c;
	ASSERT_TRUE(c.ok());
	const int threads = 4, rounds = 150;
	const size_t ps = page_size();
	std::vector<Expect> ex(threads);
	std::atomic<int> running{threads};
	std::vector<mrn_dirty_entry> drained;
	long drain_calls = 0, drain_errors = 0;

	std::thread drainer([&] {
		for (;;) {
			bool last = running.load() == 0;
			bool more = true;
			while (more) {
				if (c.drain_once(&drained, 64, &more) != 0) {
					drain_errors++;
					break;
				}
				drain_calls++;
			}
			if (last)
				break;
			std::this_thread::yield();
		}
	});

	std::vector<std::thread> workers;
	for (int t = 0; t < threads; t++) {
		workers.emplace_back([&, t] {
			Expect &e = ex[t];
			for (int i = 0; i < rounds; i++) {
				char *p = static_cast<char *>(
					mmap(nullptr, 4 * ps, PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
				if (p == MAP_FAILED) {
					e.errors++;
					continue;
				}
				for (int k = 0; k < 4; k++)
					p[k * ps] = 1;
				uint64_t id[5];
				for (int k = 0; k < 5; k++) {
					uint64_t cookie = (static_cast<uint64_t>(t) << 32) |
							  (static_cast<uint64_t>(i) << 8) | k;
					int64_t r = k < 4 ? c.reg(p + k * ps, ps, cookie)
							  : c.reg(p, 4 * ps, cookie);
					if (r <= 0) {
						e.errors++;
						id[k] = 0;
						continue;
					}
					id[k] = static_cast<uint64_t>(r);
					e.cookie_of[id[k]] = cookie;
				}
				switch (i % 3) {
				case 0: // everything goes
					munmap(p, 4 * ps);
					for (int k = 0; k < 5; k++)
						e.must_drain.insert(id[k]);
					break;
				case 1: { // the middle goes; the ends are unregistered clean
					munmap(p + ps, 2 * ps);
					e.must_drain.insert(id[1]);
					e.must_drain.insert(id[2]);
					e.must_drain.insert(id[4]);
					for (int k : {0, 3}) {
						int r = c.unreg(id[k]);
						if (r == 0)
							e.clean_unregistered.insert(id[k]);
						else
							e.errors++;
					}
					munmap(p, ps);
					munmap(p + 3 * ps, ps);
					break;
				}
				default: { // everything goes; page 0's id races DRAIN via UNREGISTER
					munmap(p, 4 * ps);
					for (int k = 1; k < 5; k++)
						e.must_drain.insert(id[k]);
					int r = c.unreg(id[0]);
					if (r == MRN_UNREGISTER_WAS_DIRTY)
						e.was_dirty.insert(id[0]);
					else if (r == -ESTALE)
						e.maybe_unregistered.insert(
							id[0]); // the drainer got it first
					else
						e.errors++;
				}
				}
			}
			running--;
		});
	}
	for (auto &w : workers)
		w.join();
	drainer.join();

	std::set<uint64_t> must, maybe, dirty_unreg, clean_unreg;
	std::unordered_map<uint64_t, uint64_t> cookie_of;
	long errors = 0;
	for (auto &e : ex) {
		must.insert(e.must_drain.begin(), e.must_drain.end());
		maybe.insert(e.maybe_unregistered.begin(), e.maybe_unregistered.end());
		dirty_unreg.insert(e.was_dirty.begin(), e.was_dirty.end());
		clean_unreg.insert(e.clean_unregistered.begin(), e.clean_unregistered.end());
		cookie_of.insert(e.cookie_of.begin(), e.cookie_of.end());
		errors += e.errors;
	}
	EXPECT_EQ(0, errors);
	EXPECT_EQ(0, drain_errors);
	std::set<uint64_t> seen;
	long twice = 0, unexpected = 0, bad_cookie = 0;
	for (const auto &d : drained) {
		if (!seen.insert(d.id).second)
			twice++;
		if (!must.count(d.id) && !maybe.count(d.id))
			unexpected++;
		auto it = cookie_of.find(d.id);
		if (it == cookie_of.end() || it->second != d.cookie)
			bad_cookie++;
	}
	long lost = 0;
	for (uint64_t id : must)
		if (!seen.count(id))
			lost++;
	for (uint64_t id : maybe)
		if (!seen.count(id))
			lost++; // ESTALE from UNREGISTER: the drain had it
	for (uint64_t id : dirty_unreg)
		if (seen.count(id))
			twice++; // reported by UNREGISTER and by DRAIN
	EXPECT_EQ(0, twice);
	EXPECT_EQ(0, unexpected);
	EXPECT_EQ(0, lost);
	EXPECT_EQ(0, bad_cookie);
	mrn_query q = c.query();
	const uint64_t invalidated = must.size() + maybe.size() + dirty_unreg.size();
	EXPECT_EQ(static_cast<long long>(invalidated), stats["invalidated"]);
	EXPECT_EQ(invalidated, c.gen());
	EXPECT_EQ(static_cast<long long>(drained.size()), stats["drained"]);
	EXPECT_EQ(static_cast<long long>(dirty_unreg.size()), stats["unregistered_dirty"]);
	EXPECT_EQ(0u, q.registrations);
	EXPECT_EQ(0u, q.dirty);
	printf("concurrency: %zu registrations, %zu drained in %ld DRAIN calls, %zu left by "
	       "UNREGISTER(WAS_DIRTY), "
	       "%zu clean unregistrations, %lld already-dirty callbacks\n",
	       cookie_of.size(), drained.size(), drain_calls, dirty_unreg.size(),
	       clean_unreg.size(), stats["already_dirty"]);
}

TEST(Scale, MillionRegistrationsInOneContext)
{
	const size_t ps = page_size();
	const int pages = 4096;
	const long n = 1000000;
	Map m(pages * ps);
	ASSERT_NE(nullptr, m.get());
	m.touch();
	sync();
	long long slab0 = mrn::meminfo_bytes("Slab");
	auto c = std::make_unique<Ctx>();
	ASSERT_TRUE(c->ok());
	mrn_query q0 = c->query();
	EXPECT_EQ(1u << 20, q0.max_registrations); // the module's default

	auto t0 = std::chrono::steady_clock::now();
	for (long i = 0; i < n; i++) {
		// Byte ranges of various sizes and offsets, overlapping one another.
		char *a = m.get() + (i % pages) * ps + (i / pages) % 1000;
		int64_t id = c->reg(a, 1 + (i % 3) * 2000, static_cast<uint64_t>(i));
		if (id <= 0) {
			ADD_FAILURE() << "REGISTER " << i << " failed: " << id;
			return;
		}
	}
	double t_reg = secs_since(t0);
	long long slab1 = mrn::meminfo_bytes("Slab");
	mrn_query q = c->query();
	EXPECT_EQ(static_cast<uint64_t>(n), q.registrations);
	double per_reg = static_cast<double>(slab1 - slab0) / n;
	printf("1,000,000 registrations: %.1f s (%.1f us each); slab object %u bytes; measured "
	       "%.1f bytes of slab "
	       "memory per registration (object + id index + memcg vector)\n",
	       t_reg, t_reg * 1e6 / n, q.reg_bytes, per_reg);
	EXPECT_LE(q.reg_bytes, 128u);
	EXPECT_LE(per_reg, 136.0); // leaves room for other slab activity

	// The default cap: exactly 1 << 20 in total, then ENOSPC.
	long extra = 0;
	int64_t r;
	while ((r = c->reg(m.get(), 1, ~0ULL)) > 0)
		extra++;
	EXPECT_EQ(-ENOSPC, r);
	EXPECT_EQ((1L << 20) - n, extra);
	const uint64_t total = static_cast<uint64_t>(n + extra);

	// One munmap invalidates all of them.
	t0 = std::chrono::steady_clock::now();
	ASSERT_EQ(0, munmap(m.get(), m.size()));
	double t_unmap = secs_since(t0);
	m.release();
	EXPECT_EQ(total, c->gen());
	t0 = std::chrono::steady_clock::now();
	std::vector<mrn_dirty_entry> all;
	bool more = true;
	while (more)
		ASSERT_EQ(0, c->drain_once(&all, 4096, &more));
	double t_drain = secs_since(t0);
	EXPECT_EQ(total, all.size());
	std::vector<bool> seen(n, false);
	long dup = 0;
	for (const auto &e : all) {
		if (e.cookie == ~0ULL)
			continue; // the cap probes
		if (seen[e.cookie])
			dup++;
		seen[e.cookie] = true;
	}
	EXPECT_EQ(0, dup);
	printf("munmap over %llu registrations: %.2f s; drained in %.2f s\n",
	       static_cast<unsigned long long>(total), t_unmap, t_drain);
	EXPECT_EQ(0u, c->query().registrations);

	// Register again and close with them live: release frees everything.
	Map m2(64 * ps);
	for (long i = 0; i < 200000; i++)
		ASSERT_GT(c->reg(m2.get() + (i % 64) * ps, ps, 0), 0);
	auto before = mrn::global_stats();
	t0 = std::chrono::steady_clock::now();
	c.reset();
	printf("close with 200,000 live registrations: %.2f s\n", secs_since(t0));
	auto after = mrn::global_stats();
	EXPECT_EQ(before["registrations"] - 200000, after["registrations"]);
	EXPECT_EQ(before["contexts"] - 1, after["contexts"]);
}

std::string read_param()
{
	std::ifstream f("/sys/module/mrnotify/parameters/max_registrations");
	std::string s;
	f >> s;
	return s;
}

bool write_param(const std::string &v)
{
	int fd = open("/sys/module/mrnotify/parameters/max_registrations", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
	close(fd);
	return ok;
}

TEST(Cap, ModuleParameterIsReadAtOpenAndEnforced)
{
	const std::string orig = read_param();
	ASSERT_FALSE(orig.empty());
	EXPECT_FALSE(write_param("0"));
	EXPECT_FALSE(write_param("4294967295"));
	EXPECT_FALSE(write_param("many"));
	Ctx before; // opened with the default
	ASSERT_TRUE(write_param("100"));
	Ctx c;
	ASSERT_TRUE(write_param(orig));
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(100u, c.query().max_registrations);
	EXPECT_EQ(std::stoull(orig), before.query().max_registrations);

	Map m(page_size());
	std::vector<int64_t> ids;
	for (int i = 0; i < 100; i++) {
		ids.push_back(c.reg(m.get(), m.size(), i));
		ASSERT_GT(ids.back(), 0);
	}
	EXPECT_EQ(-ENOSPC, c.reg(m.get(), m.size()));
	EXPECT_EQ(0, c.unreg(static_cast<uint64_t>(ids[0])));
	int64_t again = c.reg(m.get(), m.size());
	EXPECT_GT(again, 0);
	// Dirty registrations still count until drained.
	ASSERT_EQ(0, madvise(m.get(), m.size(), MADV_DONTNEED));
	EXPECT_EQ(100u, c.query().dirty);
	EXPECT_EQ(-ENOSPC, c.reg(m.get(), m.size()));
	EXPECT_EQ(100u, c.drain().size());
	EXPECT_GT(c.reg(m.get(), m.size()), 0);
	// The context opened before the change is not limited to 100.
	for (int i = 0; i < 150; i++)
		ASSERT_GT(before.reg(m.get(), m.size()), 0);
}

} // namespace

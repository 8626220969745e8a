// SPDX-License-Identifier: GPL-2.0
// No user can slow another down through mrnotify.ko (#22). Run as root in
// the guest with the module loaded.
//
// Punch: an attacker (uid 65534) maps a shared memfd read-only and registers
// K ranges, each covering the whole file. The victim (root) punches a
// one-page hole in the file and touches the page again, many times; each
// punch invalidates the attacker's mapping, in the victim's context. The
// module may mark each registration once (the first punch); after that,
// a punch must touch none of them. That work is counted by the module
// (debugfs), so the check does not depend on timing; the victim's cost
// per punch against K = 0 is printed beside it. Against the module of one
// interval notifier per registration (before 61ef77e), every punch walked
// all K: callbacks_clear grew by K per punch and the victim's cost by
// 6,965x at K = 2^20.
//
// With a budget per callback (#47), the first punch marks at most
// kMarkBudget registrations in the victim's context and defers the rest to
// the attacker's own next DRAIN or QUERY; later punches inside the
// deferred range cost nothing.
//
// Re-arming: the attacker drains and registers its K ranges again before
// each punch, so every punch meets K clean registrations. The module's
// marks during one punch (counted) must stay within the budget, and every
// registration must still come out of the attacker's DRAIN. Against the
// module before the budget, each punch marked all K in the victim's
// context: 1,004x the victim's cost at K = 160,970 in the 6.1 guest.
//
// RegisterStall: 16 threads invalidate one registered range without
// pause. REGISTER of an unrelated range, UNREGISTER and DRAIN must go on,
// and no registration of that range may be dirty. The module before
// 1f0a8f5 waited in REGISTER, under the context's mutex, until no
// invalidation ran in the whole address space once one had met a
// registration; the one before #47 made every REGISTER dirty while more
// than 8 invalidations of the address space were in flight.
//
// Open/close: a process that opens and closes the device in a loop must
// register the address space's notifier (mm_take_all_locks(), which
// write-locks the i_mmap_rwsem of every file it maps, libc's included)
// once, not once per open; counted, with the cost of another process's
// open() and fork()+execve() printed beside it.
//
// MRN_HOSTILE_K="0,1024,..." chooses the Ks (default 0,1024,16384; the
// bench lane runs up to 2^20, the per-context limit).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "mrn_test_util.h"

namespace {

using mrn::Ctx;
using mrn::page_size;
using Clock = std::chrono::steady_clock;

constexpr uid_t kAttackerUid = 65534;

std::vector<long> hostile_ks()
{
	std::vector<long> ks;
	const char *env = getenv("MRN_HOSTILE_K");
	std::stringstream in(env ? env : "0,1024,16384");
	std::string item;
	while (std::getline(in, item, ','))
		ks.push_back(std::stol(item));
	return ks;
}

// Everything the module did with registrations, from its counters.
long long registration_work(const std::map<std::string, long long> &a,
			    const std::map<std::string, long long> &b)
{
	long long sum = 0;
	for (const auto &kv : b)
		if (kv.first.compare(0, 10, "callbacks_") == 0 || kv.first == "invalidated")
			sum += kv.second - a.at(kv.first);
	return sum;
}

// In an attacker's child: become uid 65534 and map the victim's file
// read-only. The mapping, or nullptr.
char *attacker_maps(int memfd, size_t len)
{
	if (setresgid(kAttackerUid, kAttackerUid, kAttackerUid) ||
	    setresuid(kAttackerUid, kAttackerUid, kAttackerUid))
		return nullptr;
	void *p = mmap(nullptr, len, PROT_READ, MAP_SHARED, memfd, 0);
	return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

// The attacker: another uid, its own context, K registrations over the
// whole file. It reports "ready" (1 byte) and, once told, the number of
// its registrations that are dirty (8 bytes).
class Attacker {
public:
	Attacker(int memfd, size_t file_len, long k)
	    : child_([=](int up, int down) { return run(memfd, file_len, k, up, down); })
	{
		char b;
		ready_ = child_.get(&b, 1);
	}
	bool ready() const { return ready_; }
	// Dirty registrations (QUERY), or -1.
	long long dirty()
	{
		char go = 1;
		uint64_t n = 0;
		if (!child_.put(&go, 1) || !child_.get(&n, sizeof(n)))
			return -1;
		return static_cast<long long>(n);
	}

private:
	static int run(int memfd, size_t len, long k, int up, int down)
	{
		void *p = attacker_maps(memfd, len);
		if (!p)
			return 11;
		Ctx c;
		if (!c.ok())
			return 12;
		for (long i = 0; i < k; i++)
			if (c.reg(p, len, i) <= 0)
				return 13;
		char b = 1;
		if (write(up, &b, 1) != 1 || read(down, &b, 1) != 1)
			return 14;
		const uint64_t dirty = c.query().dirty;
		return write(up, &dirty, sizeof(dirty)) == sizeof(dirty) ? 0 : 15;
	}

	mrn::Child child_;
	bool ready_ = false;
};

// The victim's loop: punch one page, write it again. Nanoseconds a punch.
double punch_and_touch(int memfd, char *map, size_t len, int rounds)
{
	const size_t ps = page_size();
	const auto t0 = Clock::now();
	for (int i = 0; i < rounds; i++) {
		const size_t off = (static_cast<size_t>(i) * ps) % len;
		if (fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, ps))
			return -1;
		map[off] = static_cast<char>(i);
	}
	return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / rounds;
}

// A shared file the victim writes, and an attacker mapping it.
struct Victim {
	explicit Victim(size_t len) : len(len)
	{
		fd = static_cast<int>(syscall(SYS_memfd_create, "mrn-hostile", 0));
		if (fd < 0 || ftruncate(fd, static_cast<off_t>(len)))
			return;
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			return;
		map = static_cast<char *>(p);
		memset(map, 1, len);
	}
	~Victim()
	{
		if (map)
			munmap(map, len);
		close(fd);
	}
	double punch(int rounds) { return punch_and_touch(fd, map, len, rounds); }

	size_t len;
	int fd = -1;
	char *map = nullptr;
};

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

TEST(Hostile, PunchCostsTheVictimNothingPerAttackerRegistration)
{
	const size_t len = 64 * page_size();
	const int rounds = 40, blocks = 15;
	// Room for K up to the per-context cap (2^20): the per-user default is
	// 1% of RAM, 167,772 in the 2 GiB guest.
	mrn::ScopedParam user_cap("max_user_registrations", "4194304");
	ASSERT_TRUE(user_cap.ok());
	// The baseline: the same file, mapped by an attacker with K = 0,
	// measured in alternating blocks with the attacked one.
	Victim base(len);
	ASSERT_NE(nullptr, base.map);
	Attacker idle(base.fd, len, 0);
	ASSERT_TRUE(idle.ready());

	for (long k : hostile_ks()) {
		Victim v(len);
		ASSERT_NE(nullptr, v.map);
		Attacker attacker(v.fd, len, k);
		ASSERT_TRUE(attacker.ready()) << "attacker with K=" << k << " did not start";
		// The first punch marks every registration: each is marked once.
		auto s0 = mrn::global_stats();
		ASSERT_GT(v.punch(1), 0) << strerror(errno);
		auto s1 = mrn::global_stats();
		// Warm up, then the steady state the victim lives in.
		v.punch(rounds);
		base.punch(rounds);
		std::vector<double> attacked, baseline;
		auto s2 = mrn::global_stats();
		for (int b = 0; b < blocks; b++) {
			attacked.push_back(v.punch(rounds));
			baseline.push_back(base.punch(rounds));
		}
		auto s3 = mrn::global_stats();
		const double ns = median(attacked), base_ns = median(baseline);
		ASSERT_GT(ns, 0) << strerror(errno);
		ASSERT_GT(base_ns, 0) << strerror(errno);

		const long long marked = s1.at("invalidated") - s0.at("invalidated");
		EXPECT_EQ(std::min<long long>(k, mrn::kMarkBudget), marked)
			<< "the first punch marks within the budget, the rest is deferred";
		EXPECT_EQ(k, attacker.dirty()) << "every registration is dirty, none lost";
		const long long steady = registration_work(s2, s3);
		EXPECT_EQ(0, steady) << "K=" << k << ": " << blocks * rounds << " punches of pages "
				     << "whose registrations are all dirty touched " << steady
				     << " registrations";
		std::printf("hostile punch: K=%ld: victim %.0f ns a punch, %.2fx K=0 (%.0f ns); "
			    "the module marked %lld at the first punch, touched %lld in %d more\n",
			    k, ns, ns / base_ns, base_ns, marked, steady, 2 * blocks * rounds);
		std::fflush(stdout);
	}
}

// The re-arming attacker: before each of the victim's punches it drains
// what the last punch invalidated and registers its K ranges again. The
// control does the same work over a private mapping the punch never
// touches: what the victim pays beside it and not beside the control is
// the module's work in the victim's context, not the attacker's CPU time
// and cache footprint.
class Rearmer {
public:
	Rearmer(int memfd, size_t file_len, long k, bool control = false)
	    : child_([=](int up, int down) {
		      return run(memfd, file_len, k, control, up, down);
	      })
	{
	}
	// Registers again; returns what the last round drained, or -1.
	long long arm()
	{
		char go = 1;
		int64_t n = -1;
		if (!child_.put(&go, 1) || !child_.get(&n, sizeof(n)))
			return -1;
		return n;
	}

private:
	static int run(int memfd, size_t len, long k, bool control, int up, int down)
	{
		void *p = attacker_maps(memfd, len);
		if (!p)
			return 11;
		if (control) {
			p = mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				return 11;
		}
		Ctx c;
		if (!c.ok())
			return 12;
		std::vector<mrn_dirty_entry> batch;
		char go;
		while (read(down, &go, 1) == 1) {
			int64_t drained = 0;
			bool more = true;
			while (more) {
				batch.clear();
				if (c.drain_once(&batch, 1024, &more) != 0)
					return 13;
				drained += static_cast<int64_t>(batch.size());
			}
			for (long i = 0; i < k; i++)
				if (c.reg(p, len, i) <= 0)
					return 14;
			if (write(up, &drained, sizeof(drained)) != sizeof(drained))
				return 15;
		}
		return 0;
	}

	mrn::Child child_;
};

TEST(Hostile, ReArmedRegistrationsCostEachPunchAtMostTheBudget)
{
	const size_t len = 64 * page_size();
	const int rounds = 15;
	mrn::ScopedParam user_cap("max_user_registrations", "4194304");
	ASSERT_TRUE(user_cap.ok());
	Victim base(len);
	ASSERT_NE(nullptr, base.map);
	Rearmer idle(base.fd, len, 0);

	for (long k : hostile_ks()) {
		Victim v(len), cv(len);
		ASSERT_NE(nullptr, v.map);
		ASSERT_NE(nullptr, cv.map);
		Rearmer attacker(v.fd, len, k), control(cv.fd, len, k, true);
		// Absent before #47: the marks per punch below are counted anyway.
		const bool maxima = mrn::reset_callback_maxima();
		std::vector<double> attacked, controlled, baseline;
		long long most_marks = 0;
		for (int r = 0; r <= rounds; r++) {
			const long long drained = attacker.arm();
			ASSERT_GE(drained, 0) << "attacker with K=" << k << " failed";
			if (r > 0) {
				EXPECT_EQ(k, drained) << "round " << r << ": a registration the punch "
						      << "invalidated was not reported";
			}
			if (r == rounds)
				break;
			// The attacker waits for the next round: only the punch marks.
			auto s0 = mrn::global_stats();
			const double ns = v.punch(1);
			auto s1 = mrn::global_stats();
			ASSERT_GT(ns, 0) << strerror(errno);
			most_marks = std::max(most_marks,
					      s1.at("invalidated") - s0.at("invalidated"));
			ASSERT_GE(control.arm(), 0);
			const double control_ns = cv.punch(1);
			ASSERT_GE(idle.arm(), 0);
			const double base_ns = base.punch(1);
			ASSERT_GT(control_ns, 0) << strerror(errno);
			ASSERT_GT(base_ns, 0) << strerror(errno);
			attacked.push_back(ns);
			controlled.push_back(control_ns);
			baseline.push_back(base_ns);
		}
		auto st = mrn::global_stats();
		EXPECT_LE(most_marks, std::min<long long>(k, mrn::kMarkBudget))
			<< "K=" << k << ": one punch marked " << most_marks
			<< " registrations in the victim's context";
		EXPECT_TRUE(maxima) << "no max_callback_* files in debugfs";
		EXPECT_LE(st["max_callback_marks"], mrn::kMarkBudget);
		const double ns = median(attacked), control_ns = median(controlled),
			     base_ns = median(baseline);
		std::printf("re-armed punch: K=%ld: victim %.0f ns a punch (each the first after "
			    "re-arming), %.2fx the control's (%.0f ns: the same REGISTERs over "
			    "another range), %.2fx K=0 (%.0f ns); at most %lld marks in a punch, "
			    "longest callback %lld ns\n",
			    k, ns, ns / control_ns, control_ns, ns / base_ns, base_ns, most_marks,
			    st["max_callback_hold_ns"]);
		std::fflush(stdout);
	}
}

// 2n mappings that cannot merge: every other page read-only.
struct ManyVmas {
	explicit ManyVmas(size_t n) : len(2 * n * page_size())
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return;
		base = static_cast<char *>(p);
		for (size_t i = 0; i < n; i++)
			if (mprotect(base + 2 * i * page_size(), page_size(), PROT_READ))
				return;
		ok = true;
	}
	~ManyVmas()
	{
		if (base)
			munmap(base, len);
	}
	size_t len;
	char *base = nullptr;
	bool ok = false;
};

// Nanoseconds of one open()+close() of the device and one fork()+execve()
// of /bin/true, medians of @n.
std::pair<double, double> open_and_spawn_ns(int n)
{
	std::vector<double> opens, spawns;
	for (int i = 0; i < n; i++) {
		auto t0 = Clock::now();
		int fd = open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
		auto t1 = Clock::now();
		if (fd < 0)
			return {-1, -1};
		close(fd);
		auto t2 = Clock::now();
		pid_t pid = fork();
		if (pid == 0) {
			execl("/bin/true", "true", static_cast<char *>(nullptr));
			_exit(127);
		}
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			return {-1, -1};
		auto t3 = Clock::now();
		opens.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
		spawns.push_back(std::chrono::duration<double, std::nano>(t3 - t2).count());
	}
	return {median(opens), median(spawns)};
}

TEST(Hostile, OpenCloseLoopRegistersTheNotifierOnce)
{
	// The count: one process, many opens and closes.
	auto s0 = mrn::global_stats();
	ASSERT_EQ(1u, s0.count("notifiers_registered")) << "no notifiers_registered counter";
	for (int i = 0; i < 1000; i++) {
		Ctx c;
		ASSERT_TRUE(c.ok());
	}
	auto s1 = mrn::global_stats();
	EXPECT_LE(s1.at("notifiers_registered") - s0.at("notifiers_registered"), 1)
		<< "each open after a close registered the address space's notifier again";

	// The cost to others: a victim's open() and fork()+execve() without,
	// then beside, an attacker with 60,000 mappings that loops open/close.
	const int n = 41;
	const auto quiet = open_and_spawn_ns(n);
	ASSERT_GT(quiet.first, 0);
	std::atomic<long> loops{0};
	mrn::Child attacker([&](int up, int) {
		if (setresgid(kAttackerUid, kAttackerUid, kAttackerUid) ||
		    setresuid(kAttackerUid, kAttackerUid, kAttackerUid))
			return 10;
		ManyVmas vmas(30000);
		if (!vmas.ok)
			return 11;
		char b = 1;
		if (write(up, &b, 1) != 1)
			return 12;
		for (;;) {
			int fd = open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				return 13;
			close(fd);
		}
	});
	char b;
	ASSERT_TRUE(attacker.get(&b, 1)) << "the attacker could not map 60,000 areas";
	auto s2 = mrn::global_stats();
	const auto attacked = open_and_spawn_ns(n);
	auto s3 = mrn::global_stats();
	ASSERT_GT(attacked.first, 0);
	const long long regs = s3.at("notifiers_registered") - s2.at("notifiers_registered");
	EXPECT_LE(regs, 1) << "the attacker's loop registered its notifier " << regs << " times";
	std::printf("open/close loop beside 60,000 mappings: victim open() %.0f ns (%.2fx alone), "
		    "fork+execve %.0f ns (%.2fx alone); the attacker's loop registered its "
		    "notifier %lld times, the victim's %d opens included\n",
		    attacked.first, attacked.first / quiet.first, attacked.second,
		    attacked.second / quiet.second, regs, n);
}

// Invalidations of a registered range run without pause in other threads
// while this thread registers, unregisters and drains an unrelated range.
TEST(Hostile, RegisterAndDrainDoNotWaitForUnrelatedInvalidations)
{
	const size_t ps = page_size();
	Ctx c, keeper;
	ASSERT_TRUE(c.ok());
	ASSERT_TRUE(keeper.ok());
	// Populated once, so that its page tables stay and every
	// MADV_DONTNEED walks 65,536 entries: sixteen threads (under the
	// shared mmap_lock, preempted mostly inside that walk) keep more than
	// eight running.
	mrn::Map busy(65536 * ps), quiet(ps);
	// Base pages: a huge page's zap would leave no page table to walk.
	ASSERT_EQ(0, madvise(busy.get(), busy.size(), MADV_NOHUGEPAGE));
	busy.touch();
	quiet.touch();
	// Registered in another context that never drains, so that every
	// madvise below meets a registration (the drains below are c's).
	ASSERT_GT(keeper.reg(busy.get(), busy.size()), 0);

	std::atomic<bool> stop{false};
	std::atomic<long> invalidations{0};
	std::vector<std::thread> hammers;
	for (int t = 0; t < 16; t++)
		hammers.emplace_back([&] {
			while (!stop.load(std::memory_order_relaxed)) {
				madvise(busy.get(), busy.size(), MADV_DONTNEED);
				invalidations.fetch_add(1, std::memory_order_relaxed);
			}
		});
	while (invalidations.load() < 10)
		std::this_thread::yield();

	auto before = mrn::global_stats();
	const int rounds = 2000;
	const auto t0 = Clock::now();
	int clean = 0, done = 0;
	// A stall is a failure, not a hang: give up after a minute.
	while (done < rounds && Clock::now() - t0 < std::chrono::seconds(60)) {
		const int64_t id = c.reg(quiet.get(), quiet.size());
		ASSERT_GT(id, 0);
		const int rc = c.unreg(static_cast<uint64_t>(id));
		ASSERT_GE(rc, 0);
		if (rc == 0)
			clean++;
		if (done % 100 == 0)
			c.drain_ids();
		done++;
	}
	const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
	stop = true;
	for (auto &t : hammers)
		t.join();
	auto after = mrn::global_stats();
	EXPECT_EQ(rounds, done) << "REGISTER/UNREGISTER/DRAIN stalled behind invalidations "
				   "of another range: "
				<< done << " rounds in 60 s";
	// No change overlapped the quiet range: none was dirty.
	EXPECT_EQ(done, clean) << done - clean << " registrations of an unrelated range "
			       << "were dirty";
	EXPECT_EQ(0, after["marked_at_end"] - before["marked_at_end"]);
	std::printf("register stall: %d REGISTER+UNREGISTER (+%d DRAIN) in %.2f s beside %ld "
		    "invalidations of a registered range\n",
		    done, done / 100, secs, invalidations.load());
}

} // namespace

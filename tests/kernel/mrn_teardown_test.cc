// SPDX-License-Identifier: GPL-2.0
// mrnotify.ko: UNREGISTER and close() racing an invalidation of the same
// registration. UNREGISTER says clean or dirty, never both, and DRAIN never
// names a registration after UNREGISTER returned; close() leaves nothing
// charged to the user. Run as root; the debug-kernel lane runs it under
// lockdep and KASAN.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "mrn_test_util.h"

using mrn::Ctx;
using mrn::page_size;

namespace {

// Two threads released together, each spinning until the other is ready.
class StartLine {
public:
	void arrive()
	{
		ready_.fetch_add(1);
		while (ready_.load() < 2) {
		}
	}
	void reset() { ready_.store(0); }

private:
	std::atomic<int> ready_{0};
};

char *one_page()
{
	void *p = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (p == MAP_FAILED)
		return nullptr;
	static_cast<char *>(p)[0] = 1;
	return static_cast<char *>(p);
}

TEST(Teardown, UnregisterRacingAnInvalidation)
{
	Ctx c;
	ASSERT_TRUE(c.ok());
	const int rounds = 3000;
	long clean = 0, dirty = 0, drained_after = 0, errors = 0;
	for (int r = 0; r < rounds; r++) {
		char *p = one_page();
		ASSERT_NE(nullptr, p);
		int64_t id = c.reg(p, page_size(), static_cast<uint64_t>(r));
		ASSERT_GT(id, 0);
		StartLine go;
		int rc = 0;
		std::thread unmapper([&] {
			go.arrive();
			munmap(p, page_size());
		});
		go.arrive();
		rc = c.unreg(static_cast<uint64_t>(id));
		unmapper.join();
		if (rc == 0)
			clean++;
		else if (rc == MRN_UNREGISTER_WAS_DIRTY)
			dirty++;
		else
			errors++;
		if (c.drain_ids().count(static_cast<uint64_t>(id)))
			drained_after++;
		if (c.unreg(static_cast<uint64_t>(id)) != -ESTALE)
			errors++;
	}
	printf("UNREGISTER racing munmap, %d rounds: %ld clean, %ld dirty\n", rounds, clean, dirty);
	EXPECT_EQ(0, errors);
	EXPECT_EQ(0, drained_after) << "DRAIN named a registration after UNREGISTER returned";
	EXPECT_EQ(0u, c.query().registrations);
}

TEST(Teardown, CloseRacingAnInvalidation)
{
	const int rounds = 500, per_round = 64;
	long invalidated_before_close = 0;
	for (int r = 0; r < rounds; r++) {
		auto c = std::make_unique<Ctx>();
		ASSERT_TRUE(c->ok());
		void *v = mmap(nullptr, per_round * page_size(), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ASSERT_NE(MAP_FAILED, v);
		char *m = static_cast<char *>(v);
		for (int i = 0; i < per_round; i++) {
			m[i * page_size()] = 1;
			ASSERT_GT(c->reg(m + i * page_size(), page_size(), static_cast<uint64_t>(i)),
				  0);
		}
		StartLine go;
		std::thread unmapper([&] {
			go.arrive();
			// Page by page, so that close() lands between callbacks.
			for (int i = per_round - 1; i >= 0; i--)
				munmap(m + i * page_size(), page_size());
		});
		go.arrive();
		invalidated_before_close += static_cast<long>(c->gen());
		c.reset();
		unmapper.join();
	}
	Ctx fresh;
	ASSERT_TRUE(fresh.ok());
	mrn_query q = fresh.query();
	printf("close racing munmap, %d rounds of %d: %ld invalidations seen before close\n",
	       rounds, per_round, invalidated_before_close);
	EXPECT_EQ(0u, q.user_registrations) << "registrations still charged after close";
}

} // namespace

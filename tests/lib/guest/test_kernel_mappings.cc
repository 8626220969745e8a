// SPDX-License-Identifier: BSD-3-Clause
// Issue #21's scenario with the kernel monitor (in the guest, mrnotify.ko
// loaded): tens of thousands of small cached registrations leave the
// application its mappings. The kernel watches registrations without
// touching VMAs, so nothing here splits a mapping.
#include "lib/mappings_left.h"

#include <gtest/gtest.h>

namespace mrn::test {
namespace {

class KernelMappings : public ::testing::TestWithParam<Layout> {};

TEST_P(KernelMappings, ApplicationKeepsItsMappings)
{
	if (access("/dev/mrnotify", R_OK | W_OK) != 0)
		GTEST_SKIP() << "no /dev/mrnotify";
	const MappingsLeft r = run_mappings_left(GetParam(), 40000, [](CacheUnderTest *c) {
		return make_public_cache(MRN_MONITOR_KERNEL, c);
	});
	ASSERT_EQ(0, r.status);
	EXPECT_EQ(40000u, r.registrations);
	EXPECT_EQ(0u, r.mmaps_failed);
	EXPECT_TRUE(r.malloc_ok);
	EXPECT_EQ(0u, r.stats.uncached);
	EXPECT_EQ(0u, r.stats.uffd_ranges);
	// Not one split of the application's mappings.
	EXPECT_EQ(r.maps_before, r.maps_registered);
	EXPECT_EQ(r.maps_before, r.maps_destroyed);
	std::printf("[ layout %d ] the application's mappings: %zu before, %zu with %zu "
		    "registrations, %zu after destroy; the process's: %zu before, %zu with\n",
		    int(GetParam()), r.maps_before, r.maps_registered, r.registrations,
		    r.maps_destroyed, r.process_maps_before, r.process_maps_registered);
}

INSTANTIATE_TEST_SUITE_P(Layouts, KernelMappings,
			 ::testing::Values(Layout::kAlternatingPages, Layout::kAdjacentPages,
					   Layout::kManyMappings));

} // namespace
} // namespace mrn::test

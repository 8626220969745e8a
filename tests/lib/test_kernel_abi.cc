// SPDX-License-Identifier: BSD-3-Clause
// Which modules the kernel monitor accepts (#27). A later ABI only adds
// (<linux/mrnotify.h>), so a library built for ABI 2 must keep working when
// the node's module is upgraded to 3; before #27 it compared with != and
// switched itself off (EPROTO, no cache) on every newer module.
#include "monitor.h"

#include <linux/mrnotify.h>

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(KernelAbi, ThisAndEveryLaterModuleServeTheLibrary)
{
	for (uint32_t abi : {MRN_ABI_VERSION, MRN_ABI_VERSION + 1, MRN_ABI_VERSION + 100}) {
		std::string why;
		EXPECT_TRUE(mrn::kernel_abi_serves(abi, &why)) << "ABI " << abi << ": " << why;
	}
}

TEST(KernelAbi, OlderModulesAreRefusedWithTheReason)
{
	for (uint32_t abi = 0; abi < MRN_ABI_VERSION; abi++) {
		std::string why;
		EXPECT_FALSE(mrn::kernel_abi_serves(abi, &why)) << "ABI " << abi;
		EXPECT_NE(std::string::npos, why.find("ABI " + std::to_string(abi))) << why;
	}
}

} // namespace

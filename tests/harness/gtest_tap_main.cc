// SPDX-License-Identifier: BSD-3-Clause
//
// main() of every GoogleTest program in the tree: GoogleTest's own output,
// and beside it one TAP line a test and the plan at the end. TAP is the one
// result format of the tests (tests/README.md): automake's tap-driver reads
// it in make check, tests/harness/test-summary.sh reads it from the guests'
// logs. A program that crashes leaves no plan, which both count as a failure.
//
// A test that forks must not let its child reach the end of the program: the
// child's lines would count twice. The listener prints only in the process
// that started the tests.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

class TapListener : public testing::EmptyTestEventListener {
public:
	void OnTestEnd(const testing::TestInfo &test) override
	{
		if (getpid() != owner_)
			return;
		const testing::TestResult &r = *test.result();
		std::string name = std::string(test.test_suite_name()) + "." + test.name();
		++count_;
		if (r.Skipped())
			std::printf("ok %d - %s # SKIP%s\n", count_, name.c_str(),
				    skip_reason(r).c_str());
		else
			std::printf("%s %d - %s\n", r.Failed() ? "not ok" : "ok", count_,
				    name.c_str());
		std::fflush(stdout);
	}

	void OnTestProgramEnd(const testing::UnitTest &) override
	{
		if (getpid() != owner_)
			return;
		// No test selected (a filter that matched nothing) is a skip, not
		// a pass: TAP's empty plan with a reason.
		if (count_ == 0)
			std::printf("1..0 # SKIP no test selected\n");
		else
			std::printf("1..%d\n", count_);
		std::fflush(stdout);
	}

private:
	// GTEST_SKIP()'s message, on the TAP line (the first line of it).
	static std::string skip_reason(const testing::TestResult &r)
	{
		for (int i = 0; i < r.total_part_count(); i++) {
			const testing::TestPartResult &part = r.GetTestPartResult(i);
			if (!part.skipped() || !part.message() || !*part.message())
				continue;
			std::string why = part.message();
			why = why.substr(0, why.find('\n'));
			return " " + why;
		}
		return "";
	}

	const pid_t owner_ = getpid();
	int count_ = 0;
};

} // namespace

int main(int argc, char **argv)
{
	testing::InitGoogleTest(&argc, argv);
	// Owned by GoogleTest's listener list from here on.
	testing::UnitTest::GetInstance()->listeners().Append(new TapListener);
	return RUN_ALL_TESTS();
}

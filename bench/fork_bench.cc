// SPDX-License-Identifier: BSD-3-Clause
//
// fork() with 1 GiB registered, under each fork policy, against fork() of the
// same process with the memory touched but nothing registered.
//
// The registrations pin for real, as ibv_reg_mr does (a long-term FOLL_PIN):
// the register function makes the range an io_uring fixed buffer. Since Linux
// 5.13 fork() copies pinned anonymous pages into the child at once, so with
// the policy `none` (what `auto` means there) fork pays for copying them;
// with `dontfork` the child gets none of them. Prints milliseconds per
// fork + child exit + wait, and ratios.
#include "bench_cache.h"

#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kGiB = size_t(1) << 30;

// payload: the io_uring fd holding the buffer.
int pin_reg(void *, void *, void *addr, size_t len, uint32_t, void *payload)
{
	io_uring_params p{};
	const int fd = int(syscall(__NR_io_uring_setup, 1, &p));
	if (fd < 0)
		return -errno;
	iovec iov{addr, len};
	if (syscall(__NR_io_uring_register, fd, IORING_REGISTER_BUFFERS, &iov, 1) < 0) {
		const int err = errno;
		close(fd);
		return -err;
	}
	*static_cast<int *>(payload) = fd;
	return 0;
}

int pin_dereg(void *, void *payload)
{
	close(*static_cast<int *>(payload)); // unpins
	return 0;
}

double fork_ms(int reps)
{
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		const auto t0 = Clock::now();
		const pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		int status = 0;
		if (pid < 0 || waitpid(pid, &status, 0) != pid)
			throw std::runtime_error("fork failed");
		best = std::min(
			best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
	}
	return best;
}

double with_policy(char *mem, mrn_fork_policy_t policy, int reps)
{
	mrn::bench::CacheOptions o;
	o.name = "fork-bench";
	o.reg = pin_reg;
	o.dereg = pin_dereg;
	o.payload_size = sizeof(int);
	o.fork_policy = policy;
	std::unique_ptr<mrn::Cache> cache = mrn::bench::make_cache(o);
	mrn::Entry *e = nullptr;
	const int rc = cache->get(mem, kGiB, 1, &e);
	if (rc < 0)
		throw std::runtime_error(std::string("registering 1 GiB failed: ") + strerror(-rc));
	const double ms = fork_ms(reps);
	cache->put(e);
	return ms;
}

} // namespace

int main(int argc, char **argv)
{
	const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	if (argc > 1 && !quick) {
		std::printf("usage: %s [--quick]\nfork() time with 1 GiB registered under each "
			    "fork policy, against no registration.\n",
			    argv[0]);
		return 2;
	}
	const int reps = quick ? 3 : 10;
	char *mem = static_cast<char *>(
		mmap(nullptr, kGiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (mem == MAP_FAILED) {
		std::perror("fork_bench: mmap of 1 GiB");
		return 1;
	}
	memset(mem, 1, kGiB);
	try {
		const double base = fork_ms(reps);
		const double none = with_policy(mem, MRN_FORK_NONE, reps);
		const double dontfork = with_policy(mem, MRN_FORK_DONTFORK, reps);
		std::printf("fork() + exit + wait with 1 GiB touched (best of %d), kernel policy "
			    "auto = %s here:\n",
			    reps,
			    mrn::resolve_fork_policy(MRN_FORK_AUTO) == MRN_FORK_NONE ? "none"
										     : "dontfork");
		std::printf("  nothing registered     %8.2f ms\n", base);
		std::printf("  registered, none       %8.2f ms  %6.2fx\n", none, none / base);
		std::printf("  registered, dontfork   %8.2f ms  %6.2fx\n", dontfork,
			    dontfork / base);
	} catch (const std::exception &ex) {
		std::fprintf(stderr,
			     "fork_bench: %s (io_uring fixed buffers pin the memory: "
			     "is io_uring enabled, and RLIMIT_MEMLOCK high enough?)\n",
			     ex.what());
		munmap(mem, kGiB);
		return 77;
	}
	munmap(mem, kGiB);
	return 0;
}

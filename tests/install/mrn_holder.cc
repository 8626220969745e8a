// SPDX-License-Identifier: BSD-3-Clause
// A job that holds /dev/mrnotify open across a package upgrade (the install
// test's guest-upgrade.sh). Built in the install root against the installed
// libmrnotify-dev. Round after round it watches a fresh mapping, unmaps it and
// checks that the kernel reported exactly that range; it stops after the
// round in which the file named by its second argument appears, and says how
// many rounds passed. Exit 0 when every round saw its invalidation.
#include <mrnotify.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

struct Seen {
	uint64_t cookie = 0;
	long count = 0;
};

void on_invalid(void *arg, uint64_t cookie, void *, size_t)
{
	auto *seen = static_cast<Seen *>(arg);
	seen->cookie = cookie;
	++seen->count;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 3) {
		std::fprintf(stderr, "usage: mrn_holder READY-FILE STOP-FILE\n");
		return 2;
	}
	mrn_watch_t *watch = nullptr;
	int rc = mrn_watch_open(MRN_MONITOR_KERNEL, &watch);
	if (rc != 0) {
		std::fprintf(stderr, "mrn_holder: mrn_watch_open: %s\n", std::strerror(-rc));
		return 1;
	}
	const size_t len = static_cast<size_t>(sysconf(_SC_PAGESIZE)) * 4;
	uint64_t generation = 0;
	long rounds = 0;
	bool stop = false;
	while (!stop) {
		stop = access(argv[2], F_OK) == 0;
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (p == MAP_FAILED) {
			std::perror("mrn_holder: mmap");
			return 1;
		}
		std::memset(p, 1, len);
		uint64_t id = 0;
		const uint64_t cookie = static_cast<uint64_t>(rounds) + 1;
		rc = mrn_watch_add(watch, p, len, cookie, &id);
		if (rc != 0) {
			std::fprintf(stderr, "mrn_holder: round %ld: mrn_watch_add: %s\n", rounds,
				     std::strerror(-rc));
			return 1;
		}
		munmap(p, len);
		// The kernel moves the generation before munmap returns.
		const uint64_t now = __atomic_load_n(mrn_watch_generation(watch), __ATOMIC_ACQUIRE);
		if (now == generation) {
			std::fprintf(stderr, "mrn_holder: round %ld: the generation did not move\n",
				     rounds);
			return 1;
		}
		Seen seen;
		const long n = mrn_watch_drain(watch, on_invalid, &seen, &generation);
		if (n != 1 || seen.count != 1 || seen.cookie != cookie) {
			std::fprintf(stderr,
				     "mrn_holder: round %ld: the unmap was not reported "
				     "(drain %ld, cookie %llu)\n",
				     rounds, n, static_cast<unsigned long long>(seen.cookie));
			return 1;
		}
		if (++rounds == 1) {
			FILE *f = std::fopen(argv[1], "w");
			if (f)
				std::fclose(f);
		}
		usleep(20000);
	}
	std::printf("mrn_holder: %ld rounds, each unmap reported\n", rounds);
	return 0;
}

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# mrnotify quick start, for a Debian 12 machine (run as root, or with sudo
# available for installing packages):
#   ./quickstart.sh demo   build, boot a guest kernel with mrnotify.ko and
#                          Soft-RoCE, and show the cache at work
#   ./quickstart.sh test   build and run every test: unit tests on the host
#                          (also under ThreadSanitizer and AddressSanitizer),
#                          the guest tests (module + rxe), two guests as two
#                          nodes with mpirun across them, the module's own
#                          tests on Debian 11's and 13's kernels and on a
#                          debug kernel, the whole project on Debian 13
#                          (Open MPI 5.0.7), the packages installed into a
#                          fresh Debian 12 root, the benchmarks, then
#                          distcheck
# Each does its own set-up: missing Debian packages, autogen, configure, make.
# The build goes to _build/ (MRNOTIFY_BUILD_DIR overrides).
set -u -o pipefail

top=$(cd "$(dirname "$0")" && pwd)
build=${MRNOTIFY_BUILD_DIR:-$top/_build}
jobs=$(nproc 2>/dev/null || echo 2)

packages=(
	autoconf automake libtool pkg-config make gcc g++
	libgtest-dev libbenchmark-dev liburcu-dev
	libibverbs-dev librdmacm-dev ibverbs-providers ibverbs-utils
	libopenmpi-dev openmpi-bin libucx-dev ucx-utils libhwloc-dev
	linux-headers-amd64 linux-image-amd64 kmod
	qemu-system-x86 busybox-static cpio iproute2
	mmdebstrap
	linux-source-6.1 bc flex bison libelf-dev libssl-dev
	dpkg-dev debhelper dh-dkms lintian chrpath git
	hpcc lammps lammps-examples trinity dropbear-bin
)

say() { printf '\n== %s\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

install_packages() {
	local missing=() p
	for p in "${packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing Debian packages: ${missing[*]}"
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends "${missing[@]}" ||
		die "could not install: ${missing[*]}"
}

build_tree() {
	cd "$top" || die "no $top"
	if [ ! -x configure ] || [ configure.ac -nt configure ]; then
		say "autogen"
		./autogen.sh >/dev/null || die "autogen.sh failed"
	fi
	mkdir -p "$build" && cd "$build" || die "cannot create $build"
	if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
		say "configure"
		"$top/configure" --enable-werror || die "configure failed (see $build/config.log)"
	fi
	say "make"
	make -j"$jobs" || die "build failed"
}

run_tests() {
	local status=0
	say "unit tests (make check)"
	make -j"$jobs" check || status=1
	say "sanitizers (the unit tests under ThreadSanitizer, then AddressSanitizer + UBSan)"
	"$top/tools/sanitizer-check.sh" thread "$build/sanitize-thread" || status=1
	"$top/tools/sanitizer-check.sh" address "$build/sanitize-address" || status=1
	say "guest tests (make check-guest: qemu, mrnotify.ko, Soft-RoCE)"
	make check-guest || status=1
	say "two nodes (make check-two-nodes: two guests on a private link, mpirun across both)"
	make check-two-nodes || status=1
	say "the module on Debian 11's 5.10 and Debian 13's 6.12 kernels (make check-kernels)"
	# Their stacks are cached in ${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks};
	# one that cannot be fetched is counted as skipped.
	make check-kernels || status=1
	say "Debian 13 (6.12, Open MPI 5.0.7): build, make check and the guest tests in its root (make check-debian13)"
	make check-debian13 || status=1
	say "the module on a debug kernel: lockdep, KASAN, KFENCE, the race fuzzer (make check-debug-kernel)"
	# Run when the kernel is cached; MRNOTIFY_DEBUG_KERNEL=build builds it
	# first (80 min on 2 busy cores); skipped otherwise.
	make check-debug-kernel || status=1
	say "the packages, installed into a fresh Debian 12 root and booted (make check-install)"
	# The root is cached in ${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}
	# (tools/install-root.sh); docs/deploying.md lists what is checked.
	make check-install || status=1
	say "benchmarks (figures, not pass/fail; the guest is emulated: read its ratios)"
	bench/cache_bench --quick || status=1
	# The Open MPI component's hit path against grdma ran in make check
	# (tests/mca/api_uffd.test); its figures:
	sed -n '/^# hit path/,/^hit_speedup_vs_grdma=/p' tests/mca/api_uffd.log 2>/dev/null
	make bench-guest || status=1
	say "make distcheck"
	make -j"$jobs" distcheck >distcheck.log 2>&1 || {
		tail -n 40 distcheck.log
		echo "make distcheck failed (full log: $build/distcheck.log)"
		status=1
	}
	grep -E '^# (TOTAL|PASS|FAIL|ERROR)' distcheck.log | sed 's/^/distcheck /'
	say "summary"
	shopt -s nullglob
	# Every test log of the component (not automake's test-suite.log,
	# which repeats the failed ones).
	local mca_logs=(tests/mca/*.log)
	mca_logs=("${mca_logs[@]/*test-suite.log/}")
	local d13_logs=(debian13/tests/lib/*.log debian13/tests/harness/*.log debian13/tests/mca/*.log)
	d13_logs=("${d13_logs[@]/*test-suite.log/}")
	"$top/tools/test-summary.sh" tests/lib/*.log tests/harness/*.log tests/ucx/*.log \
		sanitize-thread/tests/{lib,harness}/*.log sanitize-address/tests/{lib,harness}/*.log \
		"${mca_logs[@]}" tools/check/mrnotify-check.log \
		tests/guest-results/[0-9]*.out tests/two-nodes-results/node[12]/[0-9]*.out \
		tests/kernel-results-*/[0-9]*.out tests/kernel-results-*/status.log \
		"${d13_logs[@]}" debian13/guest-results/[0-9]*.out debian13/status.log \
		tests/install-results/host.log tests/install-results/host-checks.log \
		tests/install-results/guest/[0-9]*.out || status=1
	return $status
}

case "${1:-}" in
demo)
	install_packages
	build_tree
	say "demo (in a qemu guest; takes about a minute under emulation)"
	make demo
	;;
test)
	install_packages
	build_tree
	run_tests
	;;
*)
	sed -n '4,15p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

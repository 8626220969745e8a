#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# mrnotify quick start, for a Debian 12 machine (run as root, or with sudo
# available for installing packages):
#   ./quickstart.sh demo   build, boot a guest kernel with mrnotify.ko and
#                          Soft-RoCE, and show the cache at work
#   ./quickstart.sh test   build and run every test: unit tests on the host
#                          (also under ThreadSanitizer and AddressSanitizer),
#                          distcheck (the first of these that fails ends the
#                          run), the guest tests (module + rxe), two guests as two
#                          nodes with mpirun across them, the module's own
#                          tests on Debian 11's and 13's kernels and on a
#                          debug kernel, the whole project on Debian 13
#                          (Open MPI 5.0.7), the packages installed into a
#                          fresh Debian 12 root, then the benchmarks
# Each does its own set-up: missing Debian packages, autogen, configure, make.
# The build goes to _build/ (MRNOTIFY_BUILD_DIR overrides).
set -u -o pipefail

top=$(cd "$(dirname "$0")" && pwd)
build=${MRNOTIFY_BUILD_DIR:-$top/_build}
jobs=$(nproc 2>/dev/null || echo 2)

packages=(
	autoconf automake libtool pkg-config make gcc g++
	libgtest-dev liburcu-dev
	libibverbs-dev ibverbs-providers ibverbs-utils
	libopenmpi-dev openmpi-bin libucx-dev ucx-utils libfabric-dev libfabric-bin
	linux-headers-amd64 linux-image-amd64 kmod
	qemu-system-x86 busybox-static cpio iproute2
	mmdebstrap
	linux-source-6.1 bc flex bison libelf-dev libssl-dev
	dpkg-dev debhelper dh-dkms lintian chrpath git
	hpcc lammps lammps-examples trinity dropbear-bin
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
	ccache
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

# A compiler cache next to the cached roots: a clean clone (CI's) builds
# the tree four times over (the tree, two sanitizer builds, distcheck) and
# the packages twice; unchanged sources then come from the cache. No
# directory in the hash: distcheck's copy of the tree builds in a folder of
# its own. MRNOTIFY_CCACHE=no: compile everything.
use_ccache() {
	[ "${MRNOTIFY_CCACHE:-yes}" = no ] && return 0
	[ -x /usr/bin/ccache ] && [ -d /usr/lib/ccache ] || return 0
	local dir=${CCACHE_DIR:-${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}/ccache}
	mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] || return 0
	export CCACHE_DIR=$dir CCACHE_NOHASHDIR=1 PATH=/usr/lib/ccache:$PATH
	ccache --max-size=4G >/dev/null && ccache --zero-stats >/dev/null
}

ccache_summary() {
	[ "${CCACHE_DIR:-}" ] && command -v ccache >/dev/null || return 0
	say "compiler cache ($CCACHE_DIR)"
	ccache --show-stats | sed -n '/Hits:/,/Misses:/p'
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

# One lane (lane NAME WHAT LOGS COMMAND...): a make target or script that
# can run alone. Its status, time and the logs its tests leave are kept for
# the table at the end.
lane_names=() lane_rcs=() lane_secs=() lane_logs=()
lane() {
	local name=$1 what=$2 logs=$3
	shift 3
	say "$name: $what"
	local t0=$SECONDS rc
	"$@"
	rc=$?
	lane_names+=("$name") lane_rcs+=("$rc") lane_secs+=($((SECONDS - t0))) lane_logs+=("$logs")
	return 0
}

run_tests() {
	# Each lane's logs (globs, relative to the build directory): every test
	# log, not automake's test-suite.log, which repeats the failed ones.
	# The host lanes come first and the first that fails ends the run,
	# minutes in, before an hour of guests.
	host_lane "unit" "make check (libmrnotify, the harness, the UCX plugin, the Open MPI component, mrnotify-check)" \
		"tests/lib/*.log tests/harness/*.log tests/kernel/*.log tests/ucx/*.log tests/ofi/*.log tests/mca/*.log tools/check/mrnotify-check.log" \
		make -j"$jobs" check || return 1
	host_lane "sanitizer-thread" "the unit tests under ThreadSanitizer" "sanitize-thread/tests/lib/*.log sanitize-thread/tests/harness/*.log sanitize-thread/tests/ofi/*.log" \
		"$top/tests/harness/sanitizer-check.sh" thread "$build/sanitize-thread" || return 1
	host_lane "sanitizer-address" "the unit tests under AddressSanitizer + UBSan" "sanitize-address/tests/lib/*.log sanitize-address/tests/harness/*.log sanitize-address/tests/ofi/*.log" \
		"$top/tests/harness/sanitizer-check.sh" address "$build/sanitize-address" || return 1
	# The tarball configures, builds every program (the tests' too),
	# installs and uninstalls; TESTS= leaves the tests to the unit lane,
	# which runs them from this same source.
	host_lane "distcheck" "make distcheck TESTS= (the tarball builds, installs and uninstalls)" "" sh -c 'make -j"$1" distcheck TESTS= >distcheck.log 2>&1 ||
		{ tail -n 40 distcheck.log; echo "make distcheck failed (full log: $PWD/distcheck.log)"; exit 1; }
		grep -E "archives ready for distribution" distcheck.log' sh "$jobs" || return 1
	lane "guest" "make check-guest (qemu, mrnotify.ko, Soft-RoCE)" "tests/guest-results/[0-9]*.out" make check-guest
	lane "two-nodes" "make check-two-nodes (two guests on a private link, mpirun across both)" "tests/two-nodes-results/node[12]/[0-9]*.out" make check-two-nodes
	# Debian 11's 5.10 and trixie-backports' 7.2 and 7.3; their stacks are
	# cached in ${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}, and one
	# that cannot be fetched is counted as skipped. Debian 13's 6.12 is left
	# to the debian13 lane, whose guest runs every guest test on it, and
	# forky's 7.2 (gcc 16) to the forky lane, which builds the module there
	# and boots it.
	lane "kernels" "make check-kernels (the module on Debian 11's 5.10 and trixie-backports' 7.2 and 7.3)" \
		"tests/kernel-results-[0-9]*/[0-9]*.out tests/kernel-results-[0-9]*/status.log" \
		make check-kernels KERNELS="5.10 7.2 7.3"
	lane "debian13" "make check-debian13 (build, make check and the guest tests in a Debian 13 root)" \
		"debian13/tests/lib/*.log debian13/tests/harness/*.log debian13/tests/ucx/*.log debian13/tests/ofi/*.log debian13/tests/kernel/*.log debian13/tests/mca/*.log debian13/guest-results/[0-9]*.out debian13/two-nodes-results/node[12]/[0-9]*.out debian13/ompi.log debian13/status.log" \
		make check-debian13
	# Debian testing: UCX 1.23, Open MPI 6.0, 7.2 built with gcc 16.
	lane "forky" "make check-forky (build, make check and the UCX plugin's guest tests in a Debian forky root)" \
		"forky/tests/lib/*.log forky/tests/harness/*.log forky/tests/ucx/*.log forky/tests/kernel/*.log forky/tests/mca/*.log forky/guest-results/[0-9]*.out forky/ompi.log forky/status.log" \
		make check-forky
	# About 40 minutes of guest time, more than CI's budget leaves: skipped
	# unless MRNOTIFY_DEBUG_KERNEL=run (the cached kernel) or build (build
	# it first: 25 to 80 min on 2 cores) is set.
	lane "debug-kernel" "make check-debug-kernel (lockdep, KASAN, KFENCE, the race fuzzer, trinity)" \
		"tests/kernel-results-debug/[0-9]*.out tests/kernel-results-debug/status.log tests/kernel-results-debug-control/status.log" \
		env MRNOTIFY_DEBUG_KERNEL="${MRNOTIFY_DEBUG_KERNEL:-skip}" make check-debug-kernel
	# The root is cached like the stacks (tests/harness/install-root.sh);
	# docs/deploying.md lists what is checked.
	lane "install" "make check-install (the packages in a fresh Debian 12 root, booted)" \
		"tests/install-results/host.log tests/install-results/host-checks.log tests/install-results/guest/[0-9]*.out tests/install-results/removal-checks.log" \
		make check-install
	# Figures, not pass/fail: the host benchmarks run, so none rots. The
	# Open MPI component's hit path against grdma: bench/rcache_bench. The
	# guest's figures (make bench-guest) are for records, not for CI.
	lane "bench" "benchmarks: figures, not pass/fail" "" sh -c 'rc=0
		bench/cache_bench --quick || rc=1
		make -s -C bench bench-rcache || rc=1
		exit $rc'
	summary
}

# A lane whose failure ends the run: the summary so far, and status 1.
host_lane() {
	lane "$@"
	[ "${lane_rcs[-1]}" -eq 0 ] && return 0
	echo
	echo "quickstart: the ${lane_names[-1]} lane failed; the lanes after it are not run"
	summary
	return 1
}

# Every log's TAP counts (tests/harness/test-summary.sh), then one row a lane (what it ran, its exit status and
# time), kept in lanes.tsv for tests/lanes/README.md (tests/harness/lanes-doc.sh); the
# last line is the total.
summary() {
	say "summary"
	shopt -s nullglob
	local i status=0 all=() logs counts p f s tp=0 tf=0 ts=0
	printf 'lane\tresult\tpassed\tfailed\tskipped\tseconds\n' >lanes.tsv
	for i in "${!lane_names[@]}"; do
		# shellcheck disable=SC2206 # the globs are meant to expand here
		logs=(${lane_logs[$i]})
		logs=("${logs[@]/*test-suite.log/}")
		all+=("${logs[@]}")
		p=0 f=0 s=0
		if [ ${#logs[@]} -gt 0 ]; then
			counts=$("$top/tests/harness/test-summary.sh" "${logs[@]}" | tail -n 1)
			read -r p f s <<<"$(sed -E 's/^total: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/' <<<"$counts")"
		fi
		# A lane that failed without a failed test (it did not get to run
		# them, or what failed is not a test) counts as one failure.
		if [ "${lane_rcs[$i]}" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
		[ "$f" -eq 0 ] || status=1
		tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
		printf '%s\t%s\t%d\t%d\t%d\t%d\n' "${lane_names[$i]}" \
			"$([ "${lane_rcs[$i]}" -eq 0 ] && echo ok || echo "FAILED (exit ${lane_rcs[$i]})")" \
			"$p" "$f" "$s" "${lane_secs[$i]}" >>lanes.tsv
	done
	"$top/tests/harness/test-summary.sh" "${all[@]}" | sed '$d'
	echo
	awk -F '\t' '{ printf "%-18s %-18s %7s %7s %8s %8s\n", $1, $2, $3, $4, $5, $6 }' lanes.tsv
	echo "total: $tp passed, $tf failed, $ts skipped, in $SECONDS s ($(((SECONDS + 30) / 60)) min) since quickstart.sh started"
	return $status
}

case "${1:-}" in
demo)
	install_packages
	use_ccache
	build_tree
	say "demo (in a qemu guest; takes about a minute under emulation)"
	make demo
	;;
test)
	install_packages
	use_ccache
	build_tree
	run_tests
	rc=$?
	ccache_summary
	exit $rc
	;;
*)
	sed -n '4,15p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

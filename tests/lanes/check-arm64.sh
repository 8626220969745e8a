#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# check-arm64.sh --srcdir DIR --builddir DIR: libmrnotify and the UCX plugin
# built for arm64 (aarch64) with Debian 13's cross compiler against Debian
# 13's arm64 UCX 1.18.1, and the library's unit tests run under qemu-aarch64
# (user mode: the tests' own system calls go to this machine's kernel).
# In the arm64 stack's root (tests/harness/stacks.sh fetch arm64); the build
# goes to BUILDDIR/arm64. One TAP result a build step, and the test
# programs' own results.
#
# Then the Debian packages for arm64 (Debian 12's, as debian/control says:
# dpkg-buildpackage -aarm64 in stacks.sh's arm64-deb root), lintian, and
# their installation there: arm64 Open MPI's ompi_info lists the component,
# the plugin says it runs its UCX, mrnotify-check runs.
# Then the UCX plugin's host tests (ucx-host-tests.sh) and UCX transfers
# over shared memory and tcp with the plugin preloaded, in a second root
# where every program is arm64 (stacks.sh's arm64-run): scripts start UCX
# programs, and qemu-aarch64 run by hand follows no child, so there the
# kernel starts each program through binfmt_misc.
#
# Not run here, and why: the kernel module (no arm64 guest: qemu-system
# would emulate every instruction of a whole arm64 kernel, far slower than
# the x86-64 guests), and so every test that needs /dev/mrnotify.
set -u -o pipefail
src= build=
while [ $# -gt 0 ]; do
	case $1 in
	--srcdir) src=$2; shift ;;
	--builddir) build=$2; shift ;;
	*) echo "usage: check-arm64.sh --srcdir DIR --builddir DIR" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$src" ] && [ -n "$build" ] || { echo "usage: check-arm64.sh --srcdir DIR --builddir DIR" >&2; exit 2; }
src=$(readlink -f "$src") build=$(readlink -f "$build")
. "$src/tests/harness/tap.sh"

stacks=$src/tests/harness/stacks.sh
out=$build/arm64
mkdir -p "$out" || exit 1
"$stacks" fetch arm64
case $? in
0) ;;
3) skip "arm64: the cross-build root" "it is not cached and could not be made (see above)"; finish; exit ;;
*) fail "arm64: the cross-build root could not be made"; finish; exit ;;
esac
# In the root: the arm64 libraries are found through their pkg-config files.
in_root() { "$stacks" run arm64 --bind "$src" --bind "$out" "$@"; }
# The unit tests that need neither the module nor Open MPI.
progs="harness/test_pagemap_oracle lib/test_range_index lib/test_cache lib/test_model lib/test_fork
lib/test_reader_lock lib/test_ref_deltas lib/test_capi lib/test_uffd_ranges lib/test_uffd_mappings
lib/test_kernel_abi"
# What the plugin's host tests load besides the plugin (nothing now).
plugin_test_libs=
log=$out/build.log
if in_root sh -c '
	set -e
	cd "$1"
	if [ ! -f Makefile ] || [ "$2/configure" -nt config.status ]; then
		"$2/configure" --host=aarch64-linux-gnu --enable-werror --without-libfabric \
			PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
	fi
	make -j"$(nproc)"
	make -j"$(nproc)" -C tests $3' sh "$out" "$src" "$progs $plugin_test_libs" >"$log" 2>&1; then
	pass "arm64: libmrnotify and the tests built with aarch64-linux-gnu-g++ $(in_root aarch64-linux-gnu-g++ -dumpfullversion 2>/dev/null)"
else
	tail -n 30 "$log" | sed 's/^/# /'
	fail "arm64: the build failed (see $log)"
	finish
	exit
fi
# The plugin: configure's word, and the entry-point list checked against
# the arm64 UCX's headers (check-entries.sh, part of the build).
why=$(sed -n 's/^ *UCX plugin \.* //p' "$out/config.log" "$log" 2>/dev/null | head -n 1)
if [ -f "$out/ucx-plugin/.libs/libmrnotify-ucx.so" ]; then
	pass "arm64: the UCX plugin built: $why"
	file "$out/ucx-plugin/.libs/libmrnotify-ucx.so" 2>/dev/null | sed 's/^/# /'
else
	fail "arm64: no UCX plugin: $why"
fi
# Each program prints TAP (its GoogleTest cases), relayed as this lane's.
for p in $progs; do
	t=$out/tests/$p
	# Libtool leaves a wrapper script where the program needs its shared
	# libraries; the real program is beside it.
	[ -x "$out/tests/${p%/*}/.libs/${p##*/}" ] && t=$out/tests/${p%/*}/.libs/${p##*/}
	if ! [ -x "$t" ]; then
		fail "arm64: $p: not built"
		continue
	fi
	# What qemu-user cannot do, each a skip with the reason: it takes
	# madvise() advice as a hint and drops it (so MADV_DONTFORK hides
	# nothing from a child), and it refuses seccomp filters.
	case $p in
	lib/test_cache) no='CacheTest.DontforkIsCountedPerPage:CacheTest.FailedRegistrationUndoesItsForkAdvice' ;;
	lib/test_fork) no='ForkPolicyTest.DontforkHidesTheWholePageFromTheChild:ForkPolicyTest.DontforkLeavesMappingsForTheApplication' ;;
	lib/test_capi) no='AutoExternal.FallsBackToExternalWhereAutoFallsBackToNone' ;;
	*) no= ;;
	esac
	for n in $(echo "$no" | tr ':' ' '); do
		case $n in
		AutoExternal.*) skip "$n" "qemu-user installs no seccomp filter" ;;
		*) skip "$n" "qemu-user ignores MADV_DONTFORK" ;;
		esac
	done
	note "arm64: $p under qemu-aarch64"
	relay in_root env LD_LIBRARY_PATH="$out/lib/.libs" qemu-aarch64 -L / "$t" ${no:+--gtest_filter=-$no}
done

debs() {
	local why d=$out/debs
	why=$("$stacks" fetch arm64-deb 2>&1)
	case $? in
	0) ;;
	3) skip "arm64: the Debian packages" "$(echo "$why" | tail -n 1)"; return ;;
	*) echo "$why" | sed 's/^/# /'; fail "arm64: the Debian 12 cross-build root could not be made"; return ;;
	esac
	command -v git >/dev/null && git -C "$src" rev-parse >/dev/null 2>&1 ||
		{ skip "arm64: the Debian packages" "they are built from a git checkout"; return; }
	# The source files as a clean clone has them (tracked and new; not
	# this lane's own output, should the build be in the tree).
	rm -rf "$d" && mkdir -p "$d/src" &&
		(cd "$src" && git ls-files -co --exclude-standard -z |
			grep -zv "^${out#"$src"/}/" | cpio -0pdm --quiet "$d/src") || {
		fail "arm64: cannot copy the source for the packages"
		return
	}
	if "$stacks" run arm64-deb --bind "$d" sh -c 'cd "$1/src" &&
		DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -us -uc -B -aarm64' sh "$d" \
		>"$d/build.log" 2>&1; then
		pass "arm64: dpkg-buildpackage -us -uc -B -aarm64 (Debian 12): $(cd "$d" && ls -- *.deb | grep -v dbgsym | sed 's/_.*//' | tr '\n' ' ')"
	else
		tail -n 30 "$d/build.log" | sed 's/^/# /'
		fail "arm64: dpkg-buildpackage -aarm64 failed (see $d/build.log)"
		return
	fi
	relay "$stacks" run arm64-deb --bind "$src" --bind "$d" sh "$src/tests/lanes/arm64-debs-installed.sh" "$d"
}
debs

[ -f "$out/ucx-plugin/.libs/libmrnotify-ucx.so" ] || finish
why=$("$stacks" fetch arm64-run 2>&1)
case $? in
0) ;;
3) skip "arm64: the plugin's host tests and transfers" "$(echo "$why" | tail -n 1)"; finish ;;
*) echo "$why" | sed 's/^/# /'; fail "arm64: the emulated arm64 root could not be made"; finish ;;
esac
in_arm64() { "$stacks" run arm64-run --bind "$src" --bind "$out" "$@"; }
note "arm64: $(in_arm64 sh -c 'echo "$(uname -m), $(ucx_info -v | sed -n "s/^# Library version: /UCX /p")"')"
relay in_arm64 sh -c 'cd "$1/tests" && BUILDDIR=$1 sh "$2/tests/ucx/ucx-host-tests.sh"' sh "$out" "$src"
relay in_arm64 sh "$src/tests/ucx/ucx-perftest-preloaded.sh" "$out"
finish

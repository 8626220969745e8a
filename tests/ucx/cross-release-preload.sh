#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The UCX plugin built against another UCX release (in another Debian
# root), preloaded into this machine's programs: what a node whose UCX
# differs from the build host's meets (a MOFED/DOCA update, an image built
# elsewhere). Every program starts and runs; a UCX program runs with UCX as
# configured, and one line says why. The negative control is the plugin's
# former shape (one object linked against the UCX it was built for): its
# backend preloaded alone, which must fail where its UCX's symbols are
# missing here.
#   cross-release-preload.sh OTHER_BUILDDIR [LIBDIR]
# LIBDIR: this machine's libmrnotify.so.0 (the host build's lib/.libs), for
# the control, so that what stops it is UCX and not a C++ runtime newer than
# this machine's. Run on the host by tests/lanes/check-root.sh after the
# tree is built in the other root. Prints TAP.
set -u
. "$(dirname "$0")/../harness/tap.sh"
other=${1:?usage: cross-release-preload.sh OTHER_BUILDDIR [LIBDIR]}
libdir=${2:-$other/lib/.libs}
shim=$other/ucx-plugin/.libs/libmrnotify-ucx.so
backend=$other/ucx-plugin/.libs/libmrnotify-ucx-backend.so
if [ ! -r "$shim" ] || [ ! -r "$backend" ] || ! command -v ucx_info >/dev/null; then
	skip "the plugin of another UCX release, preloaded here" "needs $shim, $backend and ucx_info here"
	finish
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset UCX_MRNOTIFY_ENABLE UCX_MRNOTIFY_STATS LD_PRELOAD
# "# Version 1.13.1" (1.13), "# Library version: 1.18.1" (later).
here_release=$(ucx_info -v | sed -n 's/^# \(Library \)\{0,1\}[Vv]ersion:\{0,1\} *\([0-9][0-9.]*\).*/\2/p' | head -n 1)
built=$(ls -d "$other"/ucx-plugin/.libs/ucx-*/ 2>/dev/null | sed 's|.*/ucx-\([0-9.]*\)/$|\1|' | head -n 1)
note "the plugin built for UCX ${built:-?}, this machine's UCX $here_release"
if [ "$built" = "$(echo "$here_release" | cut -d. -f1,2)" ]; then
	skip "the plugin of another UCX release, preloaded here" "both are UCX $built"
	finish
fi

for cmd in "sh -c true" "ls /" "ucx_info -v"; do
	# shellcheck disable=SC2086 # the command's words
	env LD_PRELOAD="$shim" $cmd >"$tmp/out" 2>&1
	check "the UCX $built plugin preloaded here: '$cmd' runs" [ $? -eq 0 ]
done
env LD_PRELOAD="$shim" ucx_info -e -u t >"$tmp/out" 2>&1
rc=$?
check "... a UCP context is created with UCX $here_release (got $rc)" [ $rc -eq 0 ]
n=$(grep -c "^libmrnotify-ucx: not used: this process runs UCX $here_release, for which it has no build (.* has: $built); UCX runs as configured$" "$tmp/out")
check "... and one line says why ($n)" [ "$n" -eq 1 ]
[ "$n" -eq 1 ] || show "$tmp/out" 10

# The control: the former shape, linked against the other release's UCX.
env LD_LIBRARY_PATH="$libdir" LD_PRELOAD="$backend" ls / >"$tmp/control" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
	pass "control: a preload linked against UCX $built stops 'ls' here (exit $rc: $(grep -m1 -iE 'error|not found|undefined' "$tmp/control" | cut -c1-160))"
else
	fail "control: a preload linked against UCX $built stops 'ls' here"
	show "$tmp/control" 5
fi
finish

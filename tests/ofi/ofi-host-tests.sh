#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Host tests of mrnotify-ofi-run and its preload that need no kernel module:
# the wrapper's help and exit status, a process that never calls libfabric
# (nothing loaded), and a libfabric program on a node without /dev/mrnotify
# (libfabric keeps its own monitor, the output is unchanged, one warning).
# Run by make check from tests/, or with BUILDDIR=<top build dir>.
set -u
. "$(dirname "$0")/../harness/tap.sh"

top=${BUILDDIR:-$(cd .. && pwd)}
run=$top/lib/mrnotify-ofi-run
export MRNOTIFY_OFI_PRELOAD=$top/lib/.libs/libmrnotify-ofi-preload.so
export LD_LIBRARY_PATH=$top/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset MRNOTIFY_OFI MRNOTIFY_VERBOSE FI_MR_CACHE_MONITOR LD_PRELOAD
if [ ! -r "$MRNOTIFY_OFI_PRELOAD" ] || [ ! -r "$run" ]; then
	skip "ofi-host-tests" "needs $MRNOTIFY_OFI_PRELOAD and $run"
	finish
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sh "$run" --help >"$tmp/help" 2>&1
check "mrnotify-ofi-run --help exits 0 with a usage" grep -q '^Usage: mrnotify-ofi-run' "$tmp/help"
sh "$run" >/dev/null 2>&1
check "mrnotify-ofi-run without a program exits non-zero" [ $? -ne 0 ]
sh "$run" sh -c 'exit 3'
check "mrnotify-ofi-run hands back the program's exit status" [ $? -eq 3 ]
sh "$run" sh -c 'grep -c "libfabric\|libmrnotify\.so" /proc/$$/maps' >"$tmp/maps" 2>&1
show "$tmp/maps"
check "a process that never calls libfabric loads neither libfabric nor libmrnotify" \
	[ "$(cat "$tmp/maps")" = 0 ]

if [ -e /dev/mrnotify ]; then
	skip "fi_info on a node without the device" "/dev/mrnotify exists here"
elif ! command -v fi_info >/dev/null; then
	skip "fi_info on a node without the device" "fi_info is missing (libfabric-bin)"
else
	fi_info -p tcp >"$tmp/plain" 2>"$tmp/plain.err"
	rc_plain=$?
	sh "$run" fi_info -p tcp >"$tmp/pre" 2>"$tmp/pre.err"
	rc_pre=$?
	show "$tmp/pre.err"
	check "fi_info under the preload, no device: same output and status" \
		sh -c "[ $rc_plain = $rc_pre ] && cmp -s '$tmp/plain' '$tmp/pre'"
	check "fi_info under the preload, no device: one warning, libfabric keeps its monitor" \
		sh -c "[ \$(wc -l <'$tmp/pre.err') = \$(( \$(wc -l <'$tmp/plain.err') + 1 )) ] &&
			grep -q 'libfabric keeps its own memory monitor' '$tmp/pre.err'"
	MRNOTIFY_OFI=0 sh "$run" fi_info -p tcp >/dev/null 2>"$tmp/off.err"
	check "MRNOTIFY_OFI=0: nothing imported, nothing said" \
		sh -c "! grep -q libmrnotify '$tmp/off.err'"
	MRNOTIFY_VERBOSE=9 sh "$run" fi_info -p tcp >"$tmp/bad" 2>"$tmp/bad.err"
	show "$tmp/bad.err"
	check "a bad MRNOTIFY_VERBOSE is named, nothing imported, and fi_info still runs" \
		sh -c "grep -q MRNOTIFY_VERBOSE '$tmp/bad.err' && cmp -s '$tmp/plain' '$tmp/bad'"
	FI_MR_CACHE_MONITOR=disabled MRNOTIFY_VERBOSE=1 sh "$run" fi_info -p tcp >/dev/null 2>"$tmp/dis.err"
	show "$tmp/dis.err"
	check "FI_MR_CACHE_MONITOR=disabled is honoured" \
		sh -c "grep -q 'disabled: not imported' '$tmp/dis.err' && ! grep -q 'keeps its own' '$tmp/dis.err'"
fi
finish

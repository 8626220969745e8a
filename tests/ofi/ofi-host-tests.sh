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
	# What the modulefiles set on every node: there a node without the
	# module is expected, and only MRNOTIFY_VERBOSE=1 says so.
	MRNOTIFY_OFI=try sh "$run" fi_info -p tcp >"$tmp/try" 2>"$tmp/try.err"
	check "MRNOTIFY_OFI=try, no device: same output, nothing said" \
		sh -c "cmp -s '$tmp/plain' '$tmp/try' && cmp -s '$tmp/plain.err' '$tmp/try.err'"
	MRNOTIFY_OFI=try MRNOTIFY_VERBOSE=1 sh "$run" fi_info -p tcp >/dev/null 2>"$tmp/tryv.err"
	check "MRNOTIFY_OFI=try, no device, MRNOTIFY_VERBOSE=1: the reason" \
		grep -q 'is mrnotify.ko loaded?); libfabric keeps its own memory monitor' "$tmp/tryv.err"
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

# libfabric loaded with RTLD_LOCAL, as a Python extension (mpi4py) or
# NCCL's plugin loads it: its own fi_getinfo calls (layered providers such
# as tcp;ofi_rxm) bind to the preload, which must find it although it is
# not in the global scope. Before, those calls failed ("not found in
# libfabric") and fi_getinfo offered 47 of 97 providers.
cat >"$tmp/local.py" <<'PY'
import ctypes, os
lf = ctypes.CDLL("libfabric.so.1", mode=os.RTLD_LOCAL)
lf.fi_getinfo.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                          ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
info = ctypes.c_void_p()
rc = lf.fi_getinfo((1 << 16) | 13, None, None, 0, None, ctypes.byref(info))
n, p = 0, info.value
while p:  # struct fi_info begins with its next pointer
    n, p = n + 1, ctypes.c_void_p.from_address(p).value
print("rc=%d providers=%d" % (rc, n))
PY
if ! command -v python3 >/dev/null || ! python3 -c 'import ctypes.util, sys; sys.exit(not ctypes.util.find_library("fabric"))' 2>/dev/null; then
	skip "libfabric loaded RTLD_LOCAL under the preload" "needs python3 and libfabric.so.1"
else
	python3 "$tmp/local.py" >"$tmp/local.plain" 2>&1
	LD_PRELOAD=$MRNOTIFY_OFI_PRELOAD python3 "$tmp/local.py" >"$tmp/local.pre" 2>"$tmp/local.err"
	show "$tmp/local.pre"
	show "$tmp/local.err"
	check "libfabric loaded RTLD_LOCAL under the preload: fi_getinfo offers what it offers without ($(cat "$tmp/local.plain"))" \
		sh -c "grep -q '^rc=0 ' '$tmp/local.plain' && cmp -s '$tmp/local.plain' '$tmp/local.pre' &&
			! grep -q 'not found in libfabric' '$tmp/local.err'"
fi
finish

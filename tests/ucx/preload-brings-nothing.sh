#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# What preloading libmrnotify-ucx.so and libmrnotify-ofi-preload.so (as
# `module load mrnotify` does for every program) leaves alone, on the host,
# no module needed:
#  - a program that uses neither UCX nor libfabric (sh, python3) maps no
#    library of UCX, libfabric, libmrnotify or libstdc++ that it did not map
#    without the preloads, and its signal dispositions are the same;
#  - a program whose UCX is its own copy, behind the RPATH of a library it
#    dlopen()s with RTLD_LOCAL (as a Spack or vendor Open MPI reaches UCX
#    from mca_pml_ucx.so), keeps that copy: every UCX library mapped is the
#    copy's, and the plugin's backend serves it (its statistics line).
# The negative control of each is the plugin as it was built before (one
# object linked against the node's UCX and the C++ libmrnotify): the
# backend, preloaded alone, has that shape. Run by make check from tests/
# (paths relative to the build tree), or with BUILDDIR=<top build dir>.
set -u
. "$(dirname "$0")/../harness/tap.sh"

top=${BUILDDIR:-$(cd .. && pwd)}
here=$(cd "$(dirname "$0")" && pwd)
plugin=$top/ucx-plugin/.libs/libmrnotify-ucx.so
control=$top/ucx-plugin/.libs/libmrnotify-ucx-backend.so
# What the modulefiles preload: the UCX plugin and, where built, libfabric's.
ofi=$top/lib/.libs/libmrnotify-ofi-preload.so
[ -r "$ofi" ] || ofi=
module_preload=$plugin${ofi:+:$ofi}
export LD_LIBRARY_PATH=$top/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset LD_PRELOAD UCX_MRNOTIFY_ENABLE UCX_MRNOTIFY_STATS
if [ ! -r "$plugin" ] || [ ! -r "$control" ]; then
	skip "preload-brings-nothing" "needs $plugin and $control"
	finish
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What a process shows of itself: the libraries of UCX, libmrnotify and
# libstdc++ it maps (not the preloaded object's own file), and its caught
# and ignored signals. Written by the program itself, to $1.
foreign='/(libucp|libuct|libucs|libucm|libfabric|libmrnotify|libmrnotify-ucx-backend|libstdc\+\+)[.]'
SH_SELF='sed -n "s|.* \(/.*\)|\1|p" /proc/$$/maps | grep -E "$0" | sort -u; grep -E "^Sig(Cgt|Ign)" /proc/$$/status'
PY_SELF='import re,sys
maps = sorted({l.split(None, 5)[5].strip() for l in open("/proc/self/maps") if len(l.split()) > 5})
print("\n".join(p for p in maps if re.search(sys.argv[1], p)))
print("".join(l for l in open("/proc/self/status") if re.match("Sig(Cgt|Ign)", l)), end="")'

# program NAME OUTFILE [PRELOAD]: run NAME's self-report with PRELOAD.
program() {
	case $1 in
	sh) env ${3:+LD_PRELOAD=$3} sh -c "$SH_SELF" "$foreign" >"$2" 2>&1 ;;
	python3) env ${3:+LD_PRELOAD=$3} python3 -c "$PY_SELF" "$foreign" >"$2" 2>&1 ;;
	esac
}

for p in sh python3; do
	if ! command -v $p >/dev/null; then
		skip "$p under the preload" "no $p here"
		continue
	fi
	program $p "$tmp/$p.without"
	program $p "$tmp/$p.with" "$module_preload"
	program $p "$tmp/$p.control" "$control"
	if grep -qE "$foreign" "$tmp/$p.with"; then
		fail "$p under the preload maps no library of UCX, libfabric, libmrnotify or libstdc++"
		grep -E "$foreign" "$tmp/$p.with" | sed 's/^/# /'
	elif [ -s "$tmp/$p.without" ] && grep -qE "$foreign" "$tmp/$p.without"; then
		skip "$p under the preload maps no library of UCX, libfabric, libmrnotify or libstdc++" \
			"$p maps some without it"
	else
		pass "$p under the preload maps no library of UCX, libfabric, libmrnotify or libstdc++"
	fi
	check "... and its signal dispositions are those without it" \
		[ "$(grep '^Sig' "$tmp/$p.with")" = "$(grep '^Sig' "$tmp/$p.without")" ]
	# The control: what the preload did before it was split.
	if grep -qE '/libucs[.]' "$tmp/$p.control" &&
		[ "$(grep '^Sig' "$tmp/$p.control")" != "$(grep '^Sig' "$tmp/$p.without")" ]; then
		pass "control: $p under a preload linked against UCX maps UCX and gets its signal handlers"
	else
		fail "control: $p under a preload linked against UCX maps UCX and gets its signal handlers"
		sed 's/^/# /' "$tmp/$p.control"
	fi
done

# A program's own UCX: a copy of the node's behind a RUNPATH ($ORIGIN), in
# a library the program dlopen()s.
cc=${CC:-cc}
ucx_cflags=$(pkg-config --cflags ucx 2>/dev/null)
ucx_libdir=$(pkg-config --variable=libdir ucx 2>/dev/null)
if ! command -v "$cc" >/dev/null || [ -z "$ucx_libdir" ] || [ ! -r "$ucx_libdir/libucp.so.0" ]; then
	skip "a program's own UCX" "needs $cc and UCX's pkg-config file and libraries"
	finish
fi
own=$tmp/own
mkdir -p "$own/ucx-copy"
for l in libucp libuct libucs libucm; do
	cp "$(readlink -f "$ucx_libdir/$l.so.0")" "$own/ucx-copy/$l.so.0" || fail "copy $l"
done
# UCT's transports, which UCX loads from ucx/ beside its libraries.
[ -d "$ucx_libdir/ucx" ] && cp -r "$ucx_libdir/ucx" "$own/ucx-copy/"
# An RPATH (not RUNPATH), as Spack's builds carry: the loader also searches
# it for the dependencies of what the library loads (libucp's libuct, ...),
# which here are copies with no path of their own.
# shellcheck disable=SC2016 # $ORIGIN is the loader's
if ! "$cc" -shared -fPIC $ucx_cflags -o "$own/libown_ucx_mid.so" "$here/own_ucx_mid.c" \
	-L"$ucx_libdir" -lucp -lucs -Wl,--disable-new-dtags,-rpath,'$ORIGIN/ucx-copy' \
	>"$tmp/cc.log" 2>&1 ||
	! "$cc" -o "$own/own_ucx_main" "$here/own_ucx_main.c" -ldl >>"$tmp/cc.log" 2>&1; then
	sed 's/^/# /' "$tmp/cc.log"
	fail "a program's own UCX: the test programs build"
	finish
fi
# Every UCX library the process maps is the copy's (at least libucp and libucs).
own_only() {
	grep -q "^map $own/ucx-copy/libucp" "$1" && grep -q "^map $own/ucx-copy/libucs" "$1" &&
		! grep '^map ' "$1" | grep -qv "^map $own/ucx-copy/"
}
"$own/own_ucx_main" "$own/libown_ucx_mid.so" >"$tmp/own.without" 2>&1
check "a program's own UCX, without the preload: the copy is what it maps" own_only "$tmp/own.without"
env UCX_MRNOTIFY_STATS=y LD_PRELOAD="$plugin" "$own/own_ucx_main" "$own/libown_ucx_mid.so" \
	>"$tmp/own.with" 2>&1
st=$?
if [ $st = 0 ] && own_only "$tmp/own.with"; then
	pass "a program's own UCX, under the preload: it keeps its copy, and runs"
else
	fail "a program's own UCX, under the preload: it keeps its copy, and runs"
	sed 's/^/# /' "$tmp/own.with"
fi
# Where the device is usable (make check-guest runs this too) the plugin is
# active on the copy and watches the caches its transports create (rxe0's);
# elsewhere it says why it is not.
if [ -c /dev/mrnotify ]; then
	served='^libmrnotify-ucx: pid [0-9]*: active, .* rcaches [1-9]'
else
	served='^libmrnotify-ucx: pid [0-9]*: inactive, .* rcaches [0-9]*; /dev/mrnotify is missing'
fi
if grep -q "$served" "$tmp/own.with"; then
	pass "... and the plugin served the copy ($(grep -o 'pid [0-9]*: [a-z]*, .*' "$tmp/own.with" | sed 's/^pid [0-9]*: //' | cut -c1-120))"
else
	fail "... and the plugin served the copy"
	sed 's/^/# /' "$tmp/own.with"
fi
env LD_PRELOAD="$control" "$own/own_ucx_main" "$own/libown_ucx_mid.so" >"$tmp/own.control" 2>&1
# The program ran and mapped a UCX library that is not the copy's (a
# program that did not run at all would not show the swap).
if grep '^map ' "$tmp/own.control" | grep -qv "^map $own/ucx-copy/"; then
	pass "control: under a preload linked against UCX, the node's UCX comes in beside or instead of the copy"
else
	fail "control: under a preload linked against UCX, the node's UCX comes in beside or instead of the copy"
	sed 's/^/# /' "$tmp/own.control"
fi
finish

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# record-ofi-bench.sh BUILDDIR OUT: runs bench/ofi_bench (a hit in
# libfabric's MR cache per memory monitor, and a batch of unmapped entries)
# in the guest, with mrnotify.ko and rxe0, and writes its output to OUT
# after the header that bench/plot-bench.py reads (record-bench.sh's
# format). Run it on a quiet machine: nothing else running, no other guest.
set -u -o pipefail

[ $# -eq 2 ] || { echo "usage: record-ofi-bench.sh BUILDDIR OUT" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
out=$2
top=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$build/bench/ofi_bench" ] && [ -f "$build/kernel/mrnotify.ko" ] ||
	{ echo "record-ofi-bench.sh: $build/bench/ofi_bench or the module is not built (make -C $build)" >&2; exit 2; }
kbuild=$(sed -n 's/^KERNEL_BUILD = //p' "$build/kernel/Makefile")
release=$(sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' "$kbuild/include/generated/utsrelease.h" 2>/dev/null)
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
cmd="LD_LIBRARY_PATH=$build/lib/.libs $build/bench/ofi_bench"
"$top/tests/harness/run-in-guest.sh" --kernel-build "$kbuild" --module "$build/kernel/mrnotify.ko" \
	--rxe --cwd "$build" --bind "$build" --results "$results" "$cmd" || exit 1
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
	echo "# date: $(date -u +%Y-%m-%d)"
	echo "# machine: qemu TCG guest (2 vCPUs, Linux ${release:-?}, rxe0) on $(nproc) x $cpu"
	echo "# commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$top" diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
	echo "# load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# command: bench/record-ofi-bench.sh (run-in-guest.sh --rxe ... '$cmd')"
	echo "## ofi_bench"
	cat "$results/1.out"
} >"$out.tmp" && mv "$out.tmp" "$out"

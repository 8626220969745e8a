#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# record-bench.sh BUILDDIR OUT: runs the host benchmarks (cache_bench,
# capi_bench, fork_bench) from BUILDDIR/bench and writes their output to
# OUT, after a header naming the date, the machine, the commit and each
# command, so that every figure in docs/performance.md and bench/records/ can be traced to the
# run that produced it (bench/plot-bench.py draws the plots from OUT).
# Run it on a quiet machine: nothing else running, no guests.
set -u -o pipefail

[ $# -eq 2 ] || { echo "usage: record-bench.sh BUILDDIR OUT" >&2; exit 2; }
bench=$1/bench
out=$2
top=$(cd "$(dirname "$0")/.." && pwd)
for b in cache_bench capi_bench fork_bench; do
	[ -x "$bench/$b" ] || { echo "record-bench.sh: $bench/$b is not built (make -C $1)" >&2; exit 2; }
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
	echo "# date: $(date -u +%Y-%m-%d)"
	echo "# machine: $(nproc) x $cpu, Linux $(uname -r)"
	echo "# commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$top" diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
	echo "# load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
	for b in cache_bench capi_bench fork_bench; do
		echo "## $b"
		"$bench/$b" || exit 1
	done
} >"$out.tmp" && mv "$out.tmp" "$out"

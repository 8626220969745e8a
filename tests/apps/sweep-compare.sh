#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Latency and bandwidth over message sizes (mpi_sweep), once with stock UCX
# and once behind a prefix (the plugin's wrapper), over the same launcher,
# with the registrations each run made (libregcount.so). Prints one table
# with the ratios prefixed/stock. Figures, not pass/fail, in an emulated
# guest: it fails only when a run fails, or when the prefixed run registers
# more often than stock on buffers that never change (a cache that misses).
#
#   sweep-compare.sh REGCOUNT.so MPI_SWEEP LAUNCH... -- PREFIX...
#
# SWEEP_ARGS (environment): arguments for MPI_SWEEP (--max=BYTES,
# --iters=N), for a shorter sweep; SWEEP_ITERS=N adds --iters=N (a word
# of its own, for callers that pass the environment as env's words).
set -u
[ $# -ge 4 ] || { echo "usage: sweep-compare.sh REGCOUNT.so MPI_SWEEP LAUNCH... -- PREFIX..." >&2; exit 2; }
regcount=$1 sweep=$2
shift 2
. "$(dirname "$0")/compare-lib.sh"
split_launch "$@"
[ -n "${SWEEP_ITERS:-}" ] && SWEEP_ARGS="${SWEEP_ARGS:-} --iters=$SWEEP_ITERS"
make_work

# run NAME PREFIX...
run() {
	name=$1
	shift
	echo "\$$launch -x LD_PRELOAD=$regcount $* $sweep ${SWEEP_ARGS:-}"
	# shellcheck disable=SC2086
	$launch -x LD_PRELOAD="$regcount" "$@" "$sweep" ${SWEEP_ARGS:-} >"$work/$name" 2>&1
	rc=$?
	grep -v '^mpi_sweep: [0-9]* bytes' "$work/$name" | grep -v '^$'
	[ $rc -eq 0 ] || { echo "sweep-compare: the $name run exited $rc"; exit 1; }
}

run stock
# shellcheck disable=SC2086
run prefixed $prefix
printf '%10s %12s %12s %7s %12s %12s %7s\n' bytes "stock us" "ours us" ratio "stock MB/s" "ours MB/s" ratio
sed -n 's/^mpi_sweep: \([0-9]*\) bytes: latency \([0-9.]*\) us, bandwidth \([0-9.]*\) MB\/s/\1 \2 \3/p' \
	"$work/stock" >"$work/s.tab"
sed -n 's/^mpi_sweep: \([0-9]*\) bytes: latency \([0-9.]*\) us, bandwidth \([0-9.]*\) MB\/s/\1 \2 \3/p' \
	"$work/prefixed" >"$work/p.tab"
paste -d' ' "$work/s.tab" "$work/p.tab" |
	awk '{
		lat = $2 > 0 ? $5 / $2 : 0; bw = $3 > 0 ? $6 / $3 : 0
		printf "%10d %12.2f %12.2f %7.2f %12.2f %12.2f %7.2f\n", $1, $2, $5, lat, $3, $6, bw
	}'
s=$(regs_in "$work/stock") p=$(regs_in "$work/prefixed")
echo "sweep-compare: registrations in all ranks: stock $s, prefixed $p"
if [ "$p" -gt "$s" ]; then
	echo "sweep-compare: the prefixed run registered more often than stock on unchanging buffers"
	exit 1
fi

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Registrations in a steady-state ping-pong on transparent huge pages, stock
# UCX against UCX with the plugin (issue #11, part 1). Run in the guest, as
# root, by ucx-guest-tests.sh:
#
#   ucx-thp.sh PLUGIN-PREFIX... -- PROGRAM [ARGS...]
#
# Sets THP to "always" (and puts the previous setting back on exit), runs
# PROGRAM (ucx_thp_pingpong) once as it is and once behind the prefix (the
# wrapper with the plugin), both with UCX's defaults, and compares the
# registrations of the steady state. Nothing is unmapped, so every later
# transfer should find its registration cached; a hit here is a steady-state
# transfer that did not register. Passes when the plugin's hits are at least
# 99 % of stock's. Exit status 0, 1 when not, 77 when THP cannot be turned
# on (skip), 2 on errors.
set -u

plugin=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	plugin="$plugin $1"
	shift
done
if [ $# -lt 2 ]; then
	echo "usage: ucx-thp.sh PLUGIN-PREFIX... -- PROGRAM [ARGS...]" >&2
	exit 2
fi
shift
prog=$1
shift
thp=/sys/kernel/mm/transparent_hugepage/enabled
saved=$(sed -n 's/.*\[\(.*\)\].*/\1/p' $thp 2>/dev/null)
if [ -z "$saved" ] || ! echo always >$thp 2>/dev/null; then
	echo "ucx-thp: cannot set $thp to always (not root, or no THP): skipped"
	exit 77
fi
trap 'echo "$saved" >$thp' EXIT
echo "ucx-thp: $thp: always (was $saved)"

tmp=$(mktemp)
# run NAME COMMAND...: sets total, steady, transfers from the program's line.
run() {
	name=$1
	shift
	echo "\$ $*"
	"$@" >"$tmp" 2>&1
	rc=$?
	sed 's/^/    /' "$tmp"
	[ $rc -eq 77 ] && exit 77
	if [ $rc -ne 0 ]; then
		echo "ucx-thp: $name run failed (exit status $rc)"
		exit 2
	fi
	advised=$(sed -n 's/.*madvise: \(.*\)/\1/p' "$tmp")
	line=$(grep 'registrations: .* total' "$tmp")
	total=$(echo "$line" | sed -n 's/.*registrations: \([0-9]*\) total.*/\1/p')
	steady=$(echo "$line" | sed -n 's/.* \([0-9]*\) in the steady state.*/\1/p')
	transfers=$(echo "$line" | sed -n 's/.*, \([0-9]*\) transfers).*/\1/p')
	if [ -z "$total" ] || [ -z "$steady" ] || [ -z "$transfers" ]; then
		echo "ucx-thp: no registrations line from the $name run"
		exit 2
	fi
}

# shellcheck disable=SC2086
run stock "$prog" "$@"
stock_total=$total stock_steady=$steady stock_advised=$advised
# shellcheck disable=SC2086
run plugin $plugin "$prog" "$@"
plugin_total=$total plugin_steady=$steady plugin_advised=$advised
rm -f "$tmp"

stock_hits=$((transfers - stock_steady))
plugin_hits=$((transfers - plugin_steady))
echo "ucx-thp: registrations: stock $stock_total (steady state $stock_steady), plugin $plugin_total (steady state $plugin_steady)"
echo "ucx-thp: madvise by rdma-core: stock $stock_advised; plugin $plugin_advised"
echo "ucx-thp: steady-state hits (of $transfers transfers): stock $stock_hits, plugin $plugin_hits"
# plugin_hits >= 0.99 * stock_hits, in integers.
if [ $((plugin_hits * 100)) -ge $((stock_hits * 99)) ]; then
	echo "ucx-thp: the plugin hits as often as stock UCX (>= 99 %): PASS"
	exit 0
fi
echo "ucx-thp: the plugin hits less often than stock UCX (< 99 %): FAIL"
exit 1

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# hpcc (Debian's HPC Challenge build) as an application test: the same small
# problem (HPL N=500 on 1x2 ranks, then PTRANS, RandomAccess, FFT, STREAM,
# DGEMM and the ring bandwidth tests) run once with stock UCX and once
# behind a prefix (the plugin's wrapper), both
# over the same launcher. Passes when both runs pass hpcc's own
# verifications, give the same verification figures, and the prefixed run
# registered memory (libregcount.so counts ibv_reg_mr in every rank).
#
#   hpcc-compare.sh REGCOUNT.so LAUNCH... -- PREFIX...
#
# LAUNCH is the mpirun command line (without the program), PREFIX the
# wrapper. Exit status 0, 1 when a check fails, 77 when hpcc is missing.
set -u
[ $# -ge 3 ] || { echo "usage: hpcc-compare.sh REGCOUNT.so LAUNCH... -- PREFIX..." >&2; exit 2; }
regcount=$1
shift
. "$(dirname "$0")/compare-lib.sh"
split_launch "$@"
hpcc=$(command -v hpcc) || { echo "hpcc-compare: no hpcc (Debian package hpcc)"; exit 77; }
example=/usr/share/doc/hpcc/examples/_hpccinf.txt
[ -r "$example" ] || { echo "hpcc-compare: no $example"; exit 77; }

make_work

# run NAME PREFIX...: hpcc in $work/NAME; prints its verifications.
run() {
	name=$1
	shift
	d=$work/$name
	mkdir "$d" || exit 2
	sed -e 's/^2            Ps/1            Ps/' -e 's/^1000         Ns/500          Ns/' \
		"$example" >"$d/hpccinf.txt"
	echo "\$ (cd $d &&$launch -x LD_PRELOAD=$regcount $* $hpcc)"
	# shellcheck disable=SC2086
	(cd "$d" && $launch -x LD_PRELOAD="$regcount" "$@" "$hpcc") >"$d/log" 2>&1
	rc=$?
	grep -v '^#' "$d/log" | grep -v '^$'
	[ $rc -eq 0 ] || { echo "hpcc-compare: the $name run exited $rc"; exit 1; }
	out=$d/hpccoutf.txt
	[ -r "$out" ] || { echo "hpcc-compare: the $name run wrote no hpccoutf.txt"; exit 1; }
	# The verification figures, one per line, for the comparison.
	{
		sed -n '/Begin of Summary/,/End of Summary/p' "$out" |
			grep -E '^(Success|HPL_N|MPIRandomAccess_Errors|MPIRandomAccess_LCG_Errors|MPIFFT_maxErr|StarRandomAccess_Errors|SingleRandomAccess_Errors)='
		grep -E 'tests completed and (passed|failed) residual checks' "$out"
		grep -c 'Solution Validates' "$out" | sed 's/^/STREAM validations: /'
	} >"$d/verify"
	sed 's/^/    verify: /' "$d/verify"
	regs=$(regs_in "$d/log")
	echo "hpcc-compare: $name: $regs registrations in all ranks"
	eval "${name}_regs=$regs"
	grep -q '^Success=1$' "$d/verify" &&
		grep -q ' 0 tests completed and failed residual checks' "$d/verify" &&
		grep -q '^MPIRandomAccess_Errors=0$' "$d/verify" ||
		{ echo "hpcc-compare: the $name run failed hpcc's verifications"; exit 1; }
}

run stock
# shellcheck disable=SC2086
run prefixed $prefix
same_and_registered hpcc-compare verify "the verification figures"
echo "hpcc-compare: same verifications; registrations: stock $stock_regs, prefixed $prefixed_regs"

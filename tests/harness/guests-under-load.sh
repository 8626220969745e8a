#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Boots several guests at once, round after round, on a host kept busy, and
# counts what the guest kernels say about their clocks: a TSC marked
# unstable at run time by the clocksource watchdog (which makes the kernel
# patch its own code while the other vCPU runs it) and any Oops. This is
# how a shared, noisy CI machine runs our guests; run-in-guest.sh boots
# them with tsc=nowatchdog for it, and --kernel-clock shows the kernel's own
# clock checks under the same load.
#
# Usage: guests-under-load.sh --builddir DIR --srcdir DIR [--rounds N]
#          [--guests K] [--hogs H] [--kernel-clock] [--results DIR]
# Each guest boots Debian 13's 6.12 kernel (tests/harness/stacks.sh), loads the
# module built for it (make check-kernels builds it) and runs the race
# fuzzer and the stress test. Prints one line a guest and a total; exits 1
# if any guest oopsed or failed, 77 if the stack is not there.
set -u -o pipefail
prog=guests-under-load.sh
rounds=3 guests=2 hogs=1 clock_opt=() results= builddir= srcdir=
while [ $# -gt 0 ]; do
	case $1 in
	--builddir) builddir=$(readlink -f "$2"); shift 2 ;;
	--srcdir) srcdir=$(readlink -f "$2"); shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--guests) guests=$2; shift 2 ;;
	--hogs) hogs=$2; shift 2 ;;
	--kernel-clock) clock_opt=(--kernel-clock); shift ;;
	--results) results=$2; shift 2 ;;
	-h|--help) sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$builddir" ] && [ -n "$srcdir" ] || { echo "$prog: --builddir and --srcdir are needed" >&2; exit 2; }
for n in "$rounds" "$guests" "$hogs"; do
	[[ $n =~ ^[0-9]+$ ]] || { echo "$prog: '$n' is not a whole number" >&2; exit 2; }
done
env=$("$srcdir/tests/harness/stacks.sh" env 6.12 2>/dev/null) || {
	echo "$prog: SKIP (Debian 13's stack is not cached: tests/harness/stacks.sh fetch 6.12)"; exit 77; }
eval "$env"
ko=$builddir/kernel/6.12/mrnotify.ko
[ -f "$ko" ] || { echo "$prog: $ko is missing: make -C $builddir/tests check-kernels KERNELS=6.12" >&2; exit 2; }
results=${results:-$builddir/tests/guests-under-load}
rm -rf "$results" && mkdir -p "$results" || exit 2

hog_pids=()
stop_hogs() { [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null; }
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
	(while :; do :; done) &
	hog_pids+=($!)
done

unstable=0 oopses=0 failed=0
for r in $(seq 1 "$rounds"); do
	pids=()
	for g in $(seq 1 "$guests"); do
		out=$results/round$r-guest$g
		# shellcheck disable=SC2154 # STACK_* come from stacks.sh env
		"$srcdir/tests/harness/run-in-guest.sh" "${clock_opt[@]+"${clock_opt[@]}"}" \
			--root "$STACK_ROOT" --modules-root "$STACK_MODULES_ROOT" \
			--release "$STACK_RELEASE" --kernel-image "$STACK_IMAGE" --module "$ko" \
			--cwd "$builddir/tests" --bind "$srcdir" --bind "$builddir" \
			--quiet --results "$out" \
			'kernel/mrn_race_fuzz --ops 100000 --threads 4' kernel/mrn_stress_test \
			>"$out.log" 2>&1 &
		pids+=($!)
	done
	for g in $(seq 1 "$guests"); do
		wait "${pids[$((g - 1))]}"
		rc=$?
		out=$results/round$r-guest$g
		log=$out/serial.log
		u=$(grep -c "Marking clocksource 'tsc' as unstable" "$log" 2>/dev/null)
		o=$(grep -c -E 'Oops|BUG:' "$log" 2>/dev/null)
		unstable=$((unstable + ${u:-0})) oopses=$((oopses + ${o:-0}))
		[ "$rc" -eq 0 ] || failed=$((failed + 1))
		echo "round $r guest $g: exit $rc, TSC marked unstable ${u:-0}, oopses ${o:-0} ($out)"
	done
done
echo "$prog: $((rounds * guests)) guests ($guests at a time, $hogs host hogs," \
	"$([ ${#clock_opt[@]} -eq 0 ] && echo tsc=nowatchdog || echo "the kernel's own clock checks")):" \
	"$failed failed, TSC marked unstable $unstable times, $oopses oopses"
[ "$failed" -eq 0 ] && [ "$oopses" -eq 0 ]

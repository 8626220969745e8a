#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Adds up TAP results from test logs: one line per log, then a total. Every
# test prints TAP (tests/harness/tap.sh for scripts, gtest_tap_main.cc for
# GoogleTest programs): "ok", "not ok" and "ok ... # SKIP" lines, and a plan.
# Besides the results, a log counts one failure more when
#   - it has no plan, or a plan other than the results it has: the program
#     stopped before its end (a crash, a timeout);
#   - the program's exit status says it failed though no result did (a
#     sanitizer's report at exit): N.rc next to N.out or N.log (the guest
#     harness, the sanitizer builds) other than 0 or 77, or an ERROR in
#     automake's N.trs next to N.log.
# A plan of 1..0 with no results is one skip.
# Usage: test-summary.sh LOG...
set -u
tp=0 tf=0 ts=0
for log in "$@"; do
	[ -r "$log" ] || continue
	read -r p f s plan <<<"$(awk '
		/^not ok( |$)/ { if ($0 !~ /# *TODO/) f++; n++; next }
		/^ok( |$)/ { if ($0 ~ /# *[Ss][Kk][Ii][Pp]/) s++; else p++; n++; next }
		/^1\.\.[0-9]+/ { plan = $0; sub(/^1\.\./, "", plan); sub(/[^0-9].*/, "", plan) }
		END { printf "%d %d %d %s\n", p, f, s, (plan == "" ? "none" : plan) }' "$log")"
	n=$((p + f + s))
	if [ "$plan" = none ]; then
		f=$((f + 1))
	elif [ "$plan" = 0 ] && [ "$n" -eq 0 ]; then
		s=$((s + 1))
	elif [ "$plan" != "$n" ]; then
		f=$((f + 1))
	fi
	exit_failed=0
	rc_file=${log%.*}.rc trs=${log%.*}.trs
	if [ -r "$rc_file" ]; then
		case "$(cat "$rc_file")" in 0 | 77) ;; *) exit_failed=1 ;; esac
	fi
	[ -r "$trs" ] && grep -q '^:test-result: ERROR' "$trs" && exit_failed=1
	# A failed result already counts; an exit status alone is one failure.
	if [ "$exit_failed" = 1 ] && [ "$f" -eq 0 ]; then
		f=1
	fi
	printf '%-40s %d passed, %d failed, %d skipped\n' "$(basename "$(dirname "$log")")/$(basename "$log"):" "$p" "$f" "$s"
	tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
done
echo "total: $tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]

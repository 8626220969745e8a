#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Adds up GoogleTest results from test logs: one line per log, then a total.
# A log of a program that is not a GoogleTest program (a shell test) counts
# as one test, passed or failed by the exit status recorded next to it
# (N.out / N.rc, as the guest harness writes them; 77 is a skip, as for
# automake). A GoogleTest log without
# its summary (the program crashed) counts as one failed test.
# Usage: test-summary.sh LOG...
set -u
tp=0 tf=0 ts=0
for log in "$@"; do
	[ -r "$log" ] || continue
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | tail -n 1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$log" | tail -n 1)
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$log" | tail -n 1)
	if [ -z "$p" ] && [ -z "$f" ]; then
		# A shell test's own "N passed, N failed[, N skipped]" line.
		plain=$(sed -n 's/^\([A-Za-z0-9_.-]*: \)\{0,1\}\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed\(, \([0-9][0-9]*\) skipped\)\{0,1\}.*/\2 \3 \5/p' "$log" | tail -n 1)
		if [ -n "$plain" ]; then
			read -r p f s <<<"$plain"
		fi
	fi
	if [ -z "$p" ] && [ -z "$f" ]; then
		rc_file=${log%.out}.rc
		if grep -q '^\[==========\] .* ran\.' "$log"; then
			p=0
		elif ! grep -q '^\[==========\] Running' "$log" && [ "$rc_file" != "$log" ] &&
			[ -r "$rc_file" ] && [ "$(cat "$rc_file")" = 0 ]; then
			p=1
		elif [ "$rc_file" != "$log" ] && [ -r "$rc_file" ] && [ "$(cat "$rc_file")" = 77 ]; then
			s=1
		else
			f=1
		fi
	fi
	p=${p:-0} f=${f:-0} s=${s:-0}
	printf '%-40s %d passed, %d failed, %d skipped\n' "$(basename "$(dirname "$log")")/$(basename "$log"):" "$p" "$f" "$s"
	tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
done
echo "total: $tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]

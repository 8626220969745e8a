#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The one result format's own test: tap.sh's verbs and test-summary.sh's
# counts on made-up logs, most of all the runs that must not pass: a
# program that crashed (no plan), one that ran fewer tests than it planned,
# one whose exit status failed after every result passed (a sanitizer's
# report at exit), and a skip, which is not a pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tap.sh"
summary=$here/test-summary.sh
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT

# counts LOG: the summary's "P F S" for one log.
counts() {
	"$summary" "$1" | sed -n 's/^total: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p'
}
expect() { # DESC LOG "P F S"
	got=$(counts "$2")
	if [ "$got" = "$3" ]; then pass "$1: $got"; else fail "$1: got '$got', expected '$3'"; show "$2"; fi
}

printf 'ok 1 - a\nok 2 - b # SKIP no root\n1..2\n' >"$t/good.log"
expect "a whole run: one pass, one skip" "$t/good.log" "1 0 1"
printf '[ RUN      ] A.a\nok 1 - A.a\n' >"$t/crash.log"
expect "no plan (the program crashed): one failure more" "$t/crash.log" "1 1 0"
printf 'ok 1 - a\n1..3\n' >"$t/short.log"
expect "fewer results than planned: one failure more" "$t/short.log" "1 1 0"
printf 'ok 1 - a\n1..1\n' >"$t/1.out"
echo 1 >"$t/1.rc"
expect "all passed, exit status 1 (a guest's N.rc): one failure" "$t/1.out" "1 1 0"
echo 77 >"$t/1.rc"
expect "exit 77 is the harness's skip, not a failure" "$t/1.out" "1 0 0"
printf 'ok 1 - a\n1..1\n' >"$t/auto.log"
printf ':test-result: PASS\n:test-result: ERROR\n' >"$t/auto.trs"
expect "an ERROR in automake's .trs: one failure" "$t/auto.log" "1 1 0"
printf '1..0 # SKIP no rxe0\n' >"$t/empty.log"
expect "an empty plan: one skip" "$t/empty.log" "0 0 1"
printf 'hello\n' >"$t/nothing.log"
expect "no TAP at all: a failure" "$t/nothing.log" "0 1 0"

# relay: a program's results become the script's, renumbered, and its
# crash is a failure; the control is the same program that ends well.
prog() { # how it ends: crash, fail-exit or well
	printf 'ok 1 - x\n'
	case $1 in
	crash) return 139 ;;
	fail-exit) printf '1..1\n'; return 1 ;;
	well) printf '1..1\n'; return 0 ;;
	esac
}
for how in crash fail-exit well; do
	(
		tap_n=0 tap_failed=0
		relay prog "$how" >/dev/null
		echo "$tap_n $tap_failed"
	) >"$t/relay-$how"
done
check "relay: a crash after a passed result is one failure more" [ "$(cat "$t/relay-crash")" = "2 1" ]
check "relay: exit 1 with every result passed is one failure" [ "$(cat "$t/relay-fail-exit")" = "2 1" ]
check "relay: the control, a program that ends well, is one pass" [ "$(cat "$t/relay-well")" = "1 0" ]
(
	tap_n=4
	relay sh -c 'printf "ok 1 - a\nnot ok 2 - b\n1..2\n"'
) >"$t/renumbered"
check "relay: results renumbered after the script's own" grep -qx 'not ok 6 - b' "$t/renumbered"
(
	tap_n=0 tap_failed=0
	finish
) >"$t/none" 2>&1
check "finish with nothing checked fails" [ $? -ne 0 ]
finish

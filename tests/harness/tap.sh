# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=sh
#
# tap.sh: the result verbs of every test script. Tests print TAP, the one
# result format of the tree (tests/README.md): automake's tap-driver reads it
# in make check, tests/harness/test-summary.sh reads it from the guests' and
# lanes' logs. Sourced (POSIX sh and bash alike), never run.
#
#   pass DESC           ok N - DESC
#   fail DESC           not ok N - DESC
#   skip DESC [WHY]     ok N - DESC # SKIP WHY: could not run here, not a pass
#   check DESC CMD...   pass or fail by CMD's exit status
#   note TEXT...        a comment line (# TEXT)
#   show FILE [N]       FILE's lines (the last N) as comments, so a
#                       program's output can never be read as a result
#   relay CMD...        run CMD, which prints TAP itself (a GoogleTest
#                       program, rcache_api_test): its results become this
#                       script's, renumbered; its other lines are kept as
#                       they are. CMD's exit status is returned, and a status
#                       other than 0 or 77 without a failed result, or no
#                       plan (it crashed), is one failure more; exit 77
#                       without a plan is one skip. With TAP_RELAY_OUT set,
#                       CMD's whole output is kept in that file too.
#   plan                the plan (1..N), once, after the last result
#   finish              the plan; exit 1 if anything failed, else 0.
#                       Nothing run at all is a failure, not a pass.
#   tap_file FILE pass|fail|skip DESC
#                       a one-result TAP file (a lane's status.log), also
#                       shown on standard output
#
# Counts after a run: tap_n (results), tap_failed. With tap_log set to a
# file, the result lines and the plan go there too.

tap_n=0 tap_failed=0

# A result line; with tap_log set (a file), also appended there.
_tap_emit() {
	echo "$1"
	[ -z "${tap_log:-}" ] || echo "$1" >>"$tap_log"
}

pass() {
	tap_n=$((tap_n + 1))
	_tap_emit "ok $tap_n - $*"
}

fail() {
	tap_n=$((tap_n + 1))
	tap_failed=$((tap_failed + 1))
	_tap_emit "not ok $tap_n - $*"
}

skip() {
	tap_n=$((tap_n + 1))
	_tap_emit "ok $tap_n - $1 # SKIP${2:+ $2}"
}

check() {
	_tap_what=$1
	shift
	if "$@"; then pass "$_tap_what"; else fail "$_tap_what"; fi
}

note() {
	echo "# $*"
}

show() {
	if [ -n "${2:-}" ]; then tail -n "$2" "$1"; else cat "$1"; fi | sed 's/^/# /'
}

relay() {
	_tap_out=$(mktemp "${TMPDIR:-/tmp}/tap-relay.XXXXXX") || {
		fail "relay $1: mktemp failed"
		return 1
	}
	"$@" >"$_tap_out" 2>&1
	_tap_rc=$?
	_tap_before=$tap_failed
	_tap_plan=no
	while IFS= read -r _tap_line || [ -n "$_tap_line" ]; do
		case "$_tap_line" in
		"not ok "*)
			fail "$(_tap_desc "${_tap_line#not ok}")" ;;
		"ok "*"# SKIP"*)
			_tap_d=$(_tap_desc "${_tap_line#ok}")
			skip "${_tap_d%% \# SKIP*}" "$(echo "${_tap_d#* \# SKIP}" | sed 's/^:\{0,1\} *//')" ;;
		"ok "*)
			pass "$(_tap_desc "${_tap_line#ok}")" ;;
		"1..0" | "1..0 "*)
			_tap_plan=yes
			skip "$1" "$(echo "${_tap_line#1..0}" | sed 's/^ *# *\(SKIP\)\{0,1\}:\{0,1\} *//')" ;;
		1..[1-9]*)
			_tap_plan=yes ;;
		*)
			printf '%s\n' "$_tap_line" ;;
		esac
	done <"$_tap_out"
	if [ -n "${TAP_RELAY_OUT:-}" ]; then mv "$_tap_out" "$TAP_RELAY_OUT"; else rm -f "$_tap_out"; fi
	if [ "$_tap_plan" = no ] && [ $_tap_rc -eq 77 ]; then
		# An older program's skip: exit 77, its reason in its output.
		skip "$*" "exit 77"
	elif [ "$_tap_plan" = no ]; then
		fail "$*: no TAP plan (exit $_tap_rc): it stopped before the end"
	elif [ $_tap_rc -ne 0 ] && [ $_tap_rc -ne 77 ] && [ $tap_failed -eq "$_tap_before" ]; then
		fail "$*: exit $_tap_rc with no failed result"
	fi
	return $_tap_rc
}

# "ok 12 - Name" less "ok": the description, without the number and dash.
_tap_desc() {
	echo "$1" | sed 's/^ *[0-9]* *-\{0,1\} *//'
}

plan() {
	_tap_emit "1..$tap_n"
}

finish() {
	if [ "$tap_n" -eq 0 ]; then
		fail "nothing was checked"
	fi
	plan
	[ "$tap_failed" -eq 0 ] || exit 1
	exit 0
}

tap_file() {
	case "$2" in
	pass) printf '1..1\nok 1 - %s\n' "$3" ;;
	fail) printf '1..1\nnot ok 1 - %s\n' "$3" ;;
	skip) printf '1..1\nok 1 - %s # SKIP\n' "$3" ;;
	*) echo "tap_file: pass, fail or skip, not $2" >&2; return 2 ;;
	esac | tee "$1"
}

# shellcheck shell=bash
# SPDX-License-Identifier: BSD-3-Clause
# Shared by the install test's scripts: one line per check, a count at the
# end in the form tests/harness/test-summary.sh reads ("NAME: N passed, N failed").
passed=0 failed=0 skipped=0
ok() { echo "ok - $*"; passed=$((passed + 1)); }
bad() { echo "FAIL - $*"; failed=$((failed + 1)); }
skip() { echo "SKIP - $*"; skipped=$((skipped + 1)); }
check() { # $1: description, rest: command that must succeed
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; fi
}
summary() { # $1: name
	echo "$1: $passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
}

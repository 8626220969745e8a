#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Builds libmrnotify and its unit tests with a sanitizer, in a build tree of
# their own, and runs the unit tests there:
#   tests/harness/sanitizer-check.sh thread  [BUILDDIR]   ThreadSanitizer
#   tests/harness/sanitizer-check.sh address [BUILDDIR]   AddressSanitizer + UBSan
# Any report fails the run. Each test's output goes to BUILDDIR/tests/lib/
# NAME.log (GoogleTest's summary lines, which tests/harness/test-summary.sh counts).
set -u -o pipefail

kind=${1:-}
case "$kind" in
thread | address) ;;
*)
	echo "usage: $0 thread|address [BUILDDIR]" >&2
	exit 2
	;;
esac
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$top/_build-$kind}
jobs=$(nproc 2>/dev/null || echo 2)

mkdir -p "$build" && cd "$build" || exit 1
if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
	"$top/configure" --enable-werror --enable-debug --enable-sanitizer="$kind" \
		--without-kernel-build >configure.log 2>&1 ||
		{ tail -n 20 configure.log; exit 1; }
fi
tests=$(printf 'print-unit-tests:\n\t@echo $(UNIT_TESTS)\n' |
	make -s -C tests -f Makefile -f - print-unit-tests)
make -j"$jobs" -C lib >build.log 2>&1 &&
	make -j"$jobs" -C tests liboracle.a $tests >>build.log 2>&1 ||
	{ tail -n 40 build.log; echo "sanitizer ($kind) build failed"; exit 1; }

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1"
# The model test's 1.2 million operations take minutes under ThreadSanitizer.
export MRN_MODEL_OPS_PER_THREAD=50000
status=0
for t in $tests; do
	log=tests/$t.log
	./tests/$t >"$log" 2>&1
	rc=$?
	# For tests/harness/test-summary.sh: a report at exit fails the
	# program after its TAP results passed.
	echo $rc >"tests/$t.rc"
	if grep -qE 'WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:' "$log"; then
		echo "$kind sanitizer: $t: report (see $build/$log)"
		grep -m1 -A12 -E 'WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"
		status=1
	elif [ $rc -ne 0 ]; then
		echo "$kind sanitizer: $t: exit $rc (see $build/$log)"
		tail -n 15 "$log"
		status=1
	else
		echo "$kind sanitizer: $t: $(grep -E '^\[  PASSED  \]' "$log" | tail -n1)"
	fi
done
exit $status

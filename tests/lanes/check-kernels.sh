#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# check-kernels.sh: the module's own tests (tests/kernel/*) on the kernels of
# the other Debian stacks, each in its own guest: 5.10 (Debian 11's kernel,
# the host's root), 6.12 (Debian 13's kernel on a Debian 13 root), 7.2 and
# 7.3 (trixie-backports' kernels on that root). The module is built for
# each with W=1 -Werror; the test programs are the host's build (Debian
# 13's glibc and libstdc++ run Debian 12's binaries). The guests boot with
# slab_nomerge, so that the unload test sees the module's own slab cache go
# (7.3 merges it into another otherwise).
#
# Usage: KERNEL_TESTS="PROGRAM..." check-kernels.sh --srcdir DIR --builddir DIR [KERNEL...]
#   KERNEL: 5.10, 6.12, 7.2, 7.3, forky (default: all; forky, Debian 14's
#   7.2 and gcc 16, is built for, not booted)
# Stacks come from tests/harness/stacks.sh (cached; MRNOTIFY_STACKS_DIR,
# MRNOTIFY_STACKS=skip). A kernel whose stack cannot be had is SKIPPED, not
# passed. Results: <builddir>/tests/kernel-results-KERNEL/: N.out / N.rc per
# test program, and status.log when the kernel was skipped or its module did
# not build (read by tests/harness/test-summary.sh).
set -u -o pipefail

prog=$(basename "$0")
lane_help=4,16
# shellcheck source=../harness/script-lib.sh
. "$(dirname "$0")/../harness/script-lib.sh"
# shellcheck source=../harness/tap.sh
. "$(dirname "$0")/../harness/tap.sh"
lane_args "$@"
set -- "${lane_rest[@]+"${lane_rest[@]}"}"
[ $# -gt 0 ] || set -- 5.10 6.12 7.2 7.3 forky

stacks=$srcdir/tests/harness/stacks.sh
# The module's test programs: make check-kernels passes tests/Makefile.am's
# KERNEL_TESTS, the list make check-guest runs too.
read -ra tests <<<"${KERNEL_TESTS:-}"
[ ${#tests[@]} -gt 0 ] || { echo "$prog: KERNEL_TESTS (the module's test programs) is empty" >&2; exit 2; }
for t in "${tests[@]}"; do
	[ -x "$builddir/tests/$t" ] || { echo "$prog: $builddir/tests/$t is not built" >&2; exit 2; }
done

status=0
for k in "$@"; do
	res=$builddir/tests/kernel-results-$k
	rm -rf "$res" && mkdir -p "$res" || exit 2
	echo "== $k"
	# status.log holds one TAP result for a kernel that did not reach the
	# guest.
	"$stacks" fetch "$k"
	rc=$?
	if [ $rc -eq 3 ]; then
		tap_file "$res/status.log" skip "kernel-$k: the stack could not be fetched"
		continue
	elif [ $rc -ne 0 ]; then
		tap_file "$res/status.log" fail "kernel-$k: setting up the stack failed"
		status=1
		continue
	fi
	env=$("$stacks" env "$k") || { status=1; continue; }
	eval "$env"
	out=$builddir/kernel/$k
	if ! "$stacks" build-module "$k" "$srcdir/kernel" "$out" >"$res/build.log" 2>&1; then
		cat "$res/build.log"
		tap_file "$res/status.log" fail "kernel-$k: mrnotify.ko did not build ($res/build.log)"
		status=1
		continue
	fi
	grep -E '^stacks.sh: ' "$res/build.log"
	if [ "$k" = forky ]; then
		# Built only: forky's compiler against forky's headers.
		tap_file "$res/status.log" pass \
			"kernel-forky: mrnotify.ko builds for $STACK_RELEASE with gcc $STACK_CC, W=1 -Werror (not booted)"
		continue
	fi
	ko=$out/mrnotify.ko
	# 5.10 boots two NUMA nodes, with balancing off until the one test
	# that needs it turns it on (Precision.NumaBalancingMovesAnUnpinnedThp:
	# before 5.14 a THP's NUMA migration sends no notifier of its own).
	numa=()
	[ "$k" = 5.10 ] && numa=(--numa-nodes 2 --kernel-arg numa_balancing=disable)
	t0=$(date +%s)
	# shellcheck disable=SC2154 # STACK_* come from stacks.sh env
	nice "$srcdir/tests/harness/run-in-guest.sh" --root "$STACK_ROOT" \
		--modules-root "$STACK_MODULES_ROOT" --release "$STACK_RELEASE" \
		--kernel-image "$STACK_IMAGE" --module "$ko" --kernel-arg slab_nomerge "${numa[@]}" \
		--cwd "$builddir/tests" --bind "$srcdir" --bind "$builddir" \
		--test-timeout 1500 --timeout 3000 --quiet --results "$res" \
		"${tests[@]}" "sh $srcdir/tests/kernel/mrn_unload.sh $ko" || status=1
	echo "$prog: $k: guest $(($(date +%s) - t0)) s"
done
exit $status

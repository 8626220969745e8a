#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# check-root.sh: the project on another Debian release, in a root made by
# tests/harness/stacks.sh: built in a chroot of it, make check there (unit
# tests, the UCX plugin's and the Open MPI component's host tests), then the
# guest tests (make check-guest's commands, or those matching --guest) in a
# guest booting that release's kernel with that root over 9p.
#   --stack 6.12   Debian 13 (kernel 6.12, Open MPI 5.0.7, UCX 1.18.1,
#                  libfabric 2.1): every guest test (make check-debian13)
#   --stack forky  Debian 14, testing (kernel 7.2 built with gcc 16,
#                  Open MPI 6.0, UCX 1.23): the UCX plugin's guest tests
#                  (make check-forky)
#
# Usage: check-root.sh --srcdir DIR --builddir DIR --stack 6.12|forky
#                      [--guest REGEX] [--two-nodes] [-- CONFIGURE-ARGS...]
# --two-nodes: then the Open MPI component's btl/uct storm (tests/mca/
# guest.sh uct) across two guests of that release on a private link
# (lanes/check-two-nodes.sh), node 2's module counters checked.
# (in this order: --srcdir and --builddir first)
# The tree is configured in BUILDDIR/NAME (debian13, forky) with
# --enable-werror and CONFIGURE-ARGS. Results, read by
# tests/harness/test-summary.sh:
#   BUILDDIR/NAME/tests/**/*.log     make check's logs
#   BUILDDIR/NAME/guest-results/     N.out / N.rc per guest command
#   BUILDDIR/NAME/two-nodes-results/node[12]/
#                                    the same, for each of the two guests
#   BUILDDIR/NAME/ompi.log           a skip, with the reason, when
#                                    configure found no usable Open MPI
#                                    headers (no component to test)
#   BUILDDIR/NAME/status.log         one TAP result line when a step did
#                                    not get to run its tests (stack
#                                    missing: SKIP; build failed: FAIL)
set -u -o pipefail
prog=$(basename "$0")
lane_help=4,25
# shellcheck source=../harness/script-lib.sh
. "$(dirname "$0")/../harness/script-lib.sh"
# shellcheck source=../harness/tap.sh
. "$(dirname "$0")/../harness/tap.sh"
lane_args "$@"
set -- "${lane_rest[@]+"${lane_rest[@]}"}"
stack= guest_re= two_nodes=no
while [ $# -gt 0 ]; do
	case $1 in
	--two-nodes) two_nodes=yes; shift ;;
	--stack) stack=${2:-}; shift $(($# > 1 ? 2 : 1)) ;;
	--guest) guest_re=${2:-}; shift $(($# > 1 ? 2 : 1)) ;;
	--) shift; break ;;
	*) break ;;
	esac
done
case $stack in
6.12) name=debian13 release="Debian 13" ;;
forky) name=forky release="Debian forky" ;;
*) echo "$prog: --stack 6.12 or forky" >&2; exit 2 ;;
esac
stacks=$srcdir/tests/harness/stacks.sh
b=$builddir/$name
mkdir -p "$b" || exit 2
# No results of an earlier run may be counted for this one.
rm -rf "$b/guest-results" "$b/two-nodes-results" "$b/status.log" "$b/ompi.log"
[ -d "$b/tests" ] && find "$b/tests" \( -name '*.log' -o -name '*.trs' \) -delete
t_start=$(date +%s)

status_line() { # pass|fail|skip WHY: the lane's status.log, one TAP result
	tap_file "$b/status.log" "$1" "$name: $2"
}
elapsed() { echo "$prog: $1: $(($(date +%s) - t_start)) s since the start"; }

"$stacks" fetch "$stack"
rc=$?
if [ $rc -eq 3 ]; then
	status_line skip "the $release stack could not be fetched"
	exit 0
elif [ $rc -ne 0 ]; then
	status_line fail "setting up the $release stack failed"
	exit 1
fi
elapsed "stack ready"
env=$("$stacks" env "$stack") || { status_line fail "stacks.sh env $stack failed"; exit 1; }
eval "$env"
# shellcheck disable=SC2154 # STACK_* come from stacks.sh env
ompi_source=()
if [ -n "$STACK_OMPI_SOURCE" ]; then
	if [ ! -e "$STACK_OMPI_SOURCE/.complete" ]; then
		status_line skip "Open MPI's source headers could not be fetched"
		exit 0
	fi
	ompi_source=(--with-ompi-source="$STACK_OMPI_SOURCE")
fi

# In the chroot: paths are the host's (the build and source trees are bound
# at the same place), the kernel, UCX and Open MPI are the release's.
binds=(--bind "$srcdir")
[ -n "$STACK_OMPI_SOURCE" ] && binds+=(--bind "$STACK_OMPI_SOURCE")
in_root() { # CMD...: run in the release's chroot, in $b
	(cd "$b" && nice "$stacks" run "$stack" "${binds[@]}" "$@")
}
if [ ! -f "$b/Makefile" ] || [ "$srcdir/configure" -nt "$b/config.status" ]; then
	in_root "$srcdir/configure" --enable-werror "${ompi_source[@]+"${ompi_source[@]}"}" \
		--with-kernel-build="/usr/src/linux-headers-$STACK_RELEASE" \
		--with-kernel-image="/boot/vmlinuz-$STACK_RELEASE" "$@" >"$b/configure.log" 2>&1 || {
		tail -n 20 "$b/configure.log"
		status_line fail "configure failed in the $release root: $b/configure.log"
		exit 1
	}
fi
# Without Open MPI's headers there is no component, so none of its tests,
# host or guest, on this release: one result says so, and why.
ompi_why=$(sed -n 's/^  Open MPI headers \.* no (\(.*\))$/\1/p' "$b/configure.log")
[ -z "$ompi_why" ] ||
	tap_file "$b/ompi.log" skip "$name: the Open MPI component and its tests (btl/uct storm, applications): $ompi_why"
# The root has no qemu: the guest tests run from the host (below).
sed -n '/^mrnotify .* configured/,$p' "$b/configure.log" |
	sed 's/^\(  guest tests \.*\) .*/\1 from the host, booting '"$release"''"'"'s kernel (below)/'
if ! in_root make -j2 >"$b/make.log" 2>&1; then
	grep -E 'error|Error' "$b/make.log" | head -n 30
	status_line fail "the build failed in the $release root: $b/make.log"
	exit 1
fi
elapsed "built"
status=0
echo "== make check in the $release root"
in_root make -k -j2 check >"$b/check.log" 2>&1 || status=1
grep -E '^(# (TOTAL|PASS|SKIP|FAIL|ERROR)|(FAIL|ERROR):)' "$b/check.log"
elapsed "make check"
# The UCX plugin built here, preloaded into the host's programs (another
# UCX release): every program runs; the former shape's control fails.
if [ -d "$b/tests/ucx" ]; then
	echo "== the $release build's UCX plugin preloaded into the host's programs"
	sh "$srcdir/tests/ucx/cross-release-preload.sh" "$b" "$builddir/lib/.libs" \
		>"$b/tests/ucx/cross-release-preload.log" 2>&1 ||
		status=1
	grep -E '^(not )?ok' "$b/tests/ucx/cross-release-preload.log"
fi
# The release's Open MPI as a second one beside the host's, under the
# module's environment (this build's preloads): a btl/ofi job as without it.
# Debian 13's only: forky's Open MPI 6 job over btl/ofi is not checked here.
if [ "$stack" = 6.12 ] && [ -x "$b/tests/mca/mpi_rcache_test" ] &&
	[ -r "$builddir/ucx-plugin/.libs/libmrnotify-ucx.so" ]; then
	echo "== $release's Open MPI under the module's environment"
	in_root --bind "$builddir" bash "$srcdir/tests/lanes/second-mpi.sh" "$b/tests/mca/mpi_rcache_test" \
		"$builddir/ucx-plugin/.libs/libmrnotify-ucx.so" "$builddir/lib/.libs/libmrnotify-ofi-preload.so" \
		"$builddir/lib/.libs" >"$b/tests/mca/second-mpi.log" 2>&1 || status=1
	grep -E '^(not )?ok|^# the former' "$b/tests/mca/second-mpi.log"
fi
# make check-guest's commands and flags, from this build.
in_root make -s -C tests guest-commands.list >/dev/null 2>&1 &&
	[ -s "$b/tests/guest-commands.list" ] || {
	status_line fail "no guest command list (make -C tests guest-commands.list)"
	exit 1
}
if [ -n "$guest_re" ]; then
	mapfile -t cmds < <(grep -E -- "$guest_re" "$b/tests/guest-commands.list")
else
	mapfile -t cmds <"$b/tests/guest-commands.list"
fi
mapfile -t flags <"$b/tests/guest-flags.list"
[ ${#cmds[@]} -gt 0 ] || {
	status_line fail "no guest command matches '$guest_re' (a part not built in the $release root?)"
	exit 1
}
echo "== the guest tests: $release's $STACK_RELEASE booting the $release root"
# hpcc with the UCX plugin over pml ucx is the Debian 12 guest lane's; here
# hpcc runs over btl/uct with our cache (guest.sh uctapps), LAMMPS both
# ways. Two minutes of CI's time.
guest_run=(nice "$srcdir/tests/harness/run-in-guest.sh" --root "$STACK_ROOT"
	--modules-root "$STACK_MODULES_ROOT" --release "$STACK_RELEASE"
	--kernel-image "$STACK_IMAGE" "${flags[@]}"
	--cwd "$b/tests" --bind "$srcdir" --bind "$b"
	--env MRN_UCX_SKIP_CASES=apps.hpcc_plugin_same_as_stock
	--env "MRN_UCX_SKIP_WHY=run in the Debian 12 guest lane (make check-guest); here hpcc runs over btl/uct with our cache (guest.sh uctapps)"
	--test-timeout 1500 --timeout 3000 --quiet)
"${guest_run[@]}" --results "$b/guest-results" "${cmds[@]}" || status=1
# Commands the guest never ran (it stopped early) have no N.rc: failures.
shopt -s nullglob
rcs=("$b"/guest-results/[0-9]*.rc)
not_run=$((${#cmds[@]} - ${#rcs[@]}))
if [ "$not_run" -gt 0 ]; then
	# The guest's own reason, where its set-up said one, in the result
	# itself: CI shows the failing results, not the serial log.
	why=$(tr '\n#' '  ' 2>/dev/null <"$b/guest-results/setup.err" | cut -c1-200)
	status_line fail "$not_run of ${#cmds[@]} guest commands did not run${why:+ (guest set-up: $why)} ($b/guest-results/serial.log)"
	status=1
fi
elapsed "guest tests"
[ $two_nodes = yes ] || exit $status

# The btl/uct storm with one rank on each of two guests: the component's
# guest command with its uct group only.
uct_cmd=$(grep -m1 -- '/tests/mca/guest\.sh$' "$b/tests/guest-commands.list")
if [ -z "$uct_cmd" ]; then
	status_line skip "two nodes: the Open MPI component was not built in the $release root"
	exit $status
fi
echo "== two nodes: the btl/uct storm across two $release guests"
bash "$srcdir/tests/lanes/check-two-nodes.sh" --results "$b/two-nodes-results" \
	--command "$uct_cmd uct" -- "${guest_run[@]}" || status=1
elapsed "two nodes"
exit $status

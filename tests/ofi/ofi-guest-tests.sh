#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# libfabric's registration cache with mrnotify's monitor, in the guest
# (mrnotify.ko loaded, rxe0 up): the unmap storm (ofi_unmap_storm.c) over
# libfabric's verbs provider, each case one TAP result, the program's output
# kept as comments.
#   mrnotify_import   mrn_ofi_import() before the first domain; every kind,
#                     two threads, fork and system(): no byte wrong
#   mrnotify_preload  the same through mrnotify-ofi-run, one thread
#   mrnotify_over_env mrn_ofi_import() with FI_MR_CACHE_MONITOR=memhooks set:
#                     ours must still serve (libfabric's fi_ini would put
#                     memhooks back over an import made before it)
#   memhooks_raw      negative control: libfabric's memhooks monitor (1.17's
#                     default) against raw system calls: must corrupt
#   uffd_punch        negative control: libfabric's userfaultfd monitor
#                     against a hole punched in shared memory: must corrupt
#   untouched         a process that never calls libfabric, under the
#                     preload: neither libfabric nor libmrnotify is loaded
# Usage: ofi-guest-tests.sh BINDIR LIBDIR [CASE...]
# BINDIR holds ofi_unmap_storm, LIBDIR libmrnotify's build (.libs and
# mrnotify-ofi-run).
set -u
. "$(dirname "$0")/../harness/tap.sh"

[ $# -ge 2 ] || { echo "usage: ofi-guest-tests.sh BINDIR LIBDIR [CASE...]" >&2; exit 2; }
bin=$1 lib=$2
shift 2
export LD_LIBRARY_PATH=$lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MRNOTIFY_OFI_PRELOAD=$lib/.libs/libmrnotify-ofi-preload.so
unset FI_MR_CACHE_MONITOR MRNOTIFY_OFI LD_PRELOAD
ulimit -l unlimited 2>/dev/null
# The guest's address on rxe0's netdev: the server listens there.
node=$(ip -4 -o addr show dev eth0 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
storm="$bin/ofi_unmap_storm --node=$node"
# Raw system calls that no glibc hook sees (not free, which glibc does).
raw=map_fixed,munmap,mremap,dontneed,shm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# storm NAME COMMAND...: one result; exit 77 (no verbs provider) skips.
storm_case() {
	name=$1
	shift
	"$@" >"$tmp/out" 2>&1
	rc=$?
	show "$tmp/out" 40
	case $rc in
	0) pass "ofi.$name" ;;
	77) skip "ofi.$name" "no verbs provider on rxe0" ;;
	*) fail "ofi.$name (exit $rc)" ;;
	esac
}

run_case() {
	case $1 in
	mrnotify_import)
		storm_case "$1: mrnotify's monitor (mrn_ofi_import), every kind, 2 threads, fork" \
			env MRNOTIFY_STATS=1 $storm --import --require-mrnotify --threads=2 --fork --rounds=48 ;;
	mrnotify_preload)
		storm_case "$1: mrnotify's monitor through mrnotify-ofi-run, every kind" \
			sh "$lib/mrnotify-ofi-run" $storm --require-mrnotify --rounds=32 ;;
	mrnotify_over_env)
		storm_case "$1: mrnotify's monitor although FI_MR_CACHE_MONITOR=memhooks is set" \
			env FI_MR_CACHE_MONITOR=memhooks $storm --import --require-mrnotify \
			--kinds=reuse,$raw --rounds=24 ;;
	memhooks_raw)
		storm_case "$1: libfabric's memhooks monitor misses raw system calls (negative control)" \
			env FI_MR_CACHE_MONITOR=memhooks $storm --kinds=reuse,$raw --rounds=24 --expect=corrupt ;;
	uffd_punch)
		storm_case "$1: libfabric's userfaultfd monitor misses a shared-memory hole punch (negative control)" \
			env FI_MR_CACHE_MONITOR=userfaultfd $storm --kinds=reuse,punch --rounds=8 --expect=corrupt ;;
	untouched)
		sh "$lib/mrnotify-ofi-run" sh -c 'grep -c "libfabric\|libmrnotify\.so" /proc/$$/maps' \
			>"$tmp/out" 2>&1
		show "$tmp/out"
		check "ofi.$1: a process that never calls libfabric loads nothing under the preload" \
			[ "$(cat "$tmp/out")" = 0 ] ;;
	*) fail "ofi.$1: unknown case" ;;
	esac
}

[ $# -gt 0 ] || set -- mrnotify_import mrnotify_preload mrnotify_over_env memhooks_raw uffd_punch \
	untouched
for c in "$@"; do
	run_case "$c"
done
finish

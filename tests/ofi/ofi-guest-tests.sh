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
#   mpi_mtl_ofi       an Open MPI job over mtl/ofi with verbs;ofi_rxm on
#                     rxe0 (tests/ucx/mpi_unmap_storm: two ranks, two
#                     threads each, fork and system()), every rank under
#                     mrnotify-ofi-run, Open MPI's hooks off: no byte wrong
#   mpi_mtl_ofi_stock_hooks
#                     negative control: the same job on the stock set-up,
#                     Open MPI's hook-fed monitor in libfabric (patcher
#                     on), against raw system calls: must corrupt
# Usage: ofi-guest-tests.sh BINDIR LIBDIR [CASE...]
# BINDIR holds ofi_unmap_storm (and BINDIR/../ucx mpi_unmap_storm, built
# with Open MPI), LIBDIR libmrnotify's build (.libs and mrnotify-ofi-run).
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
mpi_storm=$bin/../ucx/mpi_unmap_storm
# libfabric's RxM over verbs asks for MSG completion queues sized for its
# universe (256 peers by default), which is more than rxe0's 32,767 entries:
# fi_enable() then fails with EINVAL (1.17 and 2.1 alike). Two ranks need 4.
MPIRUN="mpirun --allow-run-as-root -np 2 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include verbs;ofi_rxm --mca btl self --mca osc ^rdma -x FI_UNIVERSE_SIZE=4 -x LD_LIBRARY_PATH -x MRNOTIFY_OFI_PRELOAD"
MPI_STORM="$mpi_storm --size=1048576 --rounds=14 --threads=2 --fork"

# Why an MPI case cannot run here, or nothing.
mpi_missing() {
	[ -x "$mpi_storm" ] || { echo "no mpi_unmap_storm (built with Open MPI and UCX)"; return; }
	command -v mpirun >/dev/null || { echo "no mpirun"; return; }
	ompi_info 2>/dev/null | grep -q 'MCA mtl: ofi' || { echo "Open MPI has no mtl/ofi"; return; }
	fi_info -p 'verbs;ofi_rxm' >/dev/null 2>&1 || echo "libfabric has no verbs;ofi_rxm here"
}

# mpi_case NAME COMMAND...: one result, or a skip that says why.
mpi_case() {
	name=$1
	shift
	why=$(mpi_missing)
	if [ -n "$why" ]; then
		skip "ofi.$name" "$why"
		return
	fi
	# The harness's fresh guest: no host name (mpirun refuses "(none)"),
	# loopback down (PMIx needs an address).
	if [ "$(hostname)" = "(none)" ]; then
		hostname mrnguest
		ip link set lo up 2>/dev/null
	fi
	storm_case "$name" timeout 900 "$@"
}

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
	mpi_mtl_ofi)
		mpi_case "$1: Open MPI over mtl/ofi (verbs;ofi_rxm), every rank under mrnotify-ofi-run" \
			$MPIRUN --mca memory ^patcher -x MRNOTIFY_STATS=1 \
			sh "$lib/mrnotify-ofi-run" $MPI_STORM --expect=correct ;;
	mpi_mtl_ofi_stock_hooks)
		mpi_case "$1: Open MPI over mtl/ofi, its own hook-fed monitor in libfabric, misses raw system calls (negative control)" \
			$MPIRUN $MPI_STORM --expect=corrupt ;;
	*) fail "ofi.$1: unknown case" ;;
	esac
}

[ $# -gt 0 ] || set -- mrnotify_import mrnotify_preload mrnotify_over_env memhooks_raw uffd_punch \
	untouched mpi_mtl_ofi mpi_mtl_ofi_stock_hooks
for c in "$@"; do
	run_case "$c"
done
finish

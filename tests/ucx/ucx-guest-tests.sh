#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The UCX plugin's tests, run in the guest with mrnotify.ko loaded (and rxe0
# for the RDMA cases). Each case runs a test program under the configuration
# it needs: with the plugin (through mrnotify-ucx-run), with UCX's own hooks,
# or "blind" (UCM told that unmap events come from elsewhere, and none come),
# which shows the failure each check catches. Each case is one TAP result
# (tests/harness/tap.sh); the programs' output is kept as comments.
#
# Usage: ucx-guest-tests.sh --plugin LIB --run MRNOTIFY-UCX-RUN --libdir DIR
#                           [--noentry LIB] [--bin DIR] [--benchdir DIR] [--list] GROUP|CASE...
# --bin: the test programs (default ./ucx); --benchdir: the benchmark
# programs, _build/bench (default DIR/../../bench, DIR that of --bin).
# --noentry: UCX >= 1.14 only, the plugin built without its UCP entry-point
# checks, which must miss UCP's inlined cache hits (the negative control of
# those checks); its cases are listed only when it is given.
# Groups: cache xfer smoke thp mpi apps bench (bench: figures, not
# pass/fail). apps: hpcc and LAMMPS (Debian's packages) with stock UCX and
# with the plugin, which must give the same results (tests/apps/).
# smoke: tcp and shared memory move data by virtual address and pin
# nothing, so a stale registration cannot corrupt their data: these cases
# only show that transfers work with the plugin, through its caches.
# A case passes when its program exits 0 (it checks its own expectation; 77
# means it could not run here, reported as skipped) and,
# with the plugin, when the plugin's statistics show it active and, where
# the case needs it, that ranges the kernel reported were invalidated.
set -u
# The result verbs (TAP).
. "$(dirname "$0")/../harness/tap.sh"

plugin= run= libdir= bin=$PWD/ucx benchdir= list=no noentry=
while [ $# -gt 0 ]; do
	case $1 in
	--plugin) plugin=$2; shift ;;
	--run) run=$2; shift ;;
	--libdir) libdir=$2; shift ;;
	--noentry) noentry=$2; shift ;;
	--bin) bin=$2; shift ;;
	--benchdir) benchdir=$2; shift ;;
	--list) list=yes ;;
	-*) echo "ucx-guest-tests.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
if [ $list = no ] && { [ -z "$plugin" ] || [ -z "$run" ] || [ -z "$libdir" ] || [ $# -eq 0 ]; }; then
	echo "usage: ucx-guest-tests.sh --plugin LIB --run MRNOTIFY-UCX-RUN --libdir DIR [--bin DIR] [--benchdir DIR] GROUP|CASE..." >&2
	exit 2
fi
export MRNOTIFY_UCX_PLUGIN=$plugin
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ulimit -l unlimited 2>/dev/null

STALE=$bin/ucx_stale
XFER=$bin/ucx_xfer
MPI=$bin/ucx_mpi_remap
STORM="$bin/mpi_unmap_storm --threads=2 --fork"
REGCOUNT=$bin/../apps/libregcount.so
BENCH=${benchdir:-$bin/../../bench}/ucx_rcache_bench
THP=$bin/ucx_thp_pingpong
CASES=$bin/ucx_rcache_cases
here=$(cd "$(dirname "$0")" && pwd)
PLUGIN="$run --enable=yes --stats"
# UCM's hooks off and no plugin: caches exist only if something declares
# the event external.
NOHOOKS="env UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n UCX_MEM_MALLOC_RELOC=n"
# What the modulefiles set for UCX on every node (config/modulefiles): the
# plugin preloaded in try mode, UCM's hooks left as configured; each
# process decides on its node. WITHOUT_DEVICE runs a case as on a node
# without the module (the same guest, /dev/mrnotify hidden): there UCX's own
# hooks keep its cache right. The old modulefiles' environment (UCM's hooks
# off in the environment, NOHOOKS) leaves UCX there with no cache at all:
# the negative control.
MODULE_ENV="env LD_PRELOAD=$plugin UCX_MRNOTIFY_ENABLE=try UCX_MRNOTIFY_STATS=y"
WITHOUT_DEVICE="sh $here/../harness/without-device.sh"
# The UCX the plugin runs (its minor version), which decides what can be
# tested here.
ucx_minor=$(env MRNOTIFY_UCX_PROBE=version LD_PRELOAD="$plugin" true 2>&1 |
	sed -n 's/.*runs UCX 1\.\([0-9]*\)\..*/\1/p')
# UCX over Soft-RoCE: UD (the wireup transport for RC) must not check the
# destination GID, because rxe does not report the RoCE v2 packet type in
# the completion's sl field and UCX then reads an IPv4 packet's header as a
# GID and drops every packet (docs/ucx.md).
RXE="env UCX_NET_DEVICES=rxe0:1 UCX_TLS=rc_verbs,ud_verbs,self UCX_UD_VERBS_ETH_DGID_CHECK=n"
# UCX >= 1.14 (protocols v2) moves data over rxe0 by copying through bounce
# buffers unless told otherwise, which never reads the user's pages through
# a registration: ask for zero-copy rendezvous, which is what the cases test.
if [ "${ucx_minor:-0}" -ge 14 ]; then
	RXE="$RXE UCX_RNDV_SCHEME=get_zcopy"
fi
# UCX 1.18.1 in an Open MPI 5.0.7 rank, with UCM's hooks off and VM_UNMAPPED
# declared external (by the plugin, or blind), hangs in ucp_init on a lock
# of libucm's while UCM's ROCm module patches relocations (with or without
# the plugin's entry points; not in a plain UCP program): the MPI cases
# leave UCX's ROCm modules out (docs/ucx.md).
MPI_ENV=
if [ "${ucx_minor:-0}" -ge 18 ]; then
	MPI_ENV="-x UCX_MODULES=^rocm*"
fi
# MRN_MPI_HOSTS (tests/lanes/two-nodes.sh): one rank on each of two guests.
# Two emulated guests, each with one CPU, move data more slowly than one:
# the sweep stops at 1 MiB there, with 10 exchanges a size (40 took 128 s
# of the lane), to keep it short; its check (no more registrations than
# stock on fixed buffers) does not depend on either.
MPI_HOSTS= SWEEP_ENV=
if [ -n "${MRN_MPI_HOSTS:-}" ]; then
	MPI_HOSTS="--host $MRN_MPI_HOSTS --map-by node --oversubscribe" # as two-nodes.sh
	SWEEP_ENV="env SWEEP_ARGS=--max=1048576 SWEEP_ITERS=10"
fi
MPIRUN="mpirun --allow-run-as-root -np 2 $MPI_HOSTS --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_NET_DEVICES=rxe0:1 -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_UD_VERBS_ETH_DGID_CHECK=n -x LD_LIBRARY_PATH -x MRNOTIFY_UCX_PLUGIN $MPI_ENV"
# Where UCX has no IB transport (Debian forky's 1.23.0~rc1) the MPI cases
# above cannot run; this one then shows at least that the plugin is active
# in every rank of an Open MPI job over tcp and shared memory, through the
# storm's threads, forks and system() (nothing pins there, so stock UCX
# would be correct too: it is no test of staleness).
MPIRUN_TCP="mpirun --allow-run-as-root -np 2 $MPI_HOSTS --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS=tcp,posix,cma,self -x LD_LIBRARY_PATH -x MRNOTIFY_UCX_PLUGIN $MPI_ENV"
# The IB memory domain's own cache (UCT): UCX 1.16 removed it, and there
# uct_md_mem_reg() registers every time, which the case shows (it fails,
# and names the gap, should a later UCX cache there again).
if [ "${ucx_minor:-0}" -ge 16 ]; then
	IB_CASES="cache.ib_md_caches_nothing_in_this_ucx|rxe|-|$PLUGIN $STALE --api=uct --unmap=raw --expect=uncached"
else
	IB_CASES="cache.ib_plugin_raw_syscalls|rxe|ranges|$PLUGIN $STALE --api=uct --unmap=raw --expect=fresh
cache.ib_ucx_hooks_miss_raw_syscalls|rxe|-|$STALE --api=uct --unmap=raw --expect=stale"
fi
TCP="env UCX_TLS=tcp,self UCX_PROTO_ENABLE=y"
SHM="env UCX_TLS=posix,cma,self UCX_PROTO_ENABLE=y"

have_rxe() { [ -e /sys/class/infiniband/rxe0 ]; }
# Debian forky's UCX 1.23.0~rc1 ships no IB transport (no libuct_ib): there
# nothing pins through UCX, and the rxe cases cannot run. Decided by the
# module beside the libucp the tests load, not by the devices UCX lists: a
# broken rxe0 under a UCX that has the transport must fail the cases.
ucx_ib=
have_ucx_ib() {
	if [ -z "$ucx_ib" ]; then
		libucp=$(ldd "$XFER" 2>/dev/null | awk '/libucp\.so/ { print $3; exit }')
		if [ -n "$libucp" ]; then
			if ls "${libucp%/*}"/ucx/libuct_ib.so* >/dev/null 2>&1; then ucx_ib=yes; else ucx_ib=no; fi
		elif ucx_info -d 2>/dev/null | grep -q 'Transport: rc_verbs'; then
			ucx_ib=yes # no ldd here: what UCX lists
		else
			ucx_ib=no
		fi
	fi
	[ "$ucx_ib" = yes ]
}
have_mpi() { command -v mpirun >/dev/null 2>&1 && [ -x "$MPI" ]; }

# case NAME NEEDS CHECK COMMAND...
#   NEEDS: - | rxe | mpi | mpitcp (only where UCX has no IB transport)
#   CHECK: - (exit status only) | plugin (active) | ranges (active and
#          invalidated a range) | ranges2 (two processes did) | inactive
#          (every process's plugin inactive) | stat:TEXT (active, and the
#          statistics line contains TEXT) | hooked, hooked2 (ranges, ranges2,
#          and UCX's lookup hook called the plugin's drain in as many)
ALL_CASES="
cache.ucp_plugin_libc|-|ranges|$PLUGIN $STALE --api=ucp --unmap=libc --expect=fresh
cache.ucp_preloaded_as_the_modulefile_does|-|ranges|$MODULE_ENV $STALE --api=ucp --unmap=raw --expect=fresh
cache.ucp_preloaded_node_without_device_keeps_ucx_hooks|-|inactive|$WITHOUT_DEVICE $MODULE_ENV $STALE --api=ucp --unmap=libc --expect=fresh
cache.ucp_old_module_env_node_without_device_caches_nothing|-|inactive|$WITHOUT_DEVICE $NOHOOKS $MODULE_ENV $STALE --api=ucp --unmap=libc --expect=uncached
cache.ucp_plugin_raw_syscalls|-|ranges|$PLUGIN $STALE --api=ucp --unmap=raw --expect=fresh
cache.ucp_blind_shows_stale_hit|-|-|$NOHOOKS $STALE --api=ucp --unmap=libc --expect=stale --declare-external
cache.ucp_no_hooks_no_plugin_is_uncached|-|-|$NOHOOKS $STALE --api=ucp --unmap=libc --expect=uncached
cache.ucp_plugin_forked_child|-|ranges2|$PLUGIN $STALE --api=ucp --unmap=raw --expect=fresh --fork
cache.ucp_plugin_forked_after_use|-|ranges2|$PLUGIN $STALE --api=ucp --unmap=raw --expect=fresh --fork=after
cache.ucp_forked_after_use_ucx_hooks_miss_raw_syscalls|-|-|$STALE --api=ucp --unmap=raw --expect=stale --fork=after
cache.rcache_watch_once|-|stat:of them sharing a watch 2;|$PLUGIN $CASES --case=watch-once
cache.rcache_failed_watch_drops_only_its_cache|-|plugin|$PLUGIN $CASES --case=failed-watch
cache.rcache_drain_once_per_move|-|stat:drains 2,|$PLUGIN $CASES --case=drain-once
cache.ucp_mem_events_n_plugin_says_inactive|-|inactive|env UCX_MEM_EVENTS=n $run --enable=try --stats $STALE --api=ucp --unmap=libc --expect=uncached
$IB_CASES
xfer.rc_put_dst_blind_corrupts|rxe|-|$RXE $NOHOOKS $XFER --op=put --remap=dst --expect=corrupt --declare-external
xfer.rc_put_dst_plugin|rxe|ranges|$RXE $PLUGIN $XFER --op=put --remap=dst --expect=correct
xfer.rc_tag_both_raw_blind_corrupts|rxe|-|$RXE $NOHOOKS $XFER --op=tag --remap=both --unmap=raw --size=1000000 --expect=corrupt --declare-external
xfer.rc_tag_both_raw_plugin|rxe|ranges|$RXE $PLUGIN $XFER --op=tag --remap=both --unmap=raw --size=1000000 --expect=correct
smoke.tcp_put_dst_raw_plugin|-|ranges|$TCP $PLUGIN $XFER --op=put --remap=dst --unmap=raw --expect=correct
smoke.tcp_tag_both_raw_plugin|-|ranges|$TCP $PLUGIN $XFER --op=tag --remap=both --unmap=raw --size=1000000 --expect=correct
smoke.shm_tag_both_raw_plugin|-|ranges|$SHM $PLUGIN $XFER --op=tag --remap=both --unmap=raw --size=1000000 --expect=correct
thp.pingpong_plugin_hits_as_stock|rxe|-|$RXE sh $here/ucx-thp.sh $PLUGIN -- $THP --passes=4
mpi.pml_ucx_rc_plugin|mpi|ranges2|$MPIRUN $PLUGIN $MPI --expect=correct
mpi.pml_ucx_rc_storm_plugin|mpi|ranges2|$MPIRUN $PLUGIN $STORM --expect=correct
mpi.pml_ucx_rc_storm_stock_hooks_miss_raw_syscalls|mpi|-|$MPIRUN $STORM --expect=corrupt
mpi.pml_ucx_tcp_storm_plugin|mpitcp|plugin|$MPIRUN_TCP $PLUGIN $STORM --expect=correct
apps.hpcc_plugin_same_as_stock|mpi|plugin|sh $here/../apps/hpcc-compare.sh $REGCOUNT $MPIRUN -- $PLUGIN
apps.lammps_plugin_same_as_stock|mpi|plugin|sh $here/../apps/lammps-compare.sh $REGCOUNT $MPIRUN -- $PLUGIN
bench.rcache_hit|-|-|$run --enable=yes $BENCH --regions=1,1024,65536
bench.mpi_sweep_plugin_vs_stock|mpi|plugin|$SWEEP_ENV sh $here/../apps/sweep-compare.sh $REGCOUNT $bin/../apps/mpi_sweep $MPIRUN -- $PLUGIN
"
# UCX >= 1.14: the same plugin without the UCP entry-point checks is active
# (it watches, drains at ucs_rcache_get) and still hands out stale
# registrations: UCP's cache hits never call ucs_rcache_get. With them, the
# MPI case of stock UCX (its hooks on, no plugin), which misses the raw
# system calls (run here on 1.18.1 only).
# A UCX with the lookup hook of ucx-plugin/upstream/ (a patched build,
# LD_LIBRARY_PATH): the plugin without entry checks is then fresh through
# the hook alone, and stale or corrupt with the hook turned off.
ucx_has_lookup_hook() {
	hook_libucp=$(ldd "$STALE" 2>/dev/null | awk '/libucp\.so/ { print $3; exit }')
	[ -n "$hook_libucp" ] && nm -D --defined-only "${hook_libucp%/*}"/libucs.so.0 2>/dev/null |
		grep -q ' ucs_rcache_set_external_validity$'
}
NOENTRY="env MRNOTIFY_UCX_PLUGIN=$noentry $PLUGIN"
STOCK_MPI_CONTROL="mpi.pml_ucx_rc_stock_hooks_miss_raw_syscalls|mpi|-|$MPIRUN $MPI --expect=corrupt"
if [ -n "$noentry" ] && ucx_has_lookup_hook; then
	NOENTRY_NOHOOK="env MRNOTIFY_UCX_PLUGIN=$noentry UCX_MRNOTIFY_LOOKUP_HOOK=n $PLUGIN"
	ALL_CASES="$ALL_CASES
hook.ucp_no_entry_checks_lookup_hook|rxe|hooked|$NOENTRY $STALE --api=ucp --unmap=raw --expect=fresh
hook.ucp_no_entry_checks_hook_off_shows_stale_hit|rxe|plugin|$NOENTRY_NOHOOK $STALE --api=ucp --unmap=raw --expect=stale
hook.xfer_rc_put_dst_no_entry_checks_lookup_hook|rxe|hooked|$RXE $NOENTRY $XFER --op=put --remap=dst --unmap=raw --expect=correct
hook.xfer_rc_put_dst_no_entry_checks_hook_off_corrupts|rxe|plugin|$RXE $NOENTRY_NOHOOK $XFER --op=put --remap=dst --unmap=raw --expect=corrupt
hook.xfer_rc_tag_both_raw_no_entry_checks_lookup_hook|rxe|hooked|$RXE $NOENTRY $XFER --op=tag --remap=both --unmap=raw --size=1000000 --expect=correct
hook.thp_pingpong_no_entry_checks_lookup_hook|rxe|-|$RXE sh $here/ucx-thp.sh $NOENTRY -- $THP --passes=4
hook.mpi_pml_ucx_rc_no_entry_checks_lookup_hook|mpi|hooked2|$MPIRUN $NOENTRY $MPI --expect=correct
hook.mpi_pml_ucx_rc_storm_no_entry_checks_lookup_hook|mpi|hooked2|$MPIRUN $NOENTRY $STORM --expect=correct
hook.mpi_pml_ucx_rc_no_entry_checks_hook_off_corrupts|mpi|plugin|$MPIRUN $NOENTRY_NOHOOK $MPI --expect=corrupt
$STOCK_MPI_CONTROL
"
elif [ -n "$noentry" ]; then
	ALL_CASES="$ALL_CASES
cache.ucp_no_entry_checks_shows_stale_hit|rxe|plugin|$NOENTRY $STALE --api=ucp --unmap=raw --expect=stale
xfer.rc_put_dst_no_entry_checks_corrupts|rxe|plugin|$RXE $NOENTRY $XFER --op=put --remap=dst --unmap=raw --expect=corrupt
mpi.pml_ucx_rc_no_entry_checks_corrupts|mpi|plugin|$MPIRUN $NOENTRY $MPI --expect=corrupt
$STOCK_MPI_CONTROL
"
fi

if [ $list = yes ]; then
	echo "$ALL_CASES" | sed -n 's/^\([^|]*\)|.*/\1/p'
	exit 0
fi

selected=
for want in "$@"; do
	found=no
	for name in $(echo "$ALL_CASES" | sed -n 's/^\([^|]*\)|.*/\1/p'); do
		case $name in
		"$want"|"$want".*) selected="$selected $name"; found=yes ;;
		esac
	done
	[ $found = yes ] || { echo "ucx-guest-tests.sh: no case or group '$want'" >&2; exit 2; }
done

# The plugin's statistics lines (printed at exit) satisfy CHECK?
stats_ok() {
	check=$1 out=$2
	[ "$check" = - ] && return 0
	active=$(grep -c '^libmrnotify-ucx: pid [0-9]*: active,' "$out")
	inactive=$(grep -c '^libmrnotify-ucx: pid [0-9]*: inactive,' "$out")
	if [ "$check" = inactive ]; then
		if [ "$active" -ne 0 ] || [ "$inactive" -eq 0 ]; then
			echo "expected the plugin inactive in every process ($active active, $inactive inactive)"
			return 1
		fi
		return 0
	fi
	ranged=$(sed -n 's/^libmrnotify-ucx: pid [0-9]*: active, .* ranges invalidated \([0-9]*\),.*/\1/p' "$out" |
		awk '$1 > 0' | wc -l)
	if [ "$active" -eq 0 ] || [ "$inactive" -ne 0 ]; then
		echo "the plugin was not active in every process ($active active, $inactive inactive)"
		return 1
	fi
	case $check in
	stat:*)
		if ! grep '^libmrnotify-ucx: pid [0-9]*: active,' "$out" | grep -qF -- "${check#stat:}"; then
			echo "the plugin's statistics do not say '${check#stat:}'"
			return 1
		fi
		need=0 ;;
	ranges) need=1 ;;
	ranges2) need=2 ;;
	hooked | hooked2)
		# UCX's lookup hook checked a cache and called our drain, in
		# as many processes as must also have invalidated a range.
		need=1
		[ "$check" = hooked2 ] && need=2
		hooked=$(sed -n "s/^libmrnotify-ucx: pid [0-9]*: active, .*through UCX's lookup hook \([0-9]*\), its refreshes \([0-9]*\)).*/\1 \2/p" "$out" |
			awk '$1 > 0 && $2 > 0' | wc -l)
		if [ "$hooked" -lt $need ]; then
			echo "expected $need process(es) whose caches UCX's lookup hook checked and refreshed through the plugin, saw $hooked"
			return 1
		fi
		;;
	*) need=0 ;;
	esac
	if [ "$ranged" -lt $need ]; then
		echo "expected $need process(es) whose plugin invalidated a range the kernel reported, saw $ranged"
		return 1
	fi
	return 0
}

# MRN_UCX_SKIP_CASES (environment): cases a lane leaves to another, each
# reported as a skip with MRN_UCX_SKIP_WHY.
tmp=$(mktemp)
for name in $selected; do
	line=$(echo "$ALL_CASES" | grep "^$name|")
	needs=$(echo "$line" | cut -d'|' -f2)
	check=$(echo "$line" | cut -d'|' -f3)
	cmd=$(echo "$line" | cut -d'|' -f4-)
	case " ${MRN_UCX_SKIP_CASES:-} " in
	*" $name "*)
		skip "$name" "${MRN_UCX_SKIP_WHY:-left to another lane}"
		continue
		;;
	esac
	if [ "$needs" = rxe ] && ! have_rxe; then
		skip "$name" "no rxe0 (run the guest with --rxe)"
		continue
	fi
	if [ "$needs" = mpi ] && { ! have_mpi || ! have_rxe; }; then
		skip "$name" "no mpirun, $MPI or rxe0"
		continue
	fi
	if { [ "$needs" = rxe ] || [ "$needs" = mpi ]; } && ! have_ucx_ib; then
		skip "$name" "this UCX has no IB transport (no libuct_ib beside its libucp)"
		continue
	fi
	if [ "$needs" = mpitcp ]; then
		if ! have_mpi; then
			skip "$name" "no mpirun or $MPI"
			continue
		elif have_ucx_ib; then
			skip "$name" "this UCX has an IB transport: the mpi.pml_ucx_rc cases run instead"
			continue
		fi
	fi
	# Open MPI's launcher refuses the guest's host name, "(none)".
	if { [ "$needs" = mpi ] || [ "$needs" = mpitcp ]; } && [ "$(hostname)" = "(none)" ]; then
		hostname localhost
	fi
	note "$name: \$ $cmd"
	start=$(date +%s)
	# shellcheck disable=SC2086
	case $name in
	apps.*|bench.mpi_sweep*) limit=900 ;; # two whole application runs
	*) limit=240 ;;
	esac
	timeout $limit $cmd >"$tmp" 2>&1
	rc=$?
	grep -v '^#' "$tmp" | sed 's/^/# /'
	why=
	if [ $rc -eq 77 ]; then
		skip "$name" "its program could not run here (exit 77)"
		continue
	elif [ $rc -ne 0 ]; then
		why="exit status $rc"
	elif ! why=$(stats_ok "$check" "$tmp"); then
		:
	else
		why=
	fi
	if [ -z "$why" ]; then
		pass "$name ($(( $(date +%s) - start )) s)"
	else
		fail "$name ($(( $(date +%s) - start )) s): $why"
	fi
done
rm -f "$tmp"
finish

# The Open MPI component with the kernel monitor, inside the qemu guest with
# mrnotify.ko loaded (tests/harness/run-in-guest.sh --module .../mrnotify.ko).
#
#   sh tests/mca/guest.sh [api|rxe|mpi|pernode|uct|uctapps|demo|probe|bench|patterns ...]
#                                   (default: api rxe mpi pernode uct uctapps)
#
#   bench     (figures, make bench-guest) bench/rcache_bench hits: the hit
#         path of grdma and the component, kernel monitor
#   patterns  (figures, make bench-guest) bench/capi_bench's access patterns
#         replayed through grdma and the component by bench/rcache_bench
#   api   rcache_api_test with monitor kernel: semantics, grdma's stale
#         registration versus ours (pagemap oracle), threads
#   mpi   mpirun -np 2 over ob1 + btl/ofi (sockets) with our cache in place
#         of grdma, monitor kernel, --mca memory ^patcher (no hooks at all)
#   rxe   rcache_rxe_test on rxe0 (run-in-guest.sh --rxe): the rcache API
#         over ibv_reg_mr and RDMA WRITE; grdma loses a write after a raw
#         remap (the blind negative control), ours does not
#   uct   Open MPI 5's btl/uct over rxe0 (ob1; it asks for "grdma" by name
#         and pins through UCX's verbs memory domain): the MPI storm
#         (tests/ucx/mpi_unmap_storm: fork and system() between rounds)
#         with our cache serving grdma, kernel monitor, no hooks (one and
#         two threads), and by MPI_Put into a window made each round
#         (osc/rdma); the negative controls, stock grdma with Open MPI's
#         hooks on against raw system calls, must corrupt. Skipped
#         where Open MPI has no btl/uct (4.1.4's refuses UCX after 1.8)
#   uctapps  over the same btl/uct, stock grdma (hooks on) against our
#         cache, registrations counted (tests/apps/libregcount.so): the
#         latency/bandwidth sweep (ours must not register more often), hpcc
#         and LAMMPS (the same results, ours registering)
#   pernode  serve_grdma=kernel, what the modulefiles set on every node:
#         a job on this node gets our cache (kernel monitor), the same job
#         as on a node without the module (tests/harness/without-device.sh)
#         gets Open MPI's own grdma and runs; the control, serve_grdma=1
#         there, still takes grdma over. Open MPI 5 (grdma built in) only
#   demo  the same job, showing the statistics each rank prints at finalize
#   probe (evidence, not a test) what Open MPI 4.1's transports that use an
#         rcache do over rxe0: btl/openib, btl/ofi with verbs;ofi_rxm
#
# Paths come from MCA_BUILDDIR / MCA_TESTDIR / MCA_SRCDIR, else from where
# this script is, assuming the build tree is ../../_build.
if [ -z "${MCA_SRCDIR:-}" ]; then
	MCA_SRCDIR=$(cd "$(dirname "$0")" && pwd)
fi
: "${MCA_BUILDDIR:=$MCA_SRCDIR/../../_build/mca}"
: "${MCA_TESTDIR:=$MCA_SRCDIR/../../_build/tests/mca}"
. "$MCA_SRCDIR/common.sh"

if [ ! -c /dev/mrnotify ]; then
	fail "guest.sh: /dev/mrnotify is missing: run in the guest with mrnotify.ko loaded"
	finish
fi
ulimit -l unlimited 2>/dev/null
if [ "$(hostname)" = "(none)" ]; then
	# The harness's fresh guest: no host name (mpirun refuses "(none)"),
	# loopback down (PMIx and the sockets provider need an address).
	hostname mrnguest
	ip link set lo up 2>/dev/null || ifconfig lo up 2>/dev/null
	# The tests' register function does not pin pages as a NIC's does,
	# so the kernel may move them (khugepaged collapsing huge pages,
	# compaction), and the kernel monitor then rightly invalidates the
	# registrations. Keep the pages where they are for the counts below.
	# Put back afterwards, for the guest tests that come after these.
	thp=/sys/kernel/mm/transparent_hugepage
	old_thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' $thp/enabled 2>/dev/null)
	old_defrag=$(sed -n 's/.*\[\(.*\)\].*/\1/p' $thp/defrag 2>/dev/null)
	old_compact=$(cat /proc/sys/vm/compaction_proactiveness 2>/dev/null)
	restore_vm() {
		[ -n "$old_thp" ] && echo "$old_thp" >$thp/enabled 2>/dev/null
		[ -n "$old_defrag" ] && echo "$old_defrag" >$thp/defrag 2>/dev/null
		[ -n "$old_compact" ] && echo "$old_compact" >/proc/sys/vm/compaction_proactiveness 2>/dev/null
		return 0
	}
	echo never >$thp/enabled 2>/dev/null
	echo never >$thp/defrag 2>/dev/null
	echo 0 >/proc/sys/vm/compaction_proactiveness 2>/dev/null
fi
command -v restore_vm >/dev/null 2>&1 || restore_vm() { :; }

run_api() {
	TAP_RELAY_OUT=$OUT OMPI_MCA_rcache_mrnotify_monitor=kernel relay api semantics replacement threads
	grep -q '^ok - mrnotify does not: .*monitor kernel: new registration at the first lookup' "$OUT" &&
		pass "kernel monitor: the remap is seen by the very next lookup" ||
		fail "kernel monitor: the remap was not seen at once"
}

run_rxe() {
	if [ ! -x "$MCA_TESTDIR/rcache_rxe_test" ]; then
		skip "rcache_rxe_test was not built (no libibverbs-dev)"
		return
	fi
	note "rcache_rxe_test: RDMA WRITEs through the cache on rxe0 (kernel monitor), grdma's lost"
	OMPI_MCA_rcache_mrnotify_monitor=kernel relay api_rxe
	# A skip here is a failure: the guest is meant to have rxe0.
	[ $? -ne 77 ] || fail "rcache_rxe_test: no rxe0 in the guest (run-in-guest.sh --rxe)"
}

# Evidence for docs/openmpi.md: Open MPI 4.1's pinning transports over rxe0.
run_probe() {
	root=
	[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
	echo "== btl components of this Open MPI:"
	ompi_info 2>/dev/null | grep 'MCA btl:'
	echo "== btl/openib's connection managers (cpc):"
	ompi_info --param btl openib --level 9 2>/dev/null | grep -A2 'btl_openib_cpc_include'
	echo "== libfabric providers on rxe0 (fi_info, if libfabric-bin is installed):"
	if command -v fi_info >/dev/null; then
		fi_info -p 'verbs;ofi_rxm' 2>&1 | grep -E 'provider|domain|type' | head -n 12
	else
		echo "(fi_info not installed)"
	fi
	for btl in openib ofi; do
		echo "== mpirun -np 2, pml ob1, btl self,$btl over rxe0 (the lines naming $btl):"
		timeout 300 mpirun $root --oversubscribe -np 2 --mca pml ob1 --mca btl "self,$btl" \
			--mca btl_openib_allow_ib 1 --mca btl_openib_cpc_include rdmacm \
			--mca btl_openib_warn_no_device_params_found 0 \
			--mca btl_ofi_provider_include 'verbs;ofi_rxm' --mca btl_ofi_mode 2 \
			--mca btl_base_verbose 100 --mca osc ^rdma -x FI_LOG_LEVEL=info \
			"$MPI_TEST" --iters 1 --no-osc --no-remap >"$OUT" 2>&1
		echo "== (exit $?)"
		grep -iE "$btl|udcm|rdmacm|cpc|link layer|unreachable|ok$" "$OUT" | grep -v libfabric |
			sed 's/^\[[^]]*\] //' | sort | uniq -c | sort -rn | head -n 30
		# libfabric's reasons for turning down verbs;ofi_rxm (FI_LOG_LEVEL=info).
		grep -E 'libfabric:[0-9]*:[0-9]*:(verbs|ofi_rxm|core)' "$OUT" |
			grep -iE 'mr_mode|caps|support|invalid|mismatch|not |unable|fail' |
			sed 's/^libfabric:[0-9]*:[0-9]*://' | sort | uniq -c | sort -rn | head -n 30
	done
	# Evidence, not a test: nothing to count.
	restore_vm
	exit 0
}

# No memory hooks at all: the kernel monitor is the only source of
# invalidations.
GUEST_MCA="--mca memory ^patcher --mca rcache_${RC}_monitor kernel"

run_mpi() {
	# Short: a 2-rank job takes tens of seconds under TCG.
	mpirun_ofi $GUEST_MCA --mca "rcache_${RC}_verbose" 1 "$MPI_TEST" --iters 2 >"$OUT" 2>&1 ||
		fail "mpirun exited $?"
	show "$OUT"
	check_job "guest mpirun, kernel monitor, memory ^patcher" &&
		each_field monitor = kernel "guest: kernel monitor" &&
		each_field leave_pinned = 1 "guest: leave pinned on without hooks" &&
		each_field hits -gt 0 "guest: hits" &&
		each_field invalidations -gt 0 "guest: unmaps seen by the kernel"
	n=$(grep -c 'monitor kernel, leave_pinned on (mpi_leave_pinned -1, pipeline 0), no memory hooks needed' "$OUT")
	[ "$n" -eq "$NP" ] && pass "guest: no memory hooks needed ($n ranks)" ||
		fail "guest: $n of $NP ranks without hooks"
}

# The decision to serve grdma made in each process, on its node: with
# serve_grdma=kernel a job where /dev/mrnotify works gets our cache, a job
# on a node without the module Open MPI's grdma (and Open MPI's memory
# hooks, on by default, feed it). The same job both ways; the modulefiles
# set this value on every node (config/modulefiles).
WITHOUT_DEVICE="sh $MCA_SRCDIR/../harness/without-device.sh"
pernode_job() { # SERVE [PREFIX...]: serve_grdma's value, what runs mpirun
	saved_mca=$GRDMA_MCA
	GRDMA_MCA="--mca mca_base_component_path SYS_DEFAULT:$COMPONENT_DIR --mca rcache_mrnotify_serve_grdma $1"
	shift
	MPIRUN_PREFIX="$*"
	mpirun_ofi --mca rcache_mrnotify_verbose 1 "$MPI_TEST" --iters 2 --no-osc >"$OUT" 2>&1
	job_rc=$?
	GRDMA_MCA=$saved_mca MPIRUN_PREFIX=
	return $job_rc
}
run_pernode() {
	if [ "$GRDMA_BUILTIN" = no ]; then
		skip "pernode: serve_grdma=kernel" "Open MPI 4.1 loads grdma as a component: there the grdma-shadow build first in the component path serves in its place (docs/deploying.md)"
		return
	fi
	oks() { grep -c '^mpi_rcache_test: rank [0-9]* ok' "$OUT"; }
	pernode_job kernel
	show "$OUT"
	check_job "pernode: serve_grdma=kernel with the device: our cache in every rank" &&
		each_field monitor = kernel "pernode: ... kernel monitor"
	pernode_job kernel $WITHOUT_DEVICE
	rc=$?
	show "$OUT"
	if [ $rc -eq 0 ] && [ "$(oks)" -eq "$NP" ] && [ "$(stats | wc -l)" -eq 0 ] &&
		[ "$(grep -c 'serve_grdma=kernel: /dev/mrnotify is not usable here' "$OUT")" -eq "$NP" ]; then
		pass "pernode: serve_grdma=kernel without the device: Open MPI's grdma in every rank, the job runs"
	else
		fail "pernode: serve_grdma=kernel without the device: exit $rc, $(oks) of $NP ranks ok, $(stats | wc -l) of our statistics lines (expected none)"
	fi
	pernode_job 1 $WITHOUT_DEVICE
	rc=$?
	show "$OUT"
	if [ $rc -eq 0 ] && [ "$(stats | wc -l)" -eq "$NP" ]; then
		pass "pernode: control: serve_grdma=1 without the device still takes grdma over ($(stat_field monitor | tr '\n' ' ')monitor)"
	else
		fail "pernode: control: serve_grdma=1 without the device: exit $rc, $(stats | wc -l) of $NP statistics lines"
	fi
}

run_demo() {
	echo "3. Open MPI with mrnotify as its registration cache: mpirun -np $NP over"
	echo "   btl/ofi (our cache in place of grdma), glibc memory hooks off"
	echo "   (--mca memory ^patcher), the kernel monitor tells the cache of unmaps."
	echo "   Each rank unmaps and maps its buffers again between iterations and"
	echo "   checks every byte received; statistics printed at MPI_Finalize:"
	mpirun_ofi $GUEST_MCA "$MPI_TEST" --iters 3 --no-osc >"$OUT" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		tail -n 30 "$OUT"
		return $rc
	fi
	sed -n 's/^mpi_rcache_test: \(rank [0-9]* ok.*\)/   \1/p; s/^\(.* stats cache=.*\)/   \1/p' "$OUT"
}

# ob1 + btl/uct over rxe0 (UCX's verbs memory domain; UD's address check
# fails on rxe's RoCE addresses). MRN_MPI_HOSTS (tests/lanes/two-nodes.sh):
# one rank on each of two guests, else both here.
STORM=$MCA_TESTDIR/../ucx/mpi_unmap_storm
APPS=$MCA_TESTDIR/../apps
uct_launch() { # the mpirun command line, without the program
	root=
	[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
	where=--oversubscribe
	[ -n "${MRN_MPI_HOSTS:-}" ] && where="--host $MRN_MPI_HOSTS --map-by node --oversubscribe"
	echo "mpirun $root $where -np $NP --mca pml ob1 --mca btl self,uct" \
		"--mca btl_uct_memory_domains rxe0 -x UCX_UD_VERBS_ETH_DGID_CHECK=n"
}
# mpirun_uct EXPECT THREADS p2p|osc MPIRUN-OPTIONS...: the storm by
# MPI_Sendrecv or (osc) by MPI_Put into windows under osc/rdma.
mpirun_uct() {
	expect=$1 threads=$2 how=$3
	shift 3
	osc=^rdma storm_how=
	[ "$how" = osc ] && osc=rdma storm_how=--osc
	# shellcheck disable=SC2046,SC2086 # uct_launch's words; storm_how may be empty
	timeout "${MCA_TEST_TIMEOUT:-900}" $(uct_launch) --mca osc $osc "$@" \
		"$STORM" --size=1048576 --rounds=12 --threads="$threads" --fork $storm_how \
		--expect="$expect"
}

# uct_case NAME EXPECT THREADS p2p|osc MPIRUN-OPTIONS...: one result from
# the storm's exit status (0 when the result is EXPECT: correct or corrupt).
uct_case() {
	name=$1 expect=$2 threads=$3 how=$4
	shift 4
	mpirun_uct "$expect" "$threads" "$how" "$@" >"$OUT" 2>&1
	rc=$?
	show "$OUT" 30
	if [ $rc -eq 0 ]; then
		pass "uct: $name (expected $expect)"
	elif [ "$expect" = corrupt ] && [ $rc -ne 124 ] && grep -q 'bytes wrong$' "$OUT"; then
		# A stale registration can do worse than wrong bytes: a rank
		# reading through it was seen to die (SIGTRAP, exit 133). The
		# wrong bytes it printed first are the result; a death without
		# them, or a timeout, is not.
		pass "uct: $name (corrupt, then a rank died: exit $rc)"
	else
		fail "uct: $name (exit $rc, expected $expect)"
	fi
}

# uct_missing PROGRAM: why btl/uct cannot run PROGRAM here (empty: it can).
uct_missing() {
	if ! ompi_info 2>/dev/null | grep -q 'MCA btl: uct'; then
		echo "this Open MPI has no btl/uct (Open MPI 4.1.4's configure refuses UCX after 1.8)"
	elif [ ! -x "$1" ]; then
		echo "no $1 (built with Open MPI and the UCX plugin)"
	elif ! ibv_devices 2>/dev/null | grep -q rxe0; then
		echo "no rxe0 (run-in-guest.sh --rxe)"
	fi
}

# Our cache in btl/uct: serving grdma, the kernel monitor, no memory hooks.
UCT_OURS="$GRDMA_MCA --mca memory ^patcher --mca rcache_${RC}_monitor kernel"

run_uct() {
	why=$(uct_missing "$STORM")
	if [ -n "$why" ]; then
		skip "uct: the MPI storm over btl/uct" "$why"
		return
	fi
	ours=$UCT_OURS
	# A NIC pins, as btl/uct does here: the storm runs with transparent
	# huge pages "always", as on many sites' nodes (and Debian's default).
	# The api counts above want them off: where the top of this file
	# turned them off, restore_vm puts back what it found.
	echo always >/sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
	note "uct: transparent huge pages $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
	uct_case "the storm, 2 threads a rank, our cache serving grdma, kernel monitor, no hooks" \
		correct 2 p2p $ours --mca "rcache_${RC}_print_stats" 1
	# Each rank's btl/uct got our cache, under the memory domain's name.
	n=$(grep "$RC_LOG: stats " "$OUT" | grep -c 'cache=uct\.rxe0')
	[ "$n" -ge "$NP" ] && pass "uct: each rank's btl/uct cache (uct.rxe0) is ours ($n)" ||
		fail "uct: $n of $NP ranks printed our cache's statistics for uct.rxe0"
	uct_case "the storm, 1 thread a rank, our cache" correct 1 p2p $ours
	# One-sided: osc/rdma registers each round's window through the same
	# cache; a stale registration lets the peer's MPI_Put land in the pages
	# the window had before its memory was replaced.
	uct_case "the storm by MPI_Put into windows (osc/rdma), our cache" correct 1 osc $ours \
		--mca "rcache_${RC}_print_stats" 1
	# The stock set-up, Open MPI's hooks on: they see glibc's calls, not
	# the system calls themselves. (With the hooks off, Open MPI 5.0.7
	# refuses to leave registrations pinned, and asked to with
	# mpi_leave_pinned 1 the rank crashes in mca_btl_base_select: there is
	# no stock blind cache to run.)
	if [ -n "${MRN_MPI_HOSTS:-}" ]; then
		# Across two guests the controls' stale registrations panicked
		# a guest's kernel in rdma_rxe in two runs (Debian 13, 6.12.117;
		# docs/openmpi.md), which ends the lane; the same controls run
		# in the debian13 lane's single guest, the one lane with
		# btl/uct today.
		why="stock grdma's stale registrations panicked a Debian 13 guest kernel in rdma_rxe across two guests; run in the single guest"
		skip "uct: stock grdma, Open MPI's hooks on, raw system calls (negative control)" "$why"
		skip "uct: the storm by MPI_Put, stock grdma, hooks on, raw system calls (negative control)" "$why"
		return
	fi
	uct_case "stock grdma, Open MPI's hooks on, raw system calls (negative control)" corrupt 2 p2p
	uct_case "the storm by MPI_Put, stock grdma, hooks on, raw system calls (negative control)" \
		corrupt 1 osc
}

# app_case NAME COMMAND...: one result from a comparison script of
# tests/apps (exit 0: pass, 77: skip, else fail), its output as comments.
app_case() {
	name=$1
	shift
	"$@" >"$OUT" 2>&1
	rc=$?
	show "$OUT"
	case $rc in
	0) pass "uctapps: $name" ;;
	77) skip "uctapps: $name" "$(tail -n 1 "$OUT")" ;;
	*) fail "uctapps: $name (exit $rc)" ;;
	esac
}

# Applications over btl/uct, stock grdma (Open MPI's hooks on) against our
# cache (UCT_OURS), libregcount.so counting the registrations of every rank:
# the latency/bandwidth sweep on buffers that never change (figures; ours
# must not register more often), hpcc and LAMMPS (the same verifications
# and thermodynamic output, ours registering).
run_uctapps() {
	why=$(uct_missing "$APPS/mpi_sweep")
	if [ -n "$why" ]; then
		skip "uctapps: the sweep, hpcc and LAMMPS over btl/uct" "$why"
		return
	fi
	launch="$(uct_launch) --mca osc ^rdma"
	# shellcheck disable=SC2086 # command lines, split into words
	app_case "the sweep on fixed buffers: ours registers no more often than stock grdma" \
		env SWEEP_ARGS=--max=1048576 sh "$MCA_SRCDIR/../apps/sweep-compare.sh" \
		"$APPS/libregcount.so" "$APPS/mpi_sweep" $launch -- $UCT_OURS
	# shellcheck disable=SC2086
	app_case "hpcc: the same verifications with our cache, which registered" \
		sh "$MCA_SRCDIR/../apps/hpcc-compare.sh" "$APPS/libregcount.so" $launch -- $UCT_OURS
	# shellcheck disable=SC2086
	app_case "LAMMPS: the same thermodynamic output with our cache, which registered" \
		sh "$MCA_SRCDIR/../apps/lammps-compare.sh" "$APPS/libregcount.so" $launch -- $UCT_OURS
}

# The benchmarks in bench/ (built by make, not make check), the component
# found as api() finds it.
RCACHE_BENCH=${MCA_BUILDDIR%/mca}/bench/rcache_bench
api_bench() {
	OMPI_MCA_mca_base_component_path="SYS_DEFAULT:$COMPONENT_DIR" "$RCACHE_BENCH" "$@"
}

# Figures, not a test (make bench-guest): the hit path of grdma and the
# component. It registers 10,000 one-page ranges, each made non-inheritable
# (the default fork policy) and tracked by the kernel.
run_bench() {
	TAP_RELAY_OUT=$OUT OMPI_MCA_rcache_mrnotify_monitor=kernel relay api_bench hits
	tail -n 1 "$OUT" | grep -q '^hit_speedup_vs_grdma=' || fail "no hit_speedup_vs_grdma line last"
}

# Figures, not a test (make bench-guest): bench/capi_bench's access
# patterns replayed through grdma and the component (kernel monitor), the
# same callbacks for both.
run_patterns() {
	capi=${MCA_BUILDDIR%/mca}/bench/capi_bench
	if [ ! -x "$capi" ]; then
		skip "patterns: $capi was not built (needs UCX)"
		return
	fi
	pat=$(mktemp /var/tmp/mrn-patterns.XXXXXX) || { fail "patterns: mktemp"; return; }
	if "$capi" --quick --dump "$pat"; then
		note "patterns replayed through grdma and mrnotify (kernel monitor)"
		MRN_PATTERNS_FILE=$pat OMPI_MCA_rcache_mrnotify_monitor=kernel relay api_bench patterns
	else
		fail "capi_bench --dump failed"
	fi
	rm -f "$pat"
}

[ $# -eq 0 ] && set -- api rxe mpi pernode uct uctapps
for what in "$@"; do
	case $what in
	api) run_api ;;
	rxe) run_rxe ;;
	mpi) run_mpi ;;
	pernode) run_pernode ;;
	uct) run_uct ;;
	uctapps) run_uctapps ;;
	probe) run_probe ;;	# exits
	bench) run_bench ;;
	patterns) run_patterns ;;
	demo) run_demo; rc=$?; restore_vm; exit $rc ;;
	*) echo "guest.sh: unknown: $what"; exit 2 ;;
	esac
done
restore_vm
finish

# Sourced by the tests of the Open MPI component (tests/mca/*.test).
#
# From make check: MCA_BUILDDIR (the built mca/), MCA_TESTDIR (these test
# programs) and MCA_SRCDIR are set. To test an installed component instead,
# set MRN_COMPONENT_DIR and MRN_SHADOW_DIR to the installed directories.

set -u
: "${MCA_BUILDDIR:?run through make check, or set MCA_BUILDDIR}"
: "${MCA_TESTDIR:=.}"
COMPONENT_DIR=${MRN_COMPONENT_DIR:-$MCA_BUILDDIR/components/.libs}
SHADOW_DIR=${MRN_SHADOW_DIR:-$MCA_BUILDDIR/grdma-shadow/.libs}
API_TEST=$MCA_TESTDIR/rcache_api_test
MPI_TEST=$MCA_TESTDIR/mpi_rcache_test
OUT=${TMPDIR:-/tmp}/mca-test.$$
trap 'rm -f "$OUT"' EXIT

# Our settings only: nothing from the caller's environment leaks in.
unset MRNOTIFY_MONITOR MRNOTIFY_LEAVE_PINNED MRNOTIFY_MAX_PINNED MRNOTIFY_MAX_ENTRIES \
	MRNOTIFY_FORK MRNOTIFY_VERBOSE MRNOTIFY_STATS
for v in $(env | sed -n 's/^\(OMPI_MCA_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

# The result verbs (pass, fail, skip, show, relay, finish): TAP.
. "$MCA_SRCDIR/../harness/tap.sh"

# The Open MPI the tests run against, e.g. 4.1.4 or 5.0.7.
OMPI_VERSION=$(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v\([0-9.]*\).*/\1/p' | head -n 1)

# The rcache API test with the mrnotify component found next to Open MPI's own.
api() {
	OMPI_MCA_mca_base_component_path="SYS_DEFAULT:$COMPONENT_DIR" "$API_TEST" "$@"
}

# The rxe rcache test, the same way (guest only).
api_rxe() {
	OMPI_MCA_mca_base_component_path="SYS_DEFAULT:$COMPONENT_DIR" "$MCA_TESTDIR/rcache_rxe_test" "$@"
}

# How transports that ask for "grdma" by name get our cache. Where Open
# MPI's grdma is a loadable component (Open MPI 4.1, Debian 12): the
# grdma-named build first in the component path. Where it is built into
# libopen-pal (Open MPI 5's default, Debian 13) Open MPI ignores a loadable
# "grdma", and the mrnotify build takes grdma's place (serve_grdma).
# RC: whose parameters (rcache_${RC}_*) and messages ($RC_LOG) the job's
# caches have.
if [ -e "$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/^ *Pkglibdir: *//p')/mca_rcache_grdma.so" ]; then
	GRDMA_BUILTIN=no RC=grdma RC_LOG='rcache grdma (mrnotify)'
	GRDMA_MCA="--mca mca_base_component_path $SHADOW_DIR:SYS_DEFAULT"
else
	GRDMA_BUILTIN=yes RC=mrnotify RC_LOG='rcache mrnotify'
	GRDMA_MCA="--mca mca_base_component_path SYS_DEFAULT:$COMPONENT_DIR --mca rcache_mrnotify_serve_grdma 1"
fi

# mpirun over ob1 + btl/ofi (libfabric's sockets provider: no RDMA device
# needed), with our cache in place of grdma (GRDMA_MCA). MPIRUN_PREFIX: a
# command that runs mpirun (guest.sh pernode: as on a node without the
# module).
NP=2
MPIRUN_PREFIX=
mpirun_ofi() {
	root=
	[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
	$MPIRUN_PREFIX timeout "${MCA_TEST_TIMEOUT:-600}" mpirun $root --oversubscribe -np "$NP" \
		--mca pml ob1 --mca btl self,ofi --mca btl_ofi_mode 2 \
		--mca btl_ofi_provider_include sockets --mca btl_ofi_provider_exclude '' \
		--mca osc rdma \
		$GRDMA_MCA --mca "rcache_${RC}_print_stats" 1 "$@"
}

# The statistics lines our cache printed at MPI_Finalize, one per rank.
stats() { grep "$RC_LOG: stats " "$OUT"; }
# stat_field NAME: that field of each statistics line, one per line.
stat_field() { stats | sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

# check_job DESC: every rank said ok and printed its cache's statistics.
check_job() {
	oks=$(grep -c '^mpi_rcache_test: rank [0-9]* ok' "$OUT")
	nstats=$(stats | wc -l)
	if [ "$oks" -eq "$NP" ] && [ "$nstats" -eq "$NP" ]; then
		pass "$1: $NP ranks ok, $nstats caches reported"
		return 0
	fi
	fail "$1: $oks of $NP ranks ok, $nstats statistics lines"
	show "$OUT" 30
	return 1
}

# each_field NAME TEST VALUE DESC: the field satisfies [ x TEST VALUE ] on every rank.
each_field() {
	vals=$(stat_field "$1" | tr '\n' ' ')
	for x in $vals; do
		if ! [ "$x" "$2" "$3" ]; then
			fail "$4: $1 = $vals"
			return 1
		fi
	done
	[ -n "$vals" ] || { fail "$4: no $1 reported"; return 1; }
	pass "$4: $1 = $vals"
}

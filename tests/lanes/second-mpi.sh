#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A second Open MPI beside the one mrnotify was built for, under the
# module's environment: Debian 13's Open MPI 5.0.7 in its root (which has no
# mrnotify component), a btl/ofi job over libfabric's sockets provider,
# whose transport asks for grdma. It must run as without the module: the
# job exits 0, Open MPI's own grdma serves both ranks with the same
# statistics, and nothing of ours speaks. The former environment did no
# harm to this Open MPI either (noted below); its failing control is on
# Open MPI 4.1, in the install lane.
#   second-mpi.sh MPI_TEST SHIM OFI_PRELOAD LIBDIR   (in the root's chroot)
# LIBDIR holds libmrnotify.so.0, as an installed node has it.
set -u
. "$(dirname "$0")/../harness/tap.sh"
mpi_test=$1 shim=$2 ofi=$3 libdir=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

job() {
	timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 --mca btl self,ofi \
		--mca btl_ofi_mode 2 --mca btl_ofi_provider_include sockets \
		--mca btl_ofi_provider_exclude '' --mca osc ^rdma --mca rcache_grdma_print_stats 1 \
		"$mpi_test" --iters 1 --no-osc
}
# What `module load mrnotify` sets (config/modulefiles), the preloads this
# build's.
module_env=(OMPI_MCA_rcache_mrnotify_serve_grdma=kernel OMPI_MCA_opal_common_ucx_opal_mem_hooks=0
	UCX_MRNOTIFY_ENABLE=try MRNOTIFY_OFI=try LD_PRELOAD="$ofi:$shim"
	LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
grdma_stats() { sed -n 's/.*grdma: stats \(.*\)/\1/p' "$1" | sort; }

note "Open MPI $(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p'), no mrnotify component: $(ompi_info 2>/dev/null | grep -c 'MCA rcache: mrnotify') listed"
job >"$tmp/without" 2>&1
rc=$?
check "second Open MPI, without the module: the btl/ofi job exits 0 (got $rc), Open MPI's grdma in both ranks" \
	[ $rc -eq 0 ] && [ "$(grdma_stats "$tmp/without" | wc -l)" -eq 2 ]
[ $rc -eq 0 ] || show "$tmp/without" 20
env "${module_env[@]}" bash -c "$(declare -f job); mpi_test='$mpi_test'; job" >"$tmp/with" 2>&1
rc=$?
check "... under the module's environment: exits 0 (got $rc)" [ $rc -eq 0 ]
check "... Open MPI's own grdma serves both ranks, with the same statistics" \
	[ "$(grdma_stats "$tmp/with")" = "$(grdma_stats "$tmp/without")" ]
check "... and nothing of ours or Open MPI's says anything more" \
	[ "$(grep -vE 'rank [0-9]+ ok|grdma: stats' "$tmp/with")" = "$(grep -vE 'rank [0-9]+ ok|grdma: stats' "$tmp/without")" ]
grep -vE 'rank [0-9]+ ok|grdma: stats' "$tmp/with" | head -n 5 | sed 's/^/# with: /'

# The modulefiles' former environment, for the record: Open MPI 5 builds
# its components into its libraries, so a missing directory first in the
# path loses nothing here. Where it did harm (Open MPI 4.1's loadable
# components) the install lane's removal-checks.sh has the failing control.
env "${module_env[@]}" OMPI_MCA_btl_openib_rcache=mrnotify \
	OMPI_MCA_mca_base_component_path=/usr/lib/x86_64-linux-gnu/mrnotify/grdma-shadow:SYS_DEFAULT:USER_DEFAULT \
	bash -c "$(declare -f job); mpi_test='$mpi_test'; job" >"$tmp/former" 2>&1
note "the former environment here: exit $?, $(grdma_stats "$tmp/former" | wc -l) ranks served by Open MPI's grdma"
finish

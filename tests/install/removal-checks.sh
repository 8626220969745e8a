#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Removal and purge, in a chroot of the install root after the guest's
# checks (the packages installed and upgraded there): every configuration
# the docs give an admin is applied (the example openmpi-mca-params.conf and
# ucx.conf, as their headers say), every mrnotify package is purged, and the
# node must then run an Open MPI job and a UCX program as one that never had
# mrnotify, with no file of mrnotify left. The negative control: the
# example as it was (the grdma-shadow directory first in Open MPI's
# component path), after the same purge, stops Open MPI's jobs.
#   removal-checks.sh MPI_TEST
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$( [ -r "$here/tap.sh" ] && echo "$here" || echo "$here/../harness")/tap.sh"
mpi_test=${1:?usage: removal-checks.sh MPI_TEST}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ex=/usr/share/doc/mrnotify-tools/examples
conf=/etc/openmpi/openmpi-mca-params.conf
cp "$conf" "$tmp/mca-params.orig"
# As the examples' headers say (Debian's file has no final newline).
{ echo; grep -v '^#' "$ex/openmpi-mca-params.conf"; } >>"$conf"
mkdir -p /etc/ucx
grep -v '^#' "$ex/ucx.conf" >>/etc/ucx/ucx.conf
note "applied: $(grep -vc '^#' "$ex/openmpi-mca-params.conf") line(s) to $conf, $(grep -vc '^#' "$ex/ucx.conf") to /etc/ucx/ucx.conf"

pkgs=$(dpkg-query -W -f '${Package}\n' | grep -E '^(lib)?mrnotify' | tr '\n' ' ')
note "purging: $pkgs"
# shellcheck disable=SC2086 # package names
DEBIAN_FRONTEND=noninteractive dpkg --purge $pkgs >"$tmp/purge" 2>&1
rc=$?
show "$tmp/purge" 15
check "dpkg --purge of every mrnotify package exits 0 (got $rc)" [ $rc -eq 0 ]
check "no mrnotify package is left" sh -c "! dpkg-query -W -f '\${Package} \${Status}\n' | grep -E '^(lib)?mrnotify' | grep -q 'installed\|config-files'"
find /usr /etc /lib /var/lib/dkms -name '*mrnotify*' 2>/dev/null >"$tmp/left"
show "$tmp/left"
check "no file or directory of mrnotify is left" [ ! -s "$tmp/left" ]

# Open MPI: a job over shared memory, as on a node that never had mrnotify.
mpi_job() {
	timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 \
		--mca btl self,vader --mca osc ^rdma "$mpi_test" --iters 1 --no-osc
}
mpi_job >"$tmp/mpi" 2>&1
rc=$?
check "after the purge, with the example's lines left in $conf: an Open MPI job exits 0 (got $rc)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || show "$tmp/mpi" 20
check "... and prints no warning or help message" sh -c "! grep -qE 'WARNING|^-{40,}' '$tmp/mpi'"
ompi_info >"$tmp/ompi_info" 2>&1
check "... ompi_info lists no mrnotify component" sh -c "! grep -q 'MCA rcache: mrnotify' '$tmp/ompi_info'"
# UCX: a UCP context, no preload, the example's lines left in ucx.conf.
ucx_info -e -u t >"$tmp/ucx" 2>&1
rc=$?
check "after the purge, with the example's lines left in /etc/ucx/ucx.conf: a UCX program runs (got $rc), no warning" \
	sh -c "[ $rc -eq 0 ] && ! grep -q 'UCX  *WARN' '$tmp/ucx'"
[ $rc -eq 0 ] || show "$tmp/ucx" 20

# The control: the example as it was before, left behind by the same purge.
cp "$tmp/mca-params.orig" "$conf"
libdir=$(dirname "$(ls /usr/lib/*-linux-gnu/libc.so.6 | head -n 1)")
printf '\nmca_base_component_path = %s:SYS_DEFAULT:USER_DEFAULT\nbtl_openib_rcache = mrnotify\n' \
	"$libdir/mrnotify/grdma-shadow" >>"$conf"
mpi_job >"$tmp/mpi_control" 2>&1
rc=$?
check "control: the old example left behind (a removed directory first in the component path) stops the job (got $rc)" \
	[ $rc -ne 0 ]
show "$tmp/mpi_control" 5
cp "$tmp/mca-params.orig" "$conf"
finish

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# In the guest booted with the install root: everything comes from the
# installed packages (the module DKMS built, the library, the component,
# the plugin, mrnotify-check, the modulefiles); only the MPI test program
# is the build tree's.
#   guest-checks.sh VERSION MPI_TEST
set -u
here=$(cd "$(dirname "$0")" && pwd)
# The result verbs (TAP): tap.sh sits beside these scripts in the install
# root, in tests/harness in the tree.
. "$( [ -r "$here/tap.sh" ] && echo "$here" || echo "$here/../harness")/tap.sh"
version=$1 mpi_test=$2
rel=$(uname -r)
tmp=$(mktemp -d)
# Open MPI's run-time (PMIx) needs a network interface (the guest has only
# lo) and a valid host name (the guest's is "(none)").
ip link set lo up
[ "$(hostname)" = "(none)" ] && hostname mrnguest

# The module: loaded by name (modules-load.d does the same at boot), from
# where DKMS installed it.
check "modprobe mrnotify (the module DKMS built for $rel)" modprobe mrnotify
path=$(modinfo -n mrnotify 2>/dev/null)
echo "    modinfo -n mrnotify: $path"
check "the module comes from DKMS's directory" sh -c "case '$path' in /lib/modules/$rel/updates/dkms/mrnotify.ko*) true ;; *) false ;; esac"
check "the modules-load.d entry names it" grep -qx mrnotify /usr/lib/modules-load.d/mrnotify.conf
check "/dev/mrnotify is a character device, mode 0666" \
	sh -c '[ -c /dev/mrnotify ] && [ "$(stat -c %a /dev/mrnotify)" = 666 ]'

# mrnotify-check: module loaded, kernel monitor, component and plugin usable.
mrnotify-check >"$tmp/check.txt" 2>&1
rc=$?
sed 's/^/    /' "$tmp/check.txt"
check "mrnotify-check exits 0 with the module loaded (got $rc)" [ $rc -eq 0 ]
check "mrnotify-check: loaded: yes" grep -q '^  loaded: yes' "$tmp/check.txt"
check "mrnotify-check: a cache picks the kernel monitor" grep -q '^  picked: kernel' "$tmp/check.txt"
check "mrnotify-check: the UCX plugin is supported here" grep -q '^  probe: .*: supported' "$tmp/check.txt"
check "mrnotify-check: libfabric can import mrnotify's monitor here (no problem in its section)" \
	sh -c "sed -n '/^\[libfabric\]/,/^\[/p' '$tmp/check.txt' | grep -q '^  libfabric: [1-9]' &&
		! sed -n '/^\[libfabric\]/,/^\[/p' '$tmp/check.txt' | grep -q PROBLEM"
mrnotify-check --json >"$tmp/check.json"
check "mrnotify-check --json: status ok, ABI of the running module" python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
d = r["sections"]["device"]["facts"]
assert r["status"] == "ok" and r["exit_status"] == 0, r["status"]
assert d["module_abi_version"] == d["header_abi_version"], d
' "$tmp/check.json"

# The modulefiles, with the device.
note "modulefiles with the device (Lmod and environment-modules)"
relay bash "$here/modulefile-checks.sh" with

# Jobs after `module load mrnotify` (Lmod).
job() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb bash --norc --noprofile -c "
. /usr/share/lmod/lmod/init/bash
module use /usr/share/modulefiles
module load mrnotify
$*"
}
job 'ompi_info' >"$tmp/ompi_info" 2>&1
grep 'MCA rcache' "$tmp/ompi_info" | sed 's/^/    /'
check "ompi_info: the mrnotify component is installed in Open MPI's directory" \
	grep -qE "MCA rcache: mrnotify \(.*Component v$version\)" "$tmp/ompi_info"
check "ompi_info: grdma is Open MPI's own (the module names no component path)" \
	sh -c "grep 'MCA rcache: grdma' '$tmp/ompi_info' | grep -vq 'Component v$version'"
job 'mrnotify-check' >"$tmp/check2.txt" 2>&1
check "mrnotify-check after module load: grdma served by mrnotify's where the device is usable" \
	grep -q "^  grdma_served_by: mrnotify's in each process that can use the device" "$tmp/check2.txt"

NP=2
root_opt=--allow-run-as-root
# Open MPI's own path: ob1 + btl/ofi (libfabric's sockets provider), which
# asks for "grdma" by name and gets ours (serve_grdma=kernel, the device is
# here).
job "timeout 600 mpirun $root_opt --oversubscribe -np $NP --mca pml ob1 --mca btl self,ofi \
	--mca btl_ofi_mode 2 --mca btl_ofi_provider_include sockets --mca osc ^rdma \
	--mca rcache_mrnotify_verbose 1 $mpi_test --iters 1 --no-osc" >"$tmp/ob1" 2>&1
rc=$?
grep -E 'monitor|rank [0-9]* ok' "$tmp/ob1" | head -n 6 | sed 's/^/    /'
check "mpirun over btl/ofi after module load exits 0 (got $rc)" [ $rc -eq 0 ]
n=$(grep -c 'monitor kernel' "$tmp/ob1")
check "each rank's grdma is mrnotify's with the kernel monitor ($n of $NP)" [ "$n" -ge $NP ]
[ $rc -eq 0 ] && [ "$n" -ge $NP ] || tail -n 30 "$tmp/ob1"
# The same job as libfabric sees it: the module preloads libfabric's
# monitor, which imports ours inside Open MPI's own fi_open("mr_cache")
# (Open MPI imports its hook-fed monitor when its memory hooks are on), so
# each rank's libfabric has exactly one monitor, ours, and the job runs.
job "timeout 600 mpirun $root_opt --oversubscribe -np $NP --mca pml ob1 --mca btl self,ofi \
	--mca btl_ofi_mode 2 --mca btl_ofi_provider_include sockets --mca osc ^rdma \
	-x MRNOTIFY_VERBOSE=1 $mpi_test --iters 1 --no-osc" >"$tmp/ofi" 2>&1
rc=$?
grep 'libmrnotify.*ofi' "$tmp/ofi" | head -n 6 | sed 's/^/    /'
n=$(grep -c 'ofi: imported into libfabric' "$tmp/ofi")
refused=$(grep -c 'refused the monitor' "$tmp/ofi")
check "btl/ofi after module load: each rank's libfabric took mrnotify's monitor ($n of $NP, $refused refused), the job exits 0 (got $rc)" \
	test $rc -eq 0 -a "$n" -ge $NP -a "$refused" -eq 0
[ $rc -eq 0 ] && [ "$n" -ge $NP ] || tail -n 30 "$tmp/ofi"

# UCX's path: pml/ucx over shared memory, the plugin preloaded by the module.
# pml/ucx only takes mlx* devices unless told (pml_ucx_tls, pml_ucx_devices).
job "timeout 600 mpirun $root_opt --oversubscribe -np $NP --mca pml ucx --mca osc ^rdma \
	--mca pml_ucx_tls any --mca pml_ucx_devices any \
	-x UCX_TLS=posix,cma,self -x UCX_MRNOTIFY_STATS=y $mpi_test --iters 1 --no-osc" >"$tmp/ucx" 2>&1
rc=$?
grep 'libmrnotify-ucx' "$tmp/ucx" | sed 's/^/    /'
check "mpirun over pml/ucx after module load exits 0 (got $rc)" [ $rc -eq 0 ]
n=$(grep -c 'libmrnotify-ucx: pid [0-9]*: active' "$tmp/ucx")
check "each rank's UCX plugin reports itself active ($n of $NP)" [ "$n" -ge $NP ]
[ $rc -eq 0 ] && [ "$n" -ge $NP ] || tail -n 30 "$tmp/ucx"

# Each node decides for itself (docs/deploying.md, "Login and compute
# nodes"). This guest plays both kinds of node: itself, and itself with
# /dev/mrnotify hidden (without-device.sh: a node without the module).
# Beside these scripts in the install root, in tests/harness in the tree.
hide_device=$( [ -r "$here/without-device.sh" ] && echo "$here" || echo "$here/../harness")/without-device.sh
without_device() { bash "$hide_device" "$@"; }
# ranks_say OUT STATUS PATTERN DESC: the job exited 0 and each rank printed
# a line matching PATTERN (its plugin's statistics).
ranks_say() {
	grep 'libmrnotify-ucx' "$1" | sed 's/^/    /'
	n=$(grep -c "$3" "$1")
	check "$4: exits 0 (got $2), $n of $NP ranks" test "$2" -eq 0 -a "$n" -ge $NP
	[ "$2" -eq 0 ] && [ "$n" -ge $NP ] || tail -n 30 "$1"
}
UCX_JOB="timeout 600 mpirun $root_opt --oversubscribe -np $NP --mca pml ucx --mca osc ^rdma \
	--mca pml_ucx_tls any --mca pml_ucx_devices any \
	-x UCX_TLS=posix,cma,self -x UCX_MRNOTIFY_STATS=y $mpi_test --iters 1 --no-osc"
# The module loaded where the device is missing (a login node without it),
# its environment kept, the job run here, where the device is.
without_device env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb bash --norc --noprofile -c "
. /usr/share/lmod/lmod/init/bash
module use /usr/share/modulefiles
module load mrnotify
export -p" >"$tmp/env_nodev" 2>"$tmp/env_nodev.err"
sed 's/^/    load: /' "$tmp/env_nodev.err"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb bash --norc --noprofile -c "
. '$tmp/env_nodev'
$UCX_JOB" >"$tmp/ucx_a" 2>&1
ranks_say "$tmp/ucx_a" $? 'libmrnotify-ucx: pid [0-9]*: active,' \
	"loaded without the device, job where it is: each rank's plugin active"
# The reverse: loaded here, the job on a node without the module.
job "bash '$hide_device' $UCX_JOB" >"$tmp/ucx_b" 2>&1
ranks_say "$tmp/ucx_b" $? 'libmrnotify-ucx: pid [0-9]*: inactive,.*; /dev/mrnotify is missing' \
	"loaded with the device, job where it is missing: each rank's plugin inactive, so UCX keeps its hooks"
job "bash '$hide_device' timeout 600 mpirun $root_opt --oversubscribe -np $NP --mca pml ob1 --mca btl self,ofi \
	--mca btl_ofi_mode 2 --mca btl_ofi_provider_include sockets --mca osc ^rdma \
	$mpi_test --iters 1 --no-osc" >"$tmp/ofi_b" 2>&1
rc=$?
said=$(grep -c 'libmrnotify.*ofi' "$tmp/ofi_b")
check "loaded with the device, btl/ofi job where it is missing: exits 0 (got $rc), nothing said (MRNOTIFY_OFI=try: $said lines)" \
	test $rc -eq 0 -a "$said" -eq 0
[ $rc -eq 0 ] && [ "$said" -eq 0 ] || tail -n 30 "$tmp/ofi_b"
rm -rf "$tmp"
finish

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# In a chroot of the install root on the host, which has no /dev/mrnotify
# (its kernel cannot load modules): what a node without the module sees.
#   host-checks.sh (from the directory holding the install test's scripts)
set -u
here=$(cd "$(dirname "$0")" && pwd)
# The result verbs (TAP): tap.sh sits beside these scripts in the install
# root, in tests/harness in the tree.
. "$( [ -r "$here/tap.sh" ] && echo "$here" || echo "$here/../harness")/tap.sh"
tmp=$(mktemp -d)

mrnotify-check >"$tmp/check.txt" 2>&1
rc=$?
sed 's/^/    /' "$tmp/check.txt"
check "mrnotify-check exits 1 without the module (got $rc)" [ $rc -eq 1 ]
check "mrnotify-check: loaded: no" grep -q '^  loaded: no' "$tmp/check.txt"
check "mrnotify-check: the problem is named" grep -q 'PROBLEM: mrnotify.ko is not loaded' "$tmp/check.txt"
mrnotify-check --json >"$tmp/check.json"
rc=$?
check "mrnotify-check --json: exit 1, status degraded, parseable" python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "degraded" and r["exit_status"] == 1
assert r["sections"]["module"]["facts"]["loaded"] == "no"
assert r["sections"]["monitor"]["facts"]["picked"] != "kernel"
' "$tmp/check.json"
mrnotify-check --bogus >/dev/null 2>&1
rc=$?
check "mrnotify-check: a bad option exits 2 (got $rc)" [ $rc -eq 2 ]
check "mrnotify-check(1) is installed" test -e /usr/share/man/man1/mrnotify-check.1.gz
check "the examples are installed" test -e /usr/share/doc/mrnotify-tools/examples/openmpi-mca-params.conf -a \
	-e /usr/share/doc/mrnotify-tools/examples/ucx.conf
check "the udev rule is installed" test -e /usr/lib/udev/rules.d/60-mrnotify.rules

note "modulefiles without the device (Lmod and environment-modules)"
relay bash "$here/modulefile-checks.sh" without
# The negative control: the same checks on the README's old snippet must
# fail (it turns UCX's hooks off in the environment of every node, which
# leaves UCX without caches wherever the plugin cannot be used).
bash "$here/modulefile-checks.sh" control >"$tmp/control.out" 2>&1
rc=$?
sed 's/^/    control: /' "$tmp/control.out"
check "control: the old unconditional snippet fails the same checks" [ $rc -ne 0 ]
check "control: ... because it turns UCM's hooks off in the environment" \
	grep -q "^not ok [0-9]* - tcl .*UCM's hooks not turned off in the environment" "$tmp/control.out"

# A node without the device, after module load: serve_grdma=kernel reaches
# the mrnotify component (among Open MPI's own), which leaves grdma to Open
# MPI where the device cannot be used (docs/deploying.md, "Login and compute
# nodes").
ours="Component v$(mrnotify-check --version | cut -d' ' -f2)"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root bash --norc -c '
. /usr/share/lmod/lmod/init/bash
module use /usr/share/modulefiles
module load mrnotify 2>/dev/null
ompi_info; ompi_info --param rcache mrnotify --level 9; mrnotify-check' >"$tmp/ompi_info" 2>&1
check "without the device, after module load: serve_grdma=kernel reaches the mrnotify component" \
	grep -q 'parameter "rcache_mrnotify_serve_grdma" (current value: "kernel", data source: environment' "$tmp/ompi_info"
check "... ompi_info's grdma is Open MPI's own, the mrnotify component is listed ($ours)" \
	sh -c "grep 'MCA rcache: grdma' '$tmp/ompi_info' | grep -vq '$ours' &&
		grep 'MCA rcache: mrnotify' '$tmp/ompi_info' | grep -q '$ours'"
grep -E '^  (picked|grdma_served_by): ' "$tmp/ompi_info" | sed 's/^/    /'
check "... mrnotify-check says who serves grdma" \
	grep -q '^  grdma_served_by: mrnotify.s in each process that can use the device' "$tmp/ompi_info"
check "... and a cache here picks a monitor other than the kernel's" \
	sh -c "grep '^  picked: ' '$tmp/ompi_info' | grep -vq 'picked: kernel'"
# The configuration examples: applied as their headers say, then undone
# (this root is a throw-away overlay).
ex=/usr/share/doc/mrnotify-tools/examples
conf=/etc/openmpi/openmpi-mca-params.conf
cp "$conf" "$tmp/mca-params.orig"
# Debian's file has no final newline: start a line of our own.
{ echo; grep -v '^#' "$ex/openmpi-mca-params.conf"; } >>"$conf"
check "openmpi-mca-params.conf example: Open MPI reads serve_grdma=kernel from it" \
	sh -c "ompi_info --param rcache mrnotify --level 9 2>&1 |
		grep -q 'parameter \"rcache_mrnotify_serve_grdma\" (current value: \"kernel\", data source: file'"
check "... it names no directory (no component path)" \
	sh -c "! grep -q '^[^#]*mca_base_component_path' '$conf'"
check "... and mrnotify-check reports it" \
	sh -c "mrnotify-check | grep -q '^  serve_grdma_from: $conf'"
cp "$tmp/mca-params.orig" "$conf"
check "openmpi-mca-params.conf example undone: serve_grdma at its default again" \
	sh -c "ompi_info --param rcache mrnotify --level 9 2>&1 |
		grep -q 'parameter \"rcache_mrnotify_serve_grdma\" (current value: \"0\"'"
mkdir -p /etc/ucx
cp "$ex/ucx.conf" /etc/ucx/ucx.conf
ucx_plugin=$(ls /usr/lib/*/mrnotify/libmrnotify-ucx.so | head -n 1)
LD_PRELOAD=$ucx_plugin ucx_info -c >"$tmp/ucx_c" 2>&1
check "ucx.conf example: UCX reads it (UCX_MRNOTIFY_STATS=y), no warning, UCM's hooks left to the plugin" \
	sh -c "grep -qx 'UCX_MRNOTIFY_STATS=y' '$tmp/ucx_c' && ! grep -q 'UCX  *WARN' '$tmp/ucx_c' &&
		! grep -qx 'UCX_MEM_MMAP_HOOK_MODE=none' '$tmp/ucx_c'"
rm /etc/ucx/ucx.conf
check "ucx.conf example undone: the plugin's defaults again" \
	sh -c "LD_PRELOAD=$ucx_plugin ucx_info -c 2>&1 | grep -qx 'UCX_MRNOTIFY_STATS=n'"
rm -rf "$tmp"
finish

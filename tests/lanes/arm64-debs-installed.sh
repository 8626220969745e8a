#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# arm64-debs-installed.sh DEBDIR: in the arm64-deb root (Debian 12 with arm64
# Open MPI and UCX; stacks.sh), lintian on the arm64 packages of DEBDIR, then
# install them and ask arm64 programs (run through binfmt_misc) about them.
# Run by check-arm64.sh. TAP output.
set -u
. "$(dirname "$0")/../harness/tap.sh"
cd "${1:?usage: arm64-debs-installed.sh DEBDIR}" || exit 1
lintian --fail-on error,warning --pedantic -I ./*.deb >lintian.log 2>&1
check "arm64 packages: lintian, no errors or warnings" [ $? = 0 ]
show lintian.log
# shellcheck disable=SC2046 # file names without spaces
dpkg -i $(ls ./*.deb | grep -v dbgsym) >install.log 2>&1
if [ $? = 0 ]; then pass "arm64 packages: installed with dpkg -i"
else show install.log 20; fail "arm64 packages: installed with dpkg -i"; finish; fi
plugin=$(dpkg -L mrnotify-ucx | grep '/libmrnotify-ucx\.so$')
note "$(file -L "$plugin")"
# Open MPI's ompi_info is an arm64 program here: the plugin, preloaded into
# it, says which UCX it was built for and which it finds.
probe=$(MRNOTIFY_UCX_PROBE=version LD_PRELOAD=$plugin ompi_info --version 2>&1 | grep '^libmrnotify-ucx:')
note "$probe"
case $probe in
*": supported") pass "arm64 packages: the plugin runs the UCX it was built for" ;;
*) fail "arm64 packages: the plugin runs the UCX it was built for" ;;
esac
ompi_info --param rcache mrnotify --level 9 >ompi.log 2>&1
if grep -q 'parameter "rcache_mrnotify_monitor"' ompi.log; then
	pass "arm64 packages: arm64 Open MPI loads the component ($(grep -m 1 'MCA rcache: mrnotify' ompi.log | sed 's/^ *//'))"
else
	show ompi.log 20
	fail "arm64 packages: arm64 Open MPI loads the component"
fi
check "arm64 packages: mrnotify-check --help" sh -c 'mrnotify-check --help >/dev/null'
finish

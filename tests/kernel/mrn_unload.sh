#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Run as root in the guest with mrnotify.ko loaded:
#   tests/kernel/mrn_unload.sh /path/to/mrnotify.ko [cycles]
# Unload must be refused while a context exists and must leave nothing
# behind (device, sysfs and debugfs entries, slab cache); load/unload cycles
# must work. TAP: one result a check that passed, and the first that failed
# ends the run (set -e: a command that fails ends it too, without a plan,
# which counts as a failure).
set -eu
. "$(dirname "$0")/../harness/tap.sh"
ko=$1
cycles=${2:-10}
stop() { fail "$*"; finish; }
# The module's slab cache: in /proc/slabinfo, or (SLUB, when the kernel
# merged it with another cache of the same size, as 7.3 does unless booted
# with slab_nomerge) as an alias in /sys/kernel/slab. A merged cache cannot
# be seen to go away: then that check is skipped, not passed.
slab_listed() { grep -q '^mrn_reg ' /proc/slabinfo; }
slab_present() { slab_listed || [ -e /sys/kernel/slab/mrn_reg ]; }
merged=no
slab_listed || merged=yes
slab_present || stop "slab cache mrn_reg not found while loaded"
exec 3</dev/mrnotify
if rmmod mrnotify 2>/dev/null; then stop "unloaded while a context was open"; fi
pass "unload refused while a context is open"
exec 3<&-
i=0
while [ "$i" -lt "$cycles" ]; do
	rmmod mrnotify
	[ ! -e /sys/module/mrnotify ] || stop "module still present after rmmod"
	[ ! -e /dev/mrnotify ] || stop "device still present after rmmod"
	[ $merged = yes ] || ! slab_listed || stop "slab cache left behind"
	[ ! -e /sys/kernel/debug/mrnotify ] || stop "debugfs directory left behind"
	insmod "$ko"
	[ -c /dev/mrnotify ] || stop "no device after insmod"
	[ -r /sys/kernel/debug/mrnotify/invalidated ] || stop "no debugfs counters after insmod"
	i=$((i + 1))
done
pass "$cycles unload/load cycles: nothing left behind after each unload, all back after each load"
[ $merged = no ] || skip "the slab cache is destroyed at unload" "mrn_reg is merged into another cache (boot with slab_nomerge to check)"
finish

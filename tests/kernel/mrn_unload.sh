#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Run as root in the guest with mrnotify.ko loaded:
#   tests/kernel/mrn_unload.sh /path/to/mrnotify.ko [cycles]
# Unload must be refused while a context exists and must leave nothing
# behind (device, sysfs and debugfs entries, slab cache); load/unload cycles
# must work.
set -eu
ko=$1
cycles=${2:-10}
fail() { echo "FAIL: $*"; exit 1; }

grep -q '^mrn_reg ' /proc/slabinfo || fail "slab cache mrn_reg not found while loaded"
exec 3</dev/mrnotify
if rmmod mrnotify 2>/dev/null; then fail "unloaded while a context was open"; fi
exec 3<&-
i=0
while [ "$i" -lt "$cycles" ]; do
	rmmod mrnotify
	[ ! -e /sys/module/mrnotify ] || fail "module still present after rmmod"
	[ ! -e /dev/mrnotify ] || fail "device still present after rmmod"
	! grep -q '^mrn_reg ' /proc/slabinfo || fail "slab cache left behind"
	[ ! -e /sys/kernel/debug/mrnotify ] || fail "debugfs directory left behind"
	insmod "$ko"
	[ -c /dev/mrnotify ] || fail "no device after insmod"
	[ -r /sys/kernel/debug/mrnotify/invalidated ] || fail "no debugfs counters after insmod"
	i=$((i + 1))
done
echo "unload refused while in use; $cycles unload/load cycles ok"

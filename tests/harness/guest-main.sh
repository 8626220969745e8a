#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs inside the guest, whose root is the host's root (or --root): loads the modules,
# brings up Soft-RoCE if asked, runs each command and writes N.out / N.rc into
# the results folder, then the kernel log. The host's run-in-guest.sh reads them.
set -u
R=/run/mrn-results
. $R/guest.conf
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TMPDIR=/tmp LANG=C.UTF-8
ulimit -l unlimited
ulimit -c 0

setup_fail() {
	echo "$*" >>$R/setup.err
	echo "guest: set-up failed: $*"
	dmesg >$R/dmesg.txt 2>&1
	sync
	exit 1
}

# The kernel's own modules: the root's, or those of --modules-root (a
# kernel package unpacked elsewhere).
modprobe() {
	if [ -n "$MRN_MODULES_ROOT" ]; then
		command modprobe -d "$MRN_MODULES_ROOT" "$@"
	else
		command modprobe "$@"
	fi
}

# Paths the commands need that a tmpfs above hides (a build tree in /tmp),
# or that another root (--root) lacks: bind them from the host's root.
# Shortest paths first, so that a tree is bound before anything inside it;
# a path is bound unless what is there already is the host's.
same_as_host() {
	[ -e "$1" ] && [ "$(stat -c %d:%i "$1")" = "$(stat -c %d:%i "/run/host$1")" ]
}
# Another root's folders are read-only. Where the path to make lies below
# one that the root leaves empty (/home, /srv, /opt in a Debian root made by
# mmdebstrap: a clone in /home/alice), a tmpfs over that folder makes room;
# below a folder with content it cannot be made, and set-up fails.
make_path() {
	mkdir -p "$1" 2>/dev/null && return
	d=$1
	while [ ! -e "$d" ]; do d=$(dirname "$d"); done
	[ -d "$d" ] && [ -z "$(ls -A "$d")" ] && mount -t tmpfs -o mode=755 tmpfs "$d" &&
		mkdir -p "$1"
}
for p in "$MRN_CWD" "${MRN_BINDS[@]+"${MRN_BINDS[@]}"}" "${MRN_MODULES[@]+"${MRN_MODULES[@]}"}"; do
	[ -d "/run/host$p" ] || p=$(dirname "$p")
	echo "${#p} $p"
done | sort -n | cut -d' ' -f2- | while read -r p; do
	if [ -e "/run/host$p" ] && ! same_as_host "$p"; then
		make_path "$p" && mount --bind "/run/host$p" "$p" ||
			setup_fail "cannot make $p visible in the guest"
	fi
done
[ -e $R/setup.err ] && exit 1

if [ "$MRN_RXE" = 1 ]; then
	# crc32_generic first where it is a module (6.1, 6.12): rxe cannot
	# init its crc32 without it. From 6.14 on it is gone (crc32 is a
	# library, crc32-cryptoapi), and rxe needs nothing more: its own
	# modprobe and rxe0 appearing below say whether it came up.
	if modprobe -n crc32_generic 2>/dev/null; then
		modprobe crc32_generic || setup_fail "modprobe crc32_generic"
	fi
	for m in rdma_rxe ib_uverbs rdma_ucm virtio_net; do
		modprobe $m || setup_fail "modprobe $m"
	done
	ip link set lo up
	for i in $(seq 50); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done
	ip addr add "$MRN_IP/24" dev eth0 || setup_fail "no eth0"
	ip link set eth0 up || setup_fail "cannot bring up eth0"
	rdma link add rxe0 type rxe netdev eth0 || setup_fail "rdma link add rxe0 failed"
	for i in $(seq 100); do
		ibv_devices 2>/dev/null | grep -qw rxe0 && break
		sleep 0.1
	done
	ibv_devices 2>/dev/null | grep -qw rxe0 || setup_fail "rxe0 did not appear"
fi

[ -z "$MRN_HOSTNAME" ] || hostname "$MRN_HOSTNAME" || setup_fail "cannot set the host name"

# mrnotify.ko's counters are in debugfs (the kernel tests read them).
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug ||
	setup_fail "cannot mount debugfs"

for m in "${MRN_MODULES[@]+"${MRN_MODULES[@]}"}"; do
	name=$(basename "$m" .ko)
	params=
	for p in "${MRN_MODULE_PARAMS[@]+"${MRN_MODULE_PARAMS[@]}"}"; do
		[ "${p%% *}" = "$name" ] && params=${p#* }
	done
	# shellcheck disable=SC2086 # params are word-split on purpose
	insmod "$m" $params || setup_fail "insmod $m $params failed"
done

for e in "${MRN_ENV[@]+"${MRN_ENV[@]}"}"; do
	export "${e?}"
done
cd "$MRN_CWD" || setup_fail "cannot cd to $MRN_CWD"

i=0
for c in "${MRN_COMMANDS[@]}"; do
	i=$((i + 1))
	echo "guest: running $c"
	timeout -s KILL "$MRN_TEST_TIMEOUT" /bin/sh -c "$c" >$R/$i.out 2>&1 </dev/null
	echo $? >$R/$i.rc
	sync
done

dmesg >$R/dmesg.txt 2>&1
: >$R/done
sync

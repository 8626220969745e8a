#!/bin/busybox sh
# SPDX-License-Identifier: BSD-3-Clause
# PID 1 of the guest's initramfs: mount the host's root (read-only 9p) and the
# results folder (writable 9p), then run guest-main.sh in a chroot of the
# host's root. Powers off when done, whatever happens.
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
	echo "guest-init: $*"
	poweroff -f
}

for m in $(cat /lib/mod/order); do
	insmod "/lib/mod/$m" || fail "insmod $m failed"
done

r=/mnt
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot $r ||
	fail "cannot mount the host's root"
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts devpts $r/dev/pts
# Writable scratch space over the read-only root. /run/host keeps a view of
# the host's root without these tmpfs mounts, so that a build tree under,
# say, /tmp stays reachable (guest-main.sh binds it back in place).
mount -t tmpfs -o mode=755 tmpfs $r/run || fail "cannot mount tmpfs on /run"
mkdir -p $r/run/host
mount --bind $r $r/run/host || fail "cannot bind the host's root"
for d in /tmp /root /dev/shm /var/tmp; do
	mount -t tmpfs -o mode=1777 tmpfs $r$d || fail "cannot mount tmpfs on $d"
done
mkdir -p $r/run/mrn-results
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 results $r/run/mrn-results ||
	fail "cannot mount the results folder"

chroot $r /bin/bash /run/mrn-results/guest-main.sh
sync
poweroff -f

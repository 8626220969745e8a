#!/bin/busybox sh
# SPDX-License-Identifier: BSD-3-Clause
# PID 1 of the guest's initramfs: mount the host's root (read-only 9p) and the
# results folder (writable 9p), then switch to the host's root and run
# guest-main.sh there. Powers off when done, whatever happens.
# With mrn_hostfs=1 on the command line (run-in-guest.sh --root), the root is
# another tree and the host's / is a second export, mounted at /run/host.
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
p9="trans=virtio,version=9p2000.L,msize=262144"
hostfs=0
case " $(cat /proc/cmdline) " in *" mrn_hostfs=1 "*) hostfs=1 ;; esac
if [ $hostfs = 1 ]; then
	# The other root is read-only, and the host paths the commands need
	# (a build tree anywhere) must be creatable in it: a tmpfs holds its
	# top level, each folder of the root bound in, links copied.
	mkdir -p /root9p
	mount -t 9p -o $p9,ro hostroot /root9p || fail "cannot mount the root"
	mount -t tmpfs -o mode=755 tmpfs $r || fail "cannot mount tmpfs on $r"
	for e in /root9p/* /root9p/.[!.]*; do
		n=${e#/root9p/}
		if [ -L "$e" ]; then
			ln -s "$(readlink "$e")" "$r/$n"
		elif [ -d "$e" ]; then
			mkdir "$r/$n" && mount --bind "$e" "$r/$n" || fail "cannot bind $n"
		fi
	done
else
	mount -t 9p -o $p9,ro hostroot $r || fail "cannot mount the host's root"
fi
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
if [ $hostfs = 1 ]; then
	mount -t 9p -o $p9,ro hostfs $r/run/host || fail "cannot mount the host's root"
else
	mount --bind $r $r/run/host || fail "cannot bind the host's root"
fi
for d in /tmp /root /dev/shm /var/tmp; do
	mount -t tmpfs -o mode=1777 tmpfs $r$d || fail "cannot mount tmpfs on $d"
done
mkdir -p $r/run/mrn-results
mount -t 9p -o $p9 results $r/run/mrn-results ||
	fail "cannot mount the results folder"

# The root becomes the guest's real root (switch_root, not chroot): a
# process in a chroot may not create a user namespace, and the tests of the
# per-namespace limits need to. PID 1 is then the root's own shell, which
# powers off (sysrq: no init of ours is left) when the commands are done.
exec switch_root $r /bin/sh -c \
	'/bin/bash /run/mrn-results/guest-main.sh; sync; echo o >/proc/sysrq-trigger; sleep 600'

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# without-device.sh COMMAND...: runs COMMAND as on a node of the same
# cluster that has no mrnotify.ko: in a mount namespace of its own whose
# /dev holds everything the guest's does except /dev/mrnotify, so opening it
# fails with ENOENT, as it does there. Needs root (unshare -m).
set -eu
[ $# -gt 0 ] || { echo "usage: without-device.sh COMMAND..." >&2; exit 2; }
exec unshare -m sh -c '
set -eu
mount --make-rprivate /
nodev=$(mktemp -d)
mount -t tmpfs -o mode=755 nodev "$nodev"
for e in /dev/* /dev/.[!.]*; do
	[ -e "$e" ] || [ -L "$e" ] || continue
	name=${e#/dev/}
	[ "$name" = mrnotify ] && continue
	if [ -L "$e" ]; then
		cp -P "$e" "$nodev/$name"
	elif [ -d "$e" ]; then
		mkdir "$nodev/$name" && mount --rbind "$e" "$nodev/$name"
	else
		: >"$nodev/$name" && mount --bind "$e" "$nodev/$name"
	fi
done
mount --move "$nodev" /dev
exec "$@"' sh "$@"

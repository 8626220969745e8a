#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# without-device.sh COMMAND...: runs COMMAND as on a node of the same
# cluster that has no mrnotify.ko: in a mount namespace of its own whose
# /dev holds everything the guest's does except /dev/mrnotify, so opening it
# fails with ENOENT, as it does there. Needs root (unshare -m).
#
# A copy, not a bind mount an entry: under the guests' emulated CPU every
# command started costs a quarter of a second, so one mount(8) per entry of
# /dev took 30-40 s a use; cp -a makes the nodes (same major:minor, mode and
# owner) in one process, and only /dev's own mounts (pts, shm, mqueue,
# hugepages) are bound over their copies.
set -eu
[ $# -gt 0 ] || { echo "usage: without-device.sh COMMAND..." >&2; exit 2; }
exec unshare -m sh -c '
set -eu
mount --make-rprivate /
nodev=$(mktemp -d)
mount -t tmpfs -o mode=755 nodev "$nodev"
cp -a --one-file-system /dev/. "$nodev/"
rm -f "$nodev/mrnotify"
# Each mount below /dev, once (an rbind takes what lies under it along).
for m in $(awk '\''$2 ~ "^/dev/" { print $2 }'\'' /proc/self/mounts | sort -u); do
	case $m in /dev/*/*) [ -d "${m%/*}" ] && grep -q " ${m%/*} " /proc/self/mounts && continue ;; esac
	mkdir -p "$nodev/${m#/dev/}"
	mount --rbind "$m" "$nodev/${m#/dev/}"
done
mount --move "$nodev" /dev
exec "$@"' sh "$@"

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# install-root.sh: the fresh Debian 12 root the packages are installed into
# by the install test (tests/install/check-install.sh), cached outside the
# tree and made again when missing. The cached root stays as mmdebstrap made
# it: every run installs into a throw-away overlay of it.
#
#   install-root.sh fetch        make the root when it is missing
#   install-root.sh path         print its path (exit 3 when not cached)
#   install-root.sh run [--bind DIR]... CMD...
#                                run CMD in a chroot of a throw-away overlay
#                                of the root (in the current directory, which
#                                is bound in, as is each DIR)
#   install-root.sh overlay UPPER CMD...
#                                mount an overlay of the root with its
#                                writable layer in UPPER (kept), at UPPER.root,
#                                and run CMD (on the host, in a private mount
#                                namespace) with MRN_ROOT set to that mount
#
# Environment: MRNOTIFY_STACKS_DIR (default /var/cache/mrnotify-stacks),
# MRNOTIFY_STACKS=skip (make nothing), MRNOTIFY_MIRROR.
# Exit status: 0 done, 1 failed, 2 usage, 3 root missing and not made.
set -u -o pipefail

prog=$(basename "$0")
cache=${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}
root=$cache/bookworm-install-root

# say, mirror
# shellcheck source=script-lib.sh
. "$(dirname "$0")/script-lib.sh"

# What the packages need at install time (dkms and a compiler, the kernel and
# its headers, Open MPI, UCX), the two module systems the modulefiles are
# tested with (lmod is installed; environment-modules conflicts with it in
# Debian, so its package is kept unpacked beside the root, see env_modules),
# and what the guest's tests use.
packages=dkms,build-essential,linux-image-amd64,linux-headers-amd64,kmod,udev,mount,openmpi-bin,libopenmpi3,libucx0,ucx-utils,libibverbs1,ibverbs-providers,lmod,tcl8.6,procps,less,python3,iproute2,file

# A root made with another package list is made again.
ok() {
	[ -e "$root/.complete" ] && [ "$(cat "$root/.complete")" = "$packages" ] &&
		[ -e "$cache/bookworm-environment-modules/.complete" ]
}

make_root() {
	command -v mmdebstrap >/dev/null || { say "mmdebstrap is missing (apt-get install mmdebstrap)"; return 3; }
	mkdir -p "$cache" || return 1
	local t0 envm=$cache/bookworm-environment-modules
	t0=$(date +%s)
	if [ ! -e "$root/.complete" ] || [ "$(cat "$root/.complete")" != "$packages" ]; then
		rm -rf "$root.tmp"
		# Built beside and renamed when complete: an interrupted run leaves
		# no half root that looks usable.
		nice mmdebstrap --quiet --variant=apt --include="$packages" bookworm \
			"$root.tmp" "deb $(mirror) bookworm main" || { rm -rf "$root.tmp"; return 3; }
		echo "$packages" >"$root.tmp/.complete"
		rm -rf "$root" && mv "$root.tmp" "$root" || return 1
	fi
	if [ ! -e "$envm/.complete" ]; then
		# environment-modules, unpacked: it runs from anywhere with the
		# root's tclsh (modulecmd.tcl finds its files relative to itself).
		rm -rf "$envm" && mkdir -p "$envm/deb" || return 1
		(cd "$envm/deb" && apt-get download -q -o APT::Sandbox::User=root environment-modules >/dev/null) || return 3
		dpkg-deb -x "$envm"/deb/environment-modules_*.deb "$envm/root" || return 1
		: >"$envm/.complete"
	fi
	say "bookworm install root: $(($(date +%s) - t0)) s"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
fetch)
	ok && { say "cached in $root"; exit 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "not cached, MRNOTIFY_STACKS=skip"; exit 3; }
	mkdir -p "$cache" || exit 1
	# One maker at a time; a second caller waits and finds the root made.
	exec 9>"$cache/.bookworm-install-root.lock"
	flock 9
	ok && { say "cached in $root"; exit 0; }
	make_root
	;;
path)
	ok || { say "not cached (run $prog fetch)"; exit 3; }
	echo "$root"
	;;
*)
	sed -n '4,22p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

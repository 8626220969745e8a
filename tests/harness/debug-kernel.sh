#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# debug-kernel.sh: Debian 12's 6.1 kernel (package linux-source-6.1) built
# with lockdep, KASAN, KFENCE, DEBUG_OBJECTS and fault injection
# (tests/harness/debug-kernel.config), cached outside the source tree. Debian's own
# kernel has none of these, so without this kernel the guest's check of the
# kernel log for such reports could never fire.
#
# Usage:
#   debug-kernel.sh build    build it unless cached (about 40 min on 2 cores)
#   debug-kernel.sh env      print its paths as shell assignments
#                            (DEBUG_RELEASE, DEBUG_MODULES_ROOT, DEBUG_IMAGE,
#                            DEBUG_BUILD); exit 3 when it is not cached
# The cache, $MRNOTIFY_STACKS_DIR (default /var/cache/mrnotify-stacks)/
# debug-6.1-<key>, is keyed by the configuration file and the source
# package's version: a change to either builds a new one.
# Exit status: 0 done, 1 failed, 2 usage, 3 not cached (env) or the source
# package is missing (build).
set -u -o pipefail

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
cache=${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}
fragment=$here/debug-kernel.config
tarball=/usr/src/linux-source-6.1.tar.xz

# say, die
# shellcheck source=script-lib.sh
. "$here/script-lib.sh"

src_version() { dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null; }
key() { { src_version; cat "$fragment"; } | md5sum | cut -c1-12; }
dir() { echo "$cache/debug-6.1-$(key)"; }

build() {
	local d src rel jobs t0
	d=$(dir)
	[ -e "$d/.complete" ] && { say "cached in $d"; return 0; }
	[ -r "$tarball" ] || { say "$tarball is missing (apt-get install linux-source-6.1)"; return 3; }
	t0=$(date +%s)
	jobs=$(nproc 2>/dev/null || echo 2)
	rm -rf "$d" && mkdir -p "$d" || return 1
	say "unpacking $tarball into $d"
	tar -C "$d" -xf "$tarball" || return 1
	src=$d/linux-source-6.1
	(
		set -e
		cd "$src"
		make -s x86_64_defconfig
		make -s kvm_guest.config
		# Each line of the fragment: CONFIG_X=y|m|n|"string".
		grep -E '^CONFIG_' "$fragment" | while IFS== read -r name value; do
			case "$value" in
			y) scripts/config --enable "$name" ;;
			m) scripts/config --module "$name" ;;
			n) scripts/config --disable "$name" ;;
			*) scripts/config --set-str "$name" "$(echo "$value" | tr -d '"')" ;;
			esac
		done
		make -s olddefconfig
		# olddefconfig drops what a dependency forbids: say so, rather
		# than test a kernel without the checks the lane is for.
		grep -E '^CONFIG_.*=[ym]$' "$fragment" | while IFS== read -r name value; do
			grep -q "^$name=$value\$" .config ||
				{ echo "$prog: $name=$value did not survive olddefconfig" >&2; exit 1; }
		done
		nice make -s -j"$jobs" bzImage modules
		rel=$(make -s kernelrelease)
		make -s INSTALL_MOD_PATH="$d/root" modules_install
		mkdir -p "$d/root/boot"
		cp arch/x86/boot/bzImage "$d/root/boot/vmlinuz-$rel"
		# The build tree, for out-of-tree modules (M=).
		ln -sfn "$src" "$d/root/lib/modules/$rel/build"
	) || { say "build failed (tree left in $d for inspection)"; return 1; }
	: >"$d/.complete"
	say "built in $(($(date +%s) - t0)) s: $d"
}

env_() {
	local d rel
	d=$(dir)
	[ -e "$d/.complete" ] || { say "not cached (run $prog build)"; return 3; }
	rel=$(ls "$d/root/lib/modules" | head -n 1)
	echo "DEBUG_RELEASE=$rel"
	echo "DEBUG_MODULES_ROOT=$d/root"
	echo "DEBUG_IMAGE=$d/root/boot/vmlinuz-$rel"
	echo "DEBUG_BUILD=$d/linux-source-6.1"
}

case "${1:-}" in
build) build ;;
env) env_ ;;
*)
	sed -n '4,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# stacks.sh: the other Debian stacks the module is checked on, cached outside
# the source tree.
#
#   5.10  Debian 11's kernel: linux-image, linux-headers (+ -common, kbuild)
#         unpacked (not installed) under $MRNOTIFY_STACKS_DIR/bullseye. The
#         guest boots it with the host's root; its modules come from there.
#   6.12  Debian 13's kernel, inside a Debian 13 root made with mmdebstrap
#         under $MRNOTIFY_STACKS_DIR/trixie-root. The guest boots it with
#         that root over 9p, and the module is built in a chroot of it:
#         Debian 13's kbuild tools need its newer glibc.
#   forky Debian 14 (testing) in a root made with mmdebstrap under
#         $MRNOTIFY_STACKS_DIR/forky-root: its 7.2 (gcc 16), UCX 1.23 and
#         Open MPI 6. The module is built there (W=1 -Werror), and the
#         forky lane boots its kernel with that root.
#   7.2, 7.3  trixie-backports' kernels (the newest 7.2.y and 7.3.y there,
#         built with Debian 13's gcc 14): the packages unpacked under
#         $MRNOTIFY_STACKS_DIR/trixie-bpo-7.N, booted with the Debian 13 root
#         (6.12's, which they need); the module is built in a chroot of
#         that root, the kernel's headers bound in.
#   arm64 not a kernel: a Debian 13 root with arm64 as a foreign
#         architecture (the cross compiler, qemu-user, arm64 UCX 1.18.1) under
#         $MRNOTIFY_STACKS_DIR/trixie-arm64-cross, for tests/lanes/check-arm64.sh.
#   arm64-run not a kernel: a Debian 13 arm64 root (every program in it is
#         arm64: UCX 1.18.1's ucx_info, the shell, coreutils), run through
#         binfmt_misc by a static qemu-aarch64, under
#         $MRNOTIFY_STACKS_DIR/trixie-arm64-run: the plugin's host tests.
#   arm64-deb not a kernel: a Debian 12 root with arm64 as a foreign
#         architecture and the packages' build dependencies for arm64, under
#         $MRNOTIFY_STACKS_DIR/bookworm-arm64-deb: dpkg-buildpackage -aarm64.
#
# Usage:
#   stacks.sh fetch KERNEL...           make what is missing (5.10, 6.12,
#                                       7.2, 7.3, forky, all; arm64,
#                                       arm64-run, arm64-deb)
#   stacks.sh env KERNEL                print the stack's paths as shell
#                                       assignments (STACK_RELEASE, STACK_ROOT,
#                                       STACK_MODULES_ROOT, STACK_IMAGE,
#                                       STACK_BUILD, STACK_OMPI_SOURCE:
#                                       Open MPI headers its package lacks)
#   stacks.sh build-module KERNEL SRC OUT
#                                       build SRC (kernel/) for KERNEL into
#                                       OUT/mrnotify.ko with W=1 and -Werror
#   stacks.sh run 6.12|forky|arm64|arm64-run|arm64-deb [--bind DIR]... CMD...
#                                       run CMD in a chroot of that root
#                                       (see above), in the current
#                                       directory; it and each DIR are the
#                                       host's, bound in; what CMD writes
#                                       elsewhere is thrown away
# Environment: MRNOTIFY_STACKS_DIR (default /var/cache/mrnotify-stacks),
# MRNOTIFY_STACKS=skip (fetch nothing; stacks not cached count as missing),
# MRNOTIFY_MIRROR (default: the machine's first Debian mirror).
# Exit status: 0 done, 1 failed, 2 usage, 3 stack missing and not made.
set -u -o pipefail

prog=$(basename "$0")
cache=${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}

# say, die, timed, mirror
# shellcheck source=script-lib.sh
. "$(dirname "$0")/script-lib.sh"

# --- 5.10: Debian 11's packages, unpacked ------------------------------------

b_dir=$cache/bullseye
b_root=$b_dir/root

# A private apt state, so that the machine's own sources stay as they are;
# an empty dpkg status, so that the host's installed 6.1 packages are not
# taken for the release's.
apt_opts() { # $1: the folder holding apt/ (sources.list, lists, status, cache)
	echo -o Dir::Etc::sourcelist="$1/apt/sources.list" \
		-o Dir::Etc::sourceparts=/dev/null -o Dir::State::Lists="$1/apt/lists" \
		-o Dir::State::status="$1/apt/status" -o Dir::Cache="$1/apt/cache" \
		-o APT::Sandbox::User=root
}
b_opts() { apt_opts "$b_dir"; }

# The first dependency of PACKAGE that matches the sed pattern.
b_dep() { # $1: package, $2: sed -n expression
	# shellcheck disable=SC2046 # the options are words without spaces
	apt-cache $(b_opts) show "$1" 2>/dev/null | sed -n 's/^Depends: *//p' |
		head -n 1 | tr ',' '\n' | sed -n "$2"
}

b_download() {
	mkdir -p "$b_dir/apt/lists/partial" "$b_dir/apt/cache" "$b_dir/debs" || return
	: >"$b_dir/apt/status"
	echo "deb $(mirror) bullseye main" >"$b_dir/apt/sources.list"
	# shellcheck disable=SC2046
	apt-get -q --error-on=any $(b_opts) update >/dev/null || return
	# The meta-packages name the versioned ones (5.10.0-N).
	local img hdr more
	img=$(b_dep linux-image-amd64 's/^ *\(linux-image-[0-9][^ ]*\).*/\1/p')
	[ -n "$img" ] || { say "5.10: linux-image-amd64 not found on bullseye"; return 1; }
	hdr=${img/linux-image-/linux-headers-}
	more=$(b_dep "$hdr" 's/^ *\(linux-\(headers-[^ ]*-common\|kbuild-[^ ]*\)\).*/\1/p')
	# shellcheck disable=SC2046,SC2086 # $more: package names
	(cd "$b_dir/debs" && rm -f ./*.deb &&
		apt-get -q $(b_opts) download "$img" "$hdr" $more >/dev/null)
}

b_unpack() {
	local f rel hdr
	rm -rf "$b_root.tmp" && mkdir -p "$b_root.tmp" || return
	for f in "$b_dir"/debs/*.deb; do
		dpkg-deb -x "$f" "$b_root.tmp" || return
	done
	rel=$(ls "$b_root.tmp/lib/modules" | head -n 1)
	[ -n "$rel" ] || { say "bullseye: no modules in the image package"; return 1; }
	hdr=$b_root.tmp/usr/src/linux-headers-$rel
	# The -amd64 headers include the -common Makefile by absolute path, and
	# its build and source links are absolute too: point them at the copy.
	sed -i "s|/usr/src/|$b_root/usr/src/|g" "$hdr/Makefile" || return
	ln -sfn "$b_root/usr/src/linux-headers-$rel" "$b_root.tmp/lib/modules/$rel/build"
	ln -sfn "$b_root/usr/src/linux-headers-${rel%-amd64}-common" "$b_root.tmp/lib/modules/$rel/source"
	# Installing runs depmod; unpacking does not. The guest's modprobe and
	# the harness need modules.dep.
	depmod -b "$b_root.tmp" "$rel" || return
	rm -rf "$b_root" && mv "$b_root.tmp" "$b_root"
}

b_ok() { [ -e "$b_root/.complete" ]; }

fetch_510() {
	b_ok && { say "5.10: cached in $b_root"; return 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "5.10: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	timed "5.10: download (apt-get download)" b_download || return 3
	timed "5.10: unpack (dpkg-deb -x, depmod)" b_unpack || return 1
	: >"$b_root/.complete"
}

env_510() {
	local rel
	rel=$(ls "$b_root/lib/modules" 2>/dev/null | head -n 1)
	echo "STACK_RELEASE=$rel"
	echo "STACK_ROOT=/"
	echo "STACK_MODULES_ROOT=$b_root"
	echo "STACK_IMAGE=$b_root/boot/vmlinuz-$rel"
	echo "STACK_BUILD=$b_root/usr/src/linux-headers-$rel"
}

# Debian 11's compiler is gcc-10; Debian 12's gcc builds a module that loads
# (the version mismatch only changes which warnings exist, checked by W=1).
build_510() { # $1: out dir
	local rel
	rel=$(ls "$b_root/lib/modules" | head -n 1)
	nice make -C "$b_root/usr/src/linux-headers-$rel" M="$1" CC=gcc W=1 \
		KCFLAGS=-Werror modules
}

# --- 6.12: a Debian 13 root ----------------------------------------------------

t_root=$cache/trixie-root
# What other-stacks.md lists: the project's build dependencies, Open MPI 5,
# UCX 1.18, libfabric 2.1 (the libfabric monitor's storm) and Debian 13's
# kernel with headers; dropbear for the two-node storm (check-root.sh
# --two-nodes).
t_packages=build-essential,autoconf,automake,libtool,pkg-config,libibverbs-dev,librdmacm-dev,ibverbs-providers,ibverbs-utils,libopenmpi-dev,openmpi-bin,libucx-dev,ucx-utils,libhwloc-dev,libgtest-dev,kmod,iproute2,rdma-core,linux-image-amd64,linux-headers-amd64,hpcc,lammps,lammps-examples,trinity,libfabric-dev,libfabric-bin,dropbear-bin

# Complete, and holding every package of the list: a root made before a
# package was added to its list is made again.
root_ok() { # $1: name, $2: root, $3: packages (comma-separated)
	[ -e "$2/.complete" ] || return 1
	local missing
	# shellcheck disable=SC2046 # package names
	missing=$(dpkg-query --admindir="$2/var/lib/dpkg" -W -f='${db:Status-Abbrev} ${Package}\n' \
		$(echo "$3" | tr ',' ' ') 2>&1 | grep -v '^ii ')
	[ -z "$missing" ] || { say "$1: the cached root lacks: $missing"; return 1; }
}
t_ok() { root_ok 6.12 "$t_root" "$t_packages"; }

# Open MPI 5's devel package lacks the headers of its built-in threads and
# timer components, which opal_config.h names (upstream installs them
# nowhere): they are taken from the source package of the root's Open MPI
# release (apt-get source, checked against the signed Sources index), into
# a directory of their own (env: STACK_OMPI_SOURCE, for configure
# --with-ompi-source).
t_ompi_version() { # the root's libopenmpi-dev version, e.g. 5.0.7-1
	dpkg-query --admindir="$t_root/var/lib/dpkg" -W -f='${Version}' libopenmpi-dev 2>/dev/null
}
t_ompi_src_dir() { echo "$cache/trixie-ompi-src/$(t_ompi_version)"; }

t_ompi_src() {
	local ver dir inc tmp d dirs=()
	ver=$(t_ompi_version)
	[ -n "$ver" ] || { say "6.12: no libopenmpi-dev in $t_root"; return 1; }
	dir=$(t_ompi_src_dir)
	[ -e "$dir/.complete" ] && return 0
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "6.12: Open MPI's headers not cached, MRNOTIFY_STACKS=skip"; return 3; }
	inc=$t_root/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi
	tmp=$cache/trixie-ompi-src/tmp
	rm -rf "$tmp" && mkdir -p "$tmp/apt/lists/partial" "$tmp/apt/cache" "$tmp/src" || return 1
	: >"$tmp/apt/status"
	echo "deb-src $(mirror) trixie main" >"$tmp/apt/sources.list"
	local o
	read -ra o <<<"$(apt_opts "$tmp")"
	apt-get -q --error-on=any "${o[@]}" update >/dev/null &&
		(cd "$tmp" && apt-get -q "${o[@]}" source --download-only "openmpi=$ver" >/dev/null) ||
		{ say "6.12: could not download Open MPI $ver's source package"; rm -rf "$tmp"; return 3; }
	# Each header opal_config.h names that the package lacks, with the
	# headers beside it (they include each other).
	for d in $(sed -n 's/^#define MCA_[A-Za-z0-9_]*HEADER "\(.*\.h\)"$/\1/p' "$inc/opal_config.h" |
		while read -r h; do [ -e "$inc/$h" ] || echo "${h%/*}"; done | sort -u); do
		dirs+=("*/$d/*.h")
	done
	if [ ${#dirs[@]} -gt 0 ]; then
		tar -xf "$tmp"/openmpi_"${ver%-*}".orig.tar.* -C "$tmp/src" --strip-components=1 \
			--wildcards "${dirs[@]}" || { rm -rf "$tmp"; return 1; }
	fi
	rm -rf "$dir" && mkdir -p "${dir%/*}" && mv "$tmp/src" "$dir" && rm -rf "$tmp" &&
		: >"$dir/.complete"
}

t_make() {
	command -v mmdebstrap >/dev/null || { say "6.12: mmdebstrap is missing (apt-get install mmdebstrap)"; return 3; }
	rm -rf "$t_root.tmp"
	# Built beside and renamed when complete: an interrupted run leaves no
	# half root that looks usable.
	nice mmdebstrap --quiet --variant=apt --include="$t_packages" trixie \
		"$t_root.tmp" "deb $(mirror) trixie main" || { rm -rf "$t_root.tmp"; return 3; }
	rm -rf "$t_root" && mv "$t_root.tmp" "$t_root"
}

fetch_612() {
	t_ok && { say "6.12: cached in $t_root"; t_ompi_src; return; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "6.12: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	mkdir -p "$cache" || return 1
	timed "6.12: Debian 13 root (mmdebstrap)" t_make || return $?
	: >"$t_root/.complete"
	timed "6.12: Open MPI's missing headers (apt-get source)" t_ompi_src
}

env_612() {
	local rel
	rel=$(ls "$t_root/lib/modules" 2>/dev/null | sort -V | tail -n 1)
	echo "STACK_RELEASE=$rel"
	echo "STACK_ROOT=$t_root"
	echo "STACK_MODULES_ROOT=$t_root"
	echo "STACK_IMAGE=$t_root/boot/vmlinuz-$rel"
	echo "STACK_BUILD=$t_root/usr/src/linux-headers-$rel"
	echo "STACK_OMPI_SOURCE=$(t_ompi_src_dir)"
}

# In a chroot of ROOT and a private mount namespace: the output folder is
# bound into the root at /run/mrn-kmod, so nothing of the build is left in
# the cached root; /proc is mounted (objtool needs it).
build_in_root() { # $1: root, $2: out dir, $3: the release of its headers
	# shellcheck disable=SC2016 # expanded by the inner shell
	nice unshare -m -- /bin/sh -c '
		set -e
		mount --make-rprivate /
		mount -t tmpfs tmpfs "$1/run"
		mkdir -p "$1/run/mrn-kmod"
		mount --bind "$2" "$1/run/mrn-kmod"
		mount -t proc proc "$1/proc"
		exec chroot "$1" make -C "/usr/src/linux-headers-$3" M=/run/mrn-kmod \
			W=1 KCFLAGS=-Werror modules' sh "$1" "$(readlink -f "$2")" "$3"
}

build_612() { # $1: out dir
	build_in_root "$t_root" "$1" "$(ls "$t_root/lib/modules" | sort -V | tail -n 1)"
}

# --- 7.2, 7.3: trixie-backports' kernels, on the Debian 13 root ----------------

k_dir() { echo "$cache/trixie-bpo-$1"; } # $1: 7.2 or 7.3
k_root() { echo "$(k_dir "$1")/root"; }
k_ok() { [ -e "$(k_root "$1")/.complete" ]; }
k_release() { ls "$(k_root "$1")/lib/modules" 2>/dev/null | sort -V | tail -n 1; }

# The newest SERIES.y amd64 kernel trixie-backports has, as its packages
# name it (e.g. 7.3.4+deb13-amd64): its image, modules, headers and kbuild.
k_download() { # $1: series
	local d rel base p pkgs=()
	d=$(k_dir "$1")
	mkdir -p "$d/apt/lists/partial" "$d/apt/cache" "$d/debs" || return
	: >"$d/apt/status"
	echo "deb $(mirror) trixie-backports main" >"$d/apt/sources.list"
	# shellcheck disable=SC2046 # the options are words without spaces
	apt-get -q --error-on=any $(apt_opts "$d") update >/dev/null || return
	# shellcheck disable=SC2046
	rel=$(apt-cache $(apt_opts "$d") pkgnames "linux-headers-$1." 2>/dev/null |
		sed -n "s/^linux-headers-\($1\.[0-9]*+deb13-amd64\)$/\1/p" | sort -V | tail -n 1)
	[ -n "$rel" ] || { say "$1: no linux-headers-$1.*-amd64 in trixie-backports"; return 1; }
	base=${rel%-amd64}
	for p in "linux-image-$rel" "linux-binary-$rel" "linux-modules-$rel" "linux-headers-$rel" \
		"linux-headers-$base-common" "linux-kbuild-$base"; do
		# shellcheck disable=SC2046
		apt-cache $(apt_opts "$d") show "$p" >/dev/null 2>&1 && pkgs+=("$p")
	done
	say "$1: $rel (${pkgs[*]})"
	# shellcheck disable=SC2046
	(cd "$d/debs" && rm -f ./*.deb && apt-get -q $(apt_opts "$d") download "${pkgs[@]}" >/dev/null)
}

k_unpack() { # $1: series
	local d root f rel hdr
	d=$(k_dir "$1") root=$(k_root "$1")
	rm -rf "$root.tmp" && mkdir -p "$root.tmp" || return
	for f in "$d"/debs/*.deb; do
		dpkg-deb -x "$f" "$root.tmp" || return
	done
	# Merged /usr: the packages put the modules and the image in
	# /usr/lib/modules/REL; the guest harness looks in /lib/modules and /boot.
	[ -e "$root.tmp/lib" ] || ln -s usr/lib "$root.tmp/lib"
	rel=$(ls "$root.tmp/lib/modules" | head -n 1)
	[ -n "$rel" ] || { say "$1: no modules in the packages"; return 1; }
	mkdir -p "$root.tmp/boot"
	[ -e "$root.tmp/boot/vmlinuz-$rel" ] || cp "$root.tmp/lib/modules/$rel/vmlinuz" "$root.tmp/boot/vmlinuz-$rel" ||
		{ say "$1: no vmlinuz for $rel in the packages"; return 1; }
	hdr=$root.tmp/usr/src/linux-headers-$rel
	# As for 5.10: the headers name the -common tree and kbuild by absolute
	# path; point them at the copy, which the build's chroot binds at the
	# same path.
	sed -i "s|/usr/src/|$root/usr/src/|g" "$hdr/Makefile" || return
	ln -sfn "$root/usr/src/linux-headers-$rel" "$root.tmp/lib/modules/$rel/build"
	depmod -b "$root.tmp" "$rel" || return
	rm -rf "$root" && mv "$root.tmp" "$root"
}

fetch_bpo() { # $1: series
	k_ok "$1" && { say "$1: cached in $(k_root "$1")"; return 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "$1: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	# The root it boots with and builds in.
	fetch_612 || return $?
	timed "$1: download (apt-get download, trixie-backports)" k_download "$1" || return 3
	timed "$1: unpack (dpkg-deb -x, depmod)" k_unpack "$1" || return 1
	: >"$(k_root "$1")/.complete"
}
fetch_72() { fetch_bpo 7.2; }
fetch_73() { fetch_bpo 7.3; }

env_bpo() { # $1: series
	local rel root
	rel=$(k_release "$1") root=$(k_root "$1")
	echo "STACK_RELEASE=$rel"
	echo "STACK_ROOT=$t_root"
	echo "STACK_MODULES_ROOT=$root"
	echo "STACK_IMAGE=$root/boot/vmlinuz-$rel"
	echo "STACK_BUILD=$root/usr/src/linux-headers-$rel"
}
env_72() { env_bpo 7.2; }
env_73() { env_bpo 7.3; }

# In the Debian 13 root (gcc 14, the kernel's compiler), as build_612, with
# the unpacked kernel's folder bound at its own path.
build_bpo() { # $1: series, $2: out dir
	local rel root
	rel=$(k_release "$1") root=$(k_root "$1")
	# shellcheck disable=SC2016 # expanded by the inner shell
	nice unshare -m -- /bin/sh -c '
		set -e
		mount --make-rprivate /
		mount -t tmpfs tmpfs "$1/run"
		mkdir -p "$1/run/mrn-kmod" "$1$4"
		mount --bind "$2" "$1/run/mrn-kmod"
		mount --bind "$4" "$1$4"
		mount -t proc proc "$1/proc"
		exec chroot "$1" make -C "$4/usr/src/linux-headers-$3" M=/run/mrn-kmod \
			W=1 KCFLAGS=-Werror modules' sh "$t_root" "$(readlink -f "$2")" "$rel" "$root"
}
build_72() { build_bpo 7.2 "$1"; }
build_73() { build_bpo 7.3 "$1"; }

# --- forky: Debian 14, testing ---------------------------------------------------

# Debian forky (testing): its 7.2 built with gcc 16 (which the backports'
# 7.2, built with gcc 14, does not show), UCX 1.23 and Open MPI 6. The
# module is built in its chroot with W=1 -Werror (check-kernels), and the
# forky lane builds the project there and boots forky's kernel on the root
# for the UCX plugin's guest tests (tests/lanes/check-root.sh). forky's
# Release file may be past its Valid-Until date, and objtool needs /proc.
# Its source packages are listed but not served, so Open MPI 6's headers
# that its devel package lacks cannot be had (env: STACK_OMPI_SOURCE empty).
f_root=$cache/forky-root
f_packages=build-essential,autoconf,automake,libtool,pkg-config,libibverbs-dev,librdmacm-dev,ibverbs-providers,ibverbs-utils,libopenmpi-dev,openmpi-bin,libucx-dev,ucx-utils,libhwloc-dev,libgtest-dev,kmod,iproute2,rdma-core,linux-image-amd64,linux-headers-amd64,lammps,lammps-examples
f_ok() { root_ok forky "$f_root" "$f_packages"; }
f_release() { ls "$f_root/lib/modules" 2>/dev/null | sort -V | tail -n 1; }

f_make() {
	command -v mmdebstrap >/dev/null || { say "forky: mmdebstrap is missing (apt-get install mmdebstrap)"; return 3; }
	rm -rf "$f_root.tmp"
	nice mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
		--include="$f_packages" forky "$f_root.tmp" "deb $(mirror) forky main" ||
		{ rm -rf "$f_root.tmp"; return 3; }
	rm -rf "$f_root" && mv "$f_root.tmp" "$f_root"
}

fetch_forky() {
	f_ok && { say "forky: cached in $f_root"; return 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "forky: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	mkdir -p "$cache" || return 1
	timed "forky: Debian 14 root (mmdebstrap)" f_make || return $?
	[ -n "$(f_release)" ] || { say "forky: no kernel in $f_root"; return 1; }
	: >"$f_root/.complete"
}

env_forky() {
	local rel
	rel=$(f_release)
	echo "STACK_RELEASE=$rel"
	echo "STACK_ROOT=$f_root"
	echo "STACK_MODULES_ROOT=$f_root"
	echo "STACK_IMAGE=$f_root/boot/vmlinuz-$rel"
	echo "STACK_BUILD=$f_root/usr/src/linux-headers-$rel"
	echo "STACK_OMPI_SOURCE="
	echo "STACK_CC=$(chroot "$f_root" gcc -dumpfullversion 2>/dev/null)"
}

build_forky() { # $1: out dir
	build_in_root "$f_root" "$1" "$(f_release)"
}

# --- arm64: Debian 13's cross compiler and arm64 libraries ----------------------

# Not a kernel: a Debian 13 amd64 root with arm64 as a foreign architecture,
# for tests/lanes/check-arm64.sh: the cross compiler (gcc 14), qemu-user, and the
# arm64 UCX (1.18.1), GoogleTest and verbs the library and the plugin are
# built against. Debian 12's cross compiler (gcc 12) cannot use Debian 13's
# arm64 libraries (glibc 2.41, libstdc++ 14).
a_root=$cache/trixie-arm64-cross
a_packages=build-essential,autoconf,automake,libtool,pkg-config,g++-aarch64-linux-gnu,qemu-user,libucx-dev:arm64,ucx-utils:arm64,libgtest-dev:arm64,libibverbs-dev:arm64
a_ok() { root_ok arm64 "$a_root" "$(echo "$a_packages" | sed 's/:arm64//g')"; }

a_make() {
	command -v mmdebstrap >/dev/null || { say "arm64: mmdebstrap is missing (apt-get install mmdebstrap)"; return 3; }
	rm -rf "$a_root.tmp"
	nice mmdebstrap --quiet --variant=apt --architectures=amd64,arm64 \
		--include="$a_packages" trixie "$a_root.tmp" "deb $(mirror) trixie main" ||
		{ rm -rf "$a_root.tmp"; return 3; }
	rm -rf "$a_root" && mv "$a_root.tmp" "$a_root"
}

fetch_arm64() {
	a_ok && { say "arm64: cached in $a_root"; return 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "arm64: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	mkdir -p "$cache" || return 1
	timed "arm64: Debian 13 root with arm64 libraries (mmdebstrap)" a_make || return $?
	: >"$a_root/.complete"
}

# --- arm64-run: a Debian 13 arm64 root, emulated ---------------------------------

# Every program in it is arm64, so that scripts can start UCX programs with
# the arm64 plugin preloaded (qemu-aarch64 run by hand follows no child:
# a script's children would be the host's amd64 programs). The kernel
# starts each through binfmt_misc; the interpreter must be static and
# registered with the F flag (opened at registration), since the chroot
# holds no amd64 libraries: Debian's qemu-user-static and binfmt-support.
r_root=$cache/trixie-arm64-run
r_packages=ucx-utils,libucx0,libibverbs1,libstdc++6,file
r_ok() { root_ok arm64-run "$r_root" "$r_packages"; }

# Can this machine run arm64 programs in a chroot? (the reason if not)
r_binfmt() {
	local f=/proc/sys/fs/binfmt_misc/qemu-aarch64
	if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
		mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null ||
			{ echo "binfmt_misc is not mounted and cannot be"; return 1; }
	fi
	if [ ! -e "$f" ] && command -v update-binfmts >/dev/null; then
		update-binfmts --enable qemu-aarch64 >/dev/null 2>&1
	fi
	[ -e "$f" ] || { echo "no qemu-aarch64 in binfmt_misc (apt-get install qemu-user-static binfmt-support)"; return 1; }
	grep -q '^enabled' "$f" || { echo "binfmt_misc's qemu-aarch64 is disabled"; return 1; }
	grep -q '^flags:.*F' "$f" ||
		{ echo "binfmt_misc's qemu-aarch64 lacks the F flag (a chroot would not find it)"; return 1; }
}

r_make() {
	command -v mmdebstrap >/dev/null || { say "arm64-run: mmdebstrap is missing (apt-get install mmdebstrap)"; return 3; }
	rm -rf "$r_root.tmp"
	nice mmdebstrap --quiet --variant=apt --architectures=arm64 \
		--include="$r_packages" trixie "$r_root.tmp" "deb $(mirror) trixie main" ||
		{ rm -rf "$r_root.tmp"; return 3; }
	rm -rf "$r_root" && mv "$r_root.tmp" "$r_root"
}

fetch_arm64run() {
	local why
	why=$(r_binfmt) || { say "arm64-run: $why"; return 3; }
	r_ok && { say "arm64-run: cached in $r_root"; return 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "arm64-run: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	mkdir -p "$cache" || return 1
	timed "arm64-run: Debian 13 arm64 root, emulated (mmdebstrap)" r_make || return $?
	: >"$r_root/.complete"
}

# --- arm64-deb: Debian 12's cross tools and arm64 build dependencies -----------

# The packages are Debian 12's (debian/control: UCX 1.13, Open MPI 4.1), so
# their arm64 build is too: crossbuild-essential-arm64 (gcc 12) and
# debian/control's Build-Depends for arm64. debian/rules asks ompi_info and
# mpicc, which are then arm64 programs: binfmt_misc runs them (as arm64-run).
d_root=$cache/bookworm-arm64-deb
d_packages=build-essential,crossbuild-essential-arm64,debhelper,dh-dkms,dpkg-dev,autoconf,automake,libtool,chrpath,pkgconf:arm64,linux-libc-dev:arm64,libgtest-dev:arm64,libibverbs-dev:arm64,libfabric-dev:arm64,libucx-dev:arm64,libopenmpi-dev:arm64,openmpi-bin:arm64,lintian
d_ok() { root_ok arm64-deb "$d_root" "$(echo "$d_packages" | sed 's/:arm64//g')"; }

d_make() {
	command -v mmdebstrap >/dev/null || { say "arm64-deb: mmdebstrap is missing (apt-get install mmdebstrap)"; return 3; }
	rm -rf "$d_root.tmp"
	nice mmdebstrap --quiet --variant=apt --architectures=amd64,arm64 \
		--include="$d_packages" bookworm "$d_root.tmp" "deb $(mirror) bookworm main" ||
		{ rm -rf "$d_root.tmp"; return 3; }
	rm -rf "$d_root" && mv "$d_root.tmp" "$d_root"
}

fetch_arm64deb() {
	local why
	why=$(r_binfmt) || { say "arm64-deb: $why"; return 3; }
	d_ok && { say "arm64-deb: cached in $d_root"; return 0; }
	[ "${MRNOTIFY_STACKS:-}" = skip ] && { say "arm64-deb: not cached, MRNOTIFY_STACKS=skip"; return 3; }
	mkdir -p "$cache" || return 1
	timed "arm64-deb: Debian 12 root with arm64 build dependencies (mmdebstrap)" d_make || return $?
	: >"$d_root/.complete"
}

# --- commands ---------------------------------------------------------------------

kernels() { # expand "all"
	local k
	for k in "$@"; do
		case "$k" in
		all) echo 5.10 6.12 7.2 7.3 forky ;;
		5.10|6.12|7.2|7.3|forky) echo "$k" ;;
		arm64|arm64-run|arm64-deb) [ "$cmd" = fetch ] && echo "$k" ||
			{ say "$k is a root, not a kernel: fetch or run only"; exit 2; } ;;
		*) say "unknown kernel '$k' (5.10, 6.12, 7.2, 7.3, forky, arm64, arm64-run, arm64-deb or all)"; exit 2 ;;
		esac
	done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
fetch)
	[ $# -gt 0 ] || set -- all
	status=0
	for k in $(kernels "$@"); do
		"fetch_$(echo "$k" | tr -d .-)" || { rc=$?; [ $status -ge $rc ] || status=$rc; }
	done
	exit $status
	;;
env)
	[ $# -eq 1 ] || { say "usage: $prog env KERNEL"; exit 2; }
	k=$(kernels "$1")
	case "$k" in 5.10) b_ok ;; 6.12) t_ok ;; forky) f_ok ;; *) t_ok && k_ok "$k" ;; esac ||
		{ say "$k: not cached (run $prog fetch $k)"; exit 3; }
	"env_${k/./}"
	;;
build-module)
	[ $# -eq 3 ] || { say "usage: $prog build-module KERNEL SRC OUT"; exit 2; }
	k=$(kernels "$1") src=$(readlink -f "$2") out=$3
	case "$k" in 5.10) b_ok ;; 6.12) t_ok ;; forky) f_ok ;; *) t_ok && k_ok "$k" ;; esac ||
		{ say "$k: not cached (run $prog fetch $k)"; exit 3; }
	# A copy, not links: the chroot cannot follow links to the host's tree.
	rm -rf "$out" && mkdir -p "$out/include/uapi/linux" || exit 1
	shopt -s nullglob
	cp "$src/Kbuild" "$src"/*.c "$src"/*.h "$out/" || exit 1
	cp "$src/include/uapi/linux/mrnotify.h" "$out/include/uapi/linux/" || exit 1
	timed "$k: build mrnotify.ko (W=1, -Werror)" "build_${k/./}" "$out" || exit 1
	[ -f "$out/mrnotify.ko" ] || die "$k: no mrnotify.ko in $out"
	;;
run)
	case "${1:-}" in
	6.12) t_ok || { say "6.12: not cached (run $prog fetch 6.12)"; exit 3; }; root=$t_root ;;
	forky) f_ok || { say "forky: not cached (run $prog fetch forky)"; exit 3; }; root=$f_root ;;
	arm64) a_ok || { say "arm64: not cached (run $prog fetch arm64)"; exit 3; }; root=$a_root ;;
	arm64-run)
		why=$(r_binfmt) || { say "arm64-run: $why"; exit 3; }
		r_ok || { say "arm64-run: not cached (run $prog fetch arm64-run)"; exit 3; }
		root=$r_root ;;
	arm64-deb)
		why=$(r_binfmt) || { say "arm64-deb: $why"; exit 3; }
		d_ok || { say "arm64-deb: not cached (run $prog fetch arm64-deb)"; exit 3; }
		root=$d_root ;;
	*) say "usage: $prog run 6.12|forky|arm64|arm64-run|arm64-deb [--bind DIR]... CMD..."; exit 2 ;;
	esac
	shift
	binds=("$PWD")
	while [ "${1:-}" = --bind ]; do binds+=("$(readlink -f "$2")"); shift 2; done
	[ $# -gt 0 ] || { say "usage: $prog run 6.12|forky|arm64|arm64-run|arm64-deb [--bind DIR]... CMD..."; exit 2; }
	exec unshare -m -- "$0" __in-namespace "$root" "$PWD" "${#binds[@]}" "${binds[@]}" "$@"
	;;
__in-namespace)
	# In run's private mount namespace: a throw-away overlay on the cached
	# root, so that CMD may install packages or create the paths it is
	# given, and the cache stays as mmdebstrap made it.
	root=$1 cwd=$2 n=$3
	shift 3
	binds=("${@:1:$n}")
	shift "$n"
	set -e
	mount --make-rprivate /
	w=$(mktemp -d)
	mount -t tmpfs tmpfs "$w"
	mkdir "$w/upper" "$w/work" "$w/root"
	mount -t overlay overlay -o "lowerdir=$root,upperdir=$w/upper,workdir=$w/work" "$w/root"
	r=$w/root
	mount -t proc proc "$r/proc"
	mount --rbind /dev "$r/dev"
	mount --rbind /sys "$r/sys"
	mount -t tmpfs tmpfs "$r/tmp"
	# Shortest first: a tree before what is inside it.
	while IFS= read -r b; do
		mkdir -p "$r$b"
		mount --rbind "$b" "$r$b"
	done < <(printf '%s\n' "${binds[@]}" | awk '{ print length($0), $0 }' | sort -n | cut -d' ' -f2-)
	set +e
	# shellcheck disable=SC2016 # expanded by the shell in the chroot
	exec chroot "$r" /bin/sh -c 'cd "$0" && exec "$@"' "$cwd" "$@"
	;;
*)
	sed -n '4,55p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# check-install.sh: the install test (make check-install). From the source
# tree to `module load mrnotify` on a fresh Debian 12 node, as
# docs/deploying.md describes it:
#  1. dpkg-buildpackage -us -uc -b builds the packages (and again at the next
#     version, for the upgrade); lintian checks them;
#  2. a fresh Debian 12 root made by mmdebstrap (tests/harness/install-root.sh,
#     cached outside the tree), used through a throw-away overlay;
#  3. dpkg -i the packages there: DKMS builds mrnotify.ko against the root's
#     kernel headers; the -dev package builds a program (mrn_holder);
#  4. in a chroot of it on the host (no device: a node without the module):
#     host-checks.sh;
#  5. a qemu guest booting the root's kernel on the root: guest-checks.sh
#     (the installed module, library, component, plugin, mrnotify-check and
#     modulefiles), then guest-upgrade.sh (an upgrade while a job holds the
#     device open);
#  6. in a chroot again: removal-checks.sh (every configuration the docs
#     give applied, every package purged, then an Open MPI job and a UCX
#     program as on a node that never had mrnotify).
# Every step's time is printed (cold and warm runs).
#
# Usage: check-install.sh --srcdir DIR --builddir DIR
# Environment: MRNOTIFY_STACKS_DIR, MRNOTIFY_STACKS=skip (see
# tests/harness/install-root.sh): a root that cannot be made is a SKIP (exit 77).
# Results: BUILDDIR/tests/install-results (host.log, guest/N.out).
set -u -o pipefail

prog=$(basename "$0")
lane_help=4,24
# say, timed, lane_args
# shellcheck source=../harness/script-lib.sh
. "$(dirname "$0")/../harness/script-lib.sh"
lane_args "$@"
[ ${#lane_rest[@]} -eq 0 ] || { say "usage: $prog --srcdir DIR --builddir DIR"; exit 2; }
here=$srcdir/tests/install
results=$builddir/tests/install-results

if [ -z "${MRN_INSTALL_NS:-}" ]; then
	[ "$(id -u)" -eq 0 ] || { say "SKIP: needs root (dpkg in a chroot, mounts)"; exit 77; }
	t_all=$(date +%s)
	rm -rf "$results" && mkdir -p "$results" || exit 1
	# Mounts (the overlay root, its /proc and /dev) vanish with this
	# namespace, whatever happens.
	MRN_INSTALL_NS=1 unshare -m -- "$0" --srcdir "$srcdir" --builddir "$builddir"
	rc=$?
	say "total: $(($(date +%s) - t_all)) s"
	exit $rc
fi
mount --make-rprivate /

# shellcheck source=tests/harness/tap.sh
. "$srcdir/tests/harness/tap.sh"
# The checks made here, as TAP, in host.log too.
tap_log=$results/host.log

# --- 1. the packages, at this version and the next -----------------------------

v1=$("$srcdir/debian/check-version" --print) || exit 1
v2=$(echo "$v1" | awk -F. -v OFS=. '{ $NF = $NF + 1; print }')
debcache=$builddir/tests/install-debs
mkdir -p "$debcache"

# The source files (tracked and new, not ignored), as a clean clone has them.
files() { git -C "$srcdir" ls-files -co --exclude-standard -z; }
build_debs() { # $1: version, $2: output folder
	local ver=$1 out=$2 key work
	# Keyed by what goes into the packages: every file but this test's own.
	key=$( (cd "$srcdir" && files | grep -zv '^tests/install/' | xargs -0 md5sum; echo "$ver") |
		md5sum | cut -c1-12)
	if [ -e "$debcache/$key/.complete" ]; then
		say "packages $ver: cached ($debcache/$key)"
	else
		# One folder a version, the same every run: the compiler cache
		# (quickstart.sh) then finds the objects of unchanged sources,
		# whose command lines name the folder (-ffile-prefix-map).
		work=$debcache/build-$ver
		rm -rf "$work" && mkdir -p "$work/src" || return 1
		(cd "$srcdir" && files | cpio -0pdm --quiet "$work/src") || return 1
		if [ "$ver" != "$v1" ]; then
			sed -i "s/^AC_INIT(\[mrnotify\], \[$v1\]/AC_INIT([mrnotify], [$ver]/" "$work/src/configure.ac"
			(cd "$work/src" && debian/check-version --update "Upgrade test build.") || return 1
		fi
		(cd "$work/src" && DEB_BUILD_OPTIONS="nocheck parallel=2" nice dpkg-buildpackage -us -uc -b) \
			>"$results/build-$ver.log" 2>&1 || {
			tail -n 30 "$results/build-$ver.log"
			rm -rf "$work"
			return 1
		}
		rm -rf "${debcache:?}/$key" && mkdir -p "$debcache/$key" &&
			mv "$work"/*.deb "$work"/*.changes "$debcache/$key/" && : >"$debcache/$key/.complete"
		rm -rf "$work"
	fi
	rm -rf "$out" && mkdir -p "$out" && cp "$debcache/$key"/*.deb "$debcache/$key"/*.changes "$out/"
}
command -v git >/dev/null && git -C "$srcdir" rev-parse >/dev/null 2>&1 ||
	{ skip "the install test builds packages from a git checkout"; finish; }
command -v dpkg-buildpackage >/dev/null || { fail "dpkg-buildpackage is missing (dpkg-dev)"; finish; }
# One version: debian/changelog must say configure.ac's. The control: a
# copy whose AC_INIT says another version fails the check (and so the build).
vcheck() { # $1: version to put in AC_INIT of a copy; prints check-version's status
	local t
	t=$(mktemp -d) && mkdir "$t/debian" &&
		cp "$srcdir/configure.ac" "$t/" && cp "$srcdir/debian/changelog" "$srcdir/debian/check-version" "$t/debian/" &&
		sed -i "s/^AC_INIT(\[mrnotify\], \[[^]]*\]/AC_INIT([mrnotify], [$1]/" "$t/configure.ac" &&
		"$t/debian/check-version" 2>/dev/null
	echo $?
	rm -rf "$t"
}
check "debian/changelog's version is configure.ac's ($v1)" [ "$(vcheck "$v1")" = 0 ]
check "control: another version in AC_INIT fails debian/check-version" [ "$(vcheck 99.0.0)" = 1 ]
timed "dpkg-buildpackage $v1" build_debs "$v1" "$results/debs-$v1"
check "dpkg-buildpackage -us -uc -b ($v1)" test -e "$results/debs-$v1/mrnotify-dkms_${v1}_all.deb"
timed "dpkg-buildpackage $v2" build_debs "$v2" "$results/debs-$v2"
check "dpkg-buildpackage -us -uc -b ($v2, for the upgrade)" test -e "$results/debs-$v2/mrnotify-dkms_${v2}_all.deb"
[ $tap_failed -eq 0 ] || finish
if command -v lintian >/dev/null; then
	# The binary packages (the .changes would want the .buildinfo too).
	timed "lintian" lintian --fail-on error,warning --pedantic -I "$results/debs-$v1"/*.deb \
		>"$results/lintian.log" 2>&1
	rc=$?
	sed 's/^/    lintian: /' "$results/lintian.log"
	check "lintian: no errors or warnings (overrides carry their reasons)" [ $rc -eq 0 ]
else
	fail "lintian is missing"
fi

# --- 2. the fresh Debian 12 root ------------------------------------------------

timed "the Debian 12 root (cached)" "$srcdir/tests/harness/install-root.sh" fetch
rc=$?
[ $rc -eq 3 ] && { skip "the Debian 12 root could not be made (tests/harness/install-root.sh)"; finish; }
[ $rc -eq 0 ] || { fail "tests/harness/install-root.sh fetch"; finish; }
root=$("$srcdir/tests/harness/install-root.sh" path) || exit 1
envm=$(dirname "$root")/bookworm-environment-modules/root
rel=$(ls "$root/lib/modules" | sort -V | tail -n 1)

w=$(mktemp -d)
mount -t tmpfs tmpfs "$w" && mkdir "$w/upper" "$w/work" "$w/root" &&
	mount -t overlay overlay -o "lowerdir=$root,upperdir=$w/upper,workdir=$w/work" "$w/root" ||
	{ fail "cannot make an overlay of $root"; finish; }
r=$w/root
mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" && mount -t tmpfs tmpfs "$r/tmp" ||
	{ fail "cannot mount /proc, /dev, /tmp in the root"; finish; }
in_root() { chroot "$r" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# --- 3. install ---------------------------------------------------------------------

mkdir -p "$r/var/tmp/mrn-debs" "$r/opt/mrn-test"
# Every package but the debug symbols.
for v in old new; do
	mkdir -p "$r/var/tmp/mrn-debs/$v"
	d=$results/debs-$([ $v = old ] && echo "$v1" || echo "$v2")
	find "$d" -name '*.deb' ! -name '*-dbgsym_*' -exec cp {} "$r/var/tmp/mrn-debs/$v/" \;
done
install_v1() { in_root sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i /var/tmp/mrn-debs/old/*.deb'; }
timed "dpkg -i (DKMS builds the module for $rel)" install_v1 >"$results/install.log" 2>&1
rc=$?
sed 's/^/    /' "$results/install.log" | tail -n 30
check "dpkg -i of every package in a fresh Debian 12 root" [ $rc -eq 0 ]
check "DKMS built and installed mrnotify $v1 for the root's kernel $rel" \
	sh -c "chroot '$r' dkms status mrnotify | grep -q '$v1.*$rel.*installed'"
check "the module is in /lib/modules/$rel/updates/dkms" \
	sh -c "ls '$r/lib/modules/$rel/updates/dkms/' | grep -q '^mrnotify\.ko'"
cp "$here"/*.sh "$srcdir/tests/harness/tap.sh" "$srcdir/tests/harness/without-device.sh" "$here/mrn_holder.cc" "$r/opt/mrn-test/" && cp -a "$envm" "$r/opt/mrn-test/environment-modules"
check "libmrnotify-dev: a program builds against the installed header and library" \
	in_root g++ -std=c++17 -Wall -Wextra -Werror -O2 -o /opt/mrn-test/mrn_holder \
	/opt/mrn-test/mrn_holder.cc -lmrnotify

# --- 4. a node without the device (the host's chroot) -----------------------------

in_root bash /opt/mrn-test/host-checks.sh >"$results/host-checks.log" 2>&1
rc=$?
show "$results/host-checks.log"
check "host (no device): host-checks.sh" [ $rc -eq 0 ]

# --- 5. the guest: the installed module, then the upgrade ----------------------------

umount -l "$r/proc" "$r/dev" "$r/tmp"
mpi_test=$builddir/tests/mca/mpi_rcache_test
[ -x "$mpi_test" ] || make -C "$builddir/tests/mca" mpi_rcache_test >/dev/null 2>&1
[ -x "$mpi_test" ] || { fail "no $mpi_test (configure found no Open MPI?)"; finish; }
timed "guest: installed pieces, then the upgrade" \
	"$srcdir/tests/harness/run-in-guest.sh" --root "$r" --release "$rel" --results "$results/guest" \
	--timeout 3000 --test-timeout 1500 --cwd "$here" --bind "$srcdir/tests/harness" \
	--bind "$(dirname "$mpi_test")" \
	"bash guest-checks.sh $v1 $mpi_test" \
	"bash guest-upgrade.sh $v1 $v2 /var/tmp/mrn-debs/new /opt/mrn-test/mrn_holder"
check "guest: the installed pieces work, and survive an upgrade (guest/1.out, guest/2.out)" [ $? -eq 0 ]

# --- 6. removal: every package purged after every configuration the docs give ------

mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" && mount -t tmpfs tmpfs "$r/tmp" ||
	{ fail "cannot mount /proc, /dev, /tmp in the root again"; finish; }
cp "$mpi_test" "$r/opt/mrn-test/"
in_root bash /opt/mrn-test/removal-checks.sh "/opt/mrn-test/$(basename "$mpi_test")" \
	>"$results/removal-checks.log" 2>&1
rc=$?
show "$results/removal-checks.log"
check "removal (no device): removal-checks.sh" [ $rc -eq 0 ]
finish

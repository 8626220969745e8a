#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# ucx-from-source.sh: the UCX plugin against a UCX release that no Debian
# root has (the upstream tags 1.19 to 1.22, or a newer tree), outside CI:
#   1. builds UCX from SOURCE (an unpacked openucx/ucx tree at a tag, with
#      verbs and rdmacm) in a chroot of the Debian 13 root, installed under
#      $MRNOTIFY_UCX_DIR (default /opt/mrnotify-ucx)/ucx-VERSION, never in
#      the source tree (a folder the guest can bind: the Debian 13 root's
#      /opt is empty, its /var/cache is not);
#   2. configures and builds this project against it there, in
#      BUILDDIR/ucx-VERSION (configure's UCX is that one);
#   3. runs the plugin's host tests there, and its guest tests (cache, xfer,
#      smoke, thp: the storm of stale hits and corrupted transfers with their
#      negative controls) in a guest booting Debian 13's kernel on that root
#      with rxe0, that UCX first on the library path.
# It prints the tests' results and the UCX commit, for docs/ucx.md.
#
# Usage: ucx-from-source.sh --srcdir DIR --builddir DIR --ucx-source DIR
# The stacks cache must hold the Debian 13 root (tests/harness/stacks.sh
# fetch 6.12). A UCX tree: git -C UCX-CLONE archive vX.Y.Z | tar -x -C DIR.
set -u -o pipefail
prog=$(basename "$0")
srcdir= builddir= ucx_src=
while [ $# -gt 0 ]; do
	case $1 in
	--srcdir) srcdir=$(readlink -f "$2"); shift 2 ;;
	--builddir) builddir=$(readlink -f "$2"); shift 2 ;;
	--ucx-source) ucx_src=$(readlink -f "$2"); shift 2 ;;
	-h|--help) sed -n '4,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$srcdir" ] && [ -n "$builddir" ] && [ -r "$ucx_src/configure.ac" ] ||
	{ echo "usage: $prog --srcdir DIR --builddir DIR --ucx-source DIR" >&2; exit 2; }
stacks=$srcdir/tests/harness/stacks.sh
cache=${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}
"$stacks" fetch 6.12 || { echo "$prog: no Debian 13 root" >&2; exit 1; }
eval "$("$stacks" env 6.12)"

# The version UCX's configure.ac declares (ucx_ver_major.ucx_ver_minor.patch).
ver=$(sed -n 's/^define(\[ucx_ver_\(major\|minor\|patch\)\], \([0-9]*\)).*/\2/p' "$ucx_src/configure.ac" |
	paste -sd.)
[ -n "$ver" ] || { echo "$prog: no version in $ucx_src/configure.ac" >&2; exit 1; }
prefix=${MRNOTIFY_UCX_DIR:-/opt/mrnotify-ucx}/ucx-$ver
b=$builddir/ucx-$ver
mkdir -p "$b" || exit 1
in_root() { # DIR CMD...: run CMD in the Debian 13 chroot, in DIR
	local d=$1
	shift
	(cd "$d" && nice "$stacks" run 6.12 --bind "$srcdir" --bind "$ucx_src" --bind "$cache" \
		--bind "$STACK_OMPI_SOURCE" --bind "${prefix%/*}" "$@")
}

if [ ! -e "$prefix/.complete" ]; then
	echo "$prog: building UCX $ver into $prefix"
	rm -rf "$prefix" && mkdir -p "$prefix" || exit 1
	in_root "$ucx_src" sh -c "./autogen.sh && ./configure --prefix='$prefix' --disable-debug \
		--disable-assertions --disable-params-check --enable-mt --with-verbs --with-rdmacm \
		--without-cuda --without-rocm --without-ze --without-java --without-go \
		--disable-doxygen-doc && make -j2 && make install" >"$b/ucx-build.log" 2>&1 ||
		{ tail -n 30 "$b/ucx-build.log"; echo "$prog: UCX $ver did not build ($b/ucx-build.log)" >&2; exit 1; }
	: >"$prefix/.complete"
fi

echo "$prog: the project against UCX $ver ($b)"
env_ucx="PKG_CONFIG_PATH=$prefix/lib/pkgconfig LD_LIBRARY_PATH=$prefix/lib PATH=$prefix/bin:/usr/sbin:/usr/bin:/sbin:/bin"
in_root "$b" env $env_ucx "$srcdir/configure" --enable-werror \
	--with-ompi-source="$STACK_OMPI_SOURCE" \
	--with-kernel-build="/usr/src/linux-headers-$STACK_RELEASE" \
	--with-kernel-image="/boot/vmlinuz-$STACK_RELEASE" >"$b/configure.log" 2>&1 &&
	grep -q "UCX plugin .* yes (for UCX $ver" "$b/configure.log" ||
	{ sed -n '/configured$/,$p' "$b/configure.log"; echo "$prog: configure did not take UCX $ver" >&2; exit 1; }
in_root "$b" env $env_ucx make -j2 >"$b/make.log" 2>&1 ||
	{ grep -E 'error' "$b/make.log" | head; echo "$prog: build failed ($b/make.log)" >&2; exit 1; }
grep 'check-entries.sh:' "$b/make.log"
status=0
in_root "$b" env $env_ucx make -C tests check TESTS="ucx/ucx-host-tests.sh ucx/test_entry_check.sh" \
	>"$b/check.log" 2>&1
grep -E '^(# (TOTAL|PASS|FAIL)|FAIL:)' "$b/check.log" | head -n 8
grep -q '^# FAIL: *0$' "$b/check.log" || status=1

in_root "$b" env $env_ucx make -s -C tests guest-commands.list >/dev/null 2>&1 || exit 1
mapfile -t cmds < <(grep -E 'ucx-guest-tests.* cache xfer smoke thp' "$b/tests/guest-commands.list")
mapfile -t flags <"$b/tests/guest-flags.list"
# The guest sees the same paths; LD_LIBRARY_PATH puts this UCX first for
# every program, mpirun's ranks included.
nice "$srcdir/tests/harness/run-in-guest.sh" --root "$STACK_ROOT" \
	--modules-root "$STACK_MODULES_ROOT" --release "$STACK_RELEASE" \
	--kernel-image "$STACK_IMAGE" "${flags[@]}" --cwd "$b/tests" --bind "$srcdir" --bind "$b" \
	--bind "$prefix" --test-timeout 1500 --timeout 3000 --quiet --results "$b/guest-results" \
	"env LD_LIBRARY_PATH=$prefix/lib PATH=$prefix/bin:/usr/sbin:/usr/bin:/sbin:/bin ${cmds[0]}" ||
	status=1
grep -E '^(ok|not ok)' "$b"/guest-results/1.out
echo "$prog: UCX $ver from $ucx_src: $(grep -c '^ok' "$b/guest-results/1.out") ok, $(grep -c '^not ok' "$b/guest-results/1.out") not ok"
exit $status

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# ucx-upstream-check.sh: the UCX patch of ucx-plugin/upstream/, outside CI.
#   1. unpacks TAG (default v1.18.1, Debian 13's release) from a clone of
#      openucx/ucx into $MRNOTIFY_STACKS_DIR/ucx-patched/ucx-TAG and
#      applies the patch there (never in this tree);
#   2. builds that UCX in a chroot of the Debian 13 root, installed under
#      $MRNOTIFY_UCX_DIR (default /opt/mrnotify-ucx)/ucx-VERSION-ext;
#   3. builds ucx-plugin/upstream/ext_validity_test.c against it and runs
#      it with the external source set (a replaced buffer must miss, in
#      UCP's inline lookup and in ucs_rcache_get) and without (the negative
#      control: the old region comes back).
#   4. with --guest BUILDDIR (a build of this tree in the Debian 13 root,
#      as make check-debian13 leaves in _build/debian13, with mrnotify.ko
#      and the UCX tests built): boots Debian 13's kernel on that root with
#      rxe0 and runs ucx-guest-tests.sh's hook group against the patched
#      UCX (the plugin without entry points, fresh through UCX's hook, and
#      stale or corrupt with it turned off), then, on the root's stock UCX,
#      that plugin's stale control and the plugin itself.
# With --check-only it only says whether the patch applies to TAG.
#
# Usage: ucx-upstream-check.sh --srcdir DIR --ucx-git CLONE [--tag TAG]
#                              [--check-only] [--guest BUILDDIR]
set -u -o pipefail
prog=$(basename "$0")
srcdir= git= tag=v1.18.1 check_only=no guest=
while [ $# -gt 0 ]; do
	case $1 in
	--srcdir) srcdir=$(readlink -f "$2"); shift 2 ;;
	--ucx-git) git=$(readlink -f "$2"); shift 2 ;;
	--tag) tag=$2; shift 2 ;;
	--check-only) check_only=yes; shift ;;
	--guest) guest=$(readlink -f "$2"); shift 2 ;;
	-h|--help) sed -n '4,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$prog: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$srcdir" ] && [ -n "$git" ] || { echo "usage: $prog --srcdir DIR --ucx-git CLONE [--tag TAG] [--check-only]" >&2; exit 2; }
# The patch's forms: 1.18 and 1.19 (a queue of pending invalidations, a
# pthread rwlock on the page table); 1.20.1 (the queue, a spinning rwlock);
# 1.21 on (an interval tree, not a queue: the -v1.22 form).
case $tag in
v1.1[0-9].*) patch=$srcdir/ucx-plugin/upstream/0001-ucs-rcache-external-validity-source.patch ;;
v1.20.*) patch=$srcdir/ucx-plugin/upstream/0001-ucs-rcache-external-validity-source-v1.20.patch ;;
*) patch=$srcdir/ucx-plugin/upstream/0001-ucs-rcache-external-validity-source-v1.22.patch ;;
esac
cache=${MRNOTIFY_STACKS_DIR:-/var/cache/mrnotify-stacks}
tree=$cache/ucx-patched/ucx-${tag#v}

if [ $check_only = yes ]; then
	t=$(mktemp -d) && trap 'rm -rf "$t"' EXIT
	git -C "$git" archive "$tag" src/ucs | tar -x -C "$t" || exit 1
	if (cd "$t" && patch -p1 --dry-run -s <"$patch" >/dev/null); then
		echo "$prog: the patch applies to $tag"
	else
		echo "$prog: the patch does not apply to $tag"
		exit 1
	fi
	exit 0
fi

# The tree and the build are kept for the patch they were made with: a
# changed patch makes both anew.
sum=$(md5sum <"$patch" | cut -d' ' -f1)
if [ "$(cat "$tree/.patched" 2>/dev/null)" != "$sum" ]; then
	rm -rf "$tree" && mkdir -p "$tree" || exit 1
	git -C "$git" archive "$tag" | tar -x -C "$tree" || exit 1
	(cd "$tree" && patch -p1 -s <"$patch") || { echo "$prog: the patch does not apply to $tag" >&2; exit 1; }
	echo "$sum" >"$tree/.patched"
fi
ver=$(sed -n 's/^define(\[ucx_ver_\(major\|minor\|patch\)\], \([0-9]*\)).*/\2/p' "$tree/configure.ac" | paste -sd.)
prefix=${MRNOTIFY_UCX_DIR:-/opt/mrnotify-ucx}/ucx-$ver-ext
stacks=$srcdir/tests/harness/stacks.sh
"$stacks" fetch 6.12 || { echo "$prog: no Debian 13 root" >&2; exit 1; }
mkdir -p "$prefix" || exit 1
in_root() { (cd "$tree" && nice "$stacks" run 6.12 --bind "$srcdir" --bind "$tree" --bind "${prefix%/*}" "$@"); }

if [ "$(cat "$prefix/.complete" 2>/dev/null)" != "$sum" ]; then
	echo "$prog: building UCX $ver with the patch into $prefix"
	in_root sh -c "./autogen.sh && ./configure --prefix='$prefix' --disable-debug \
		--disable-assertions --disable-params-check --enable-mt --with-verbs --with-rdmacm \
		--without-cuda --without-rocm --without-ze --without-java --without-go \
		--disable-doxygen-doc && make -j2 && make install" >"$tree/build.log" 2>&1 ||
		{ tail -n 30 "$tree/build.log"; echo "$prog: UCX $ver did not build ($tree/build.log)" >&2; exit 1; }
	echo "$sum" >"$prefix/.complete"
fi

# rcache.inl and rcache_int.h come from the tree: UCX installs neither.
test_bin=$tree/ext_validity_test
in_root gcc -std=gnu11 -O2 -Wall -Wextra -Werror -isystem "$prefix/include" -isystem "$tree/src" \
	-o "$test_bin" "$srcdir/ucx-plugin/upstream/ext_validity_test.c" \
	-L"$prefix/lib" -lucs -lucm || { echo "$prog: the test did not build" >&2; exit 1; }
status=0
for mode in --with-source --without-source; do
	out=$(in_root env LD_LIBRARY_PATH="$prefix/lib" "$test_bin" "$mode" 2>&1)
	rc=$?
	echo "$out"
	if [ $rc -eq 0 ]; then
		echo "ok - ext_validity_test $mode (UCX $ver, $tag + the patch)"
	else
		echo "not ok - ext_validity_test $mode (UCX $ver, $tag + the patch): exit $rc"
		status=1
	fi
done
[ -n "$guest" ] || exit $status

# The plugin against the patched UCX in a guest.
eval "$("$stacks" env 6.12)" || exit 1
g=$guest
for f in "$g/kernel/mrnotify.ko" "$g/ucx-plugin/.libs/libmrnotify-ucx.so" \
	"$g/tests/ucx/.libs/libmrnotify-ucx-noentry.so" "$g/tests/ucx/ucx_stale"; do
	[ -e "$f" ] || { echo "$prog: no $f (make check-debian13, or make -C tests check in the root)" >&2; exit 1; }
done
tests="/bin/bash $srcdir/tests/ucx/ucx-guest-tests.sh --plugin $g/ucx-plugin/.libs/libmrnotify-ucx.so \
--run $g/ucx-plugin/mrnotify-ucx-run --noentry $g/tests/ucx/.libs/libmrnotify-ucx-noentry.so \
--libdir $g/lib/.libs --bin $g/tests/ucx --benchdir $g/bench"
"$srcdir/tests/harness/run-in-guest.sh" --root "$STACK_ROOT" --modules-root "$STACK_MODULES_ROOT" \
	--release "$STACK_RELEASE" --kernel-image "$STACK_IMAGE" --module "$g/kernel/mrnotify.ko" \
	--rxe --cwd "$g/tests" --bind "$srcdir" --bind "$g" --bind "${prefix%/*}" \
	--results "$g/ucx-hook-results" \
	"env LD_LIBRARY_PATH=$prefix/lib $tests hook" \
	"$tests cache.ucp_no_entry_checks_shows_stale_hit cache.ucp_plugin_raw_syscalls" || status=1
exit $status

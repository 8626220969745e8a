#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The debug-kernel lane builds its negative control by applying
# negative-controls.patch to the driver; that lane only runs where a debug
# kernel is cached, so check here, on every run, that the patch still
# applies cleanly to the driver's sources and still contains both bugs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/tap.sh"
top=$(cd "$here/../.." && pwd)
patch_file=$here/negative-controls.patch
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernel" && cp "$top"/kernel/*.c "$tmp/kernel/"
if (cd "$tmp" && patch -p1 --no-backup-if-mismatch -s <"$patch_file") >"$tmp/patch.log" 2>&1; then
	pass "negative-controls.patch applies to kernel/*.c"
else
	show "$tmp/patch.log"
	fail "negative-controls.patch no longer applies to kernel/*.c: update it"
fi
check "the control sleeps under the notifier's spinlocks" \
	grep -q 'might_sleep();' "$tmp/kernel/mrn_notifier.c"
check "the control leaks a charge when REGISTER's allocation fails" \
	grep -q "the user's charge is leaked" "$tmp/kernel/mrn_dev.c"
check "the driver itself has no negative-control code" \
	sh -c "! grep -q 'might_sleep();\|NEGATIVE_CONTROL' '$top'/kernel/*.c"
finish

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The UCX plugin's aarch64 hit paths (ucx-plugin/entry_aarch64.S):
# test_trampolines.c built for aarch64 with Debian's cross compiler
# (gcc-aarch64-linux-gnu, static) and run under qemu-aarch64 (qemu-user).
# Its TAP results are this test's; skipped, with the reason, without them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/tap.sh"
plugin=$here/../../ucx-plugin
cc=aarch64-linux-gnu-gcc
if ! command -v "$cc" >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
	skip "aarch64 trampolines" "needs $cc (gcc-aarch64-linux-gnu) and qemu-aarch64 (qemu-user)"
	finish
fi
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
# The cross compiler without its C library (libc6-dev-arm64-cross is only
# recommended by gcc-aarch64-linux-gnu) cannot build any program: that is
# the machine, not our code, so it is a skip; anything else failing below is ours.
printf '#include <stdint.h>\nint main(void) { return 0; }\n' >"$tmp/probe.c"
if ! "$cc" -static "$tmp/probe.c" -o "$tmp/probe" >/dev/null 2>&1; then
	skip "aarch64 trampolines" "$cc cannot build a static C program (needs libc6-dev-arm64-cross)"
	finish
fi
# With branch protection, as Debian builds for arm64: "bti c" at each entry.
if ! "$cc" -O2 -static -fno-omit-frame-pointer -mbranch-protection=standard -Wall -Wextra \
	-Werror -I"$plugin" -DMRN_UCX_ENTRY_CHECKS=1 "$here/test_trampolines.c" \
	"$plugin/entry_aarch64.S" -o "$tmp/t" >"$tmp/cc.log" 2>&1; then
	fail "aarch64 trampolines build"
	sed 's/^/# /' "$tmp/cc.log"
	finish
fi
"$cc" -c -mbranch-protection=standard -I"$plugin" -DMRN_UCX_ENTRY_CHECKS=1 \
	"$plugin/entry_aarch64.S" -o "$tmp/e.o" 2>/dev/null
if aarch64-linux-gnu-readelf -n "$tmp/e.o" 2>/dev/null | grep -q 'AArch64 feature: BTI, PAC'; then
	pass "aarch64: the object says it supports BTI and PAC, as the C objects do"
else
	fail "aarch64: the object says it supports BTI and PAC, as the C objects do"
fi
# The preloaded object's C side, which no other lane here builds for aarch64.
if "$cc" -c -O2 -fPIC -fvisibility=hidden -mbranch-protection=standard -Wall -Wextra -Werror \
	-I"$plugin" "$plugin/shim.c" -o "$tmp/shim.o" >"$tmp/shim.log" 2>&1; then
	pass "aarch64: the preloaded object's C side (shim.c) builds with -Werror"
else
	fail "aarch64: the preloaded object's C side (shim.c) builds with -Werror"
	sed 's/^/# /' "$tmp/shim.log"
fi
# The program's own TAP lines, renumbered after ours.
qemu-aarch64 "$tmp/t" >"$tmp/out" 2>&1
rc=$?
while IFS= read -r line; do
	case $line in
	"ok "*) pass "aarch64: ${line#ok [0-9]* - }" ;;
	"not ok "*) fail "aarch64: ${line#not ok [0-9]* - }" ;;
	esac
done <"$tmp/out"
[ $rc -eq 0 ] || fail "aarch64: the program exited $rc"
finish

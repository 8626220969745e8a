#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# trinity (Debian's syscall fuzzer) aimed at /dev/mrnotify: ioctl, mmap,
# munmap, madvise and close with random arguments, from two children, on a
# pool of fds opened on the device (trinity's "victim" path: its file fd
# provider, which trinity calls "pseudo", opens the device again and again
# with random flags). Run as root in the guest (trinity --dangerous: the
# guest is thrown away). Passes when trinity completes its calls and the
# device was open in it meanwhile (the module's debugfs "contexts" seen above
# zero); the guest harness fails the run on any oops, KASAN, lockdep or
# warning in the kernel log.
# Usage: mrn_trinity.sh [CALLS]   (default 20000). Prints TAP.
set -u
. "$(dirname "$0")/../harness/tap.sh"
calls=${1:-20000}
dev=/dev/mrnotify
ctxs=/sys/kernel/debug/mrnotify/contexts
command -v trinity >/dev/null 2>&1 || { skip "mrn_trinity" "no trinity (Debian package trinity)"; finish; }
[ -c $dev ] || { skip "mrn_trinity" "no $dev"; finish; }
[ -r $ctxs ] || { skip "mrn_trinity" "no $ctxs (debugfs)"; finish; }
# trinity writes its files in the current directory, and the guest's root is
# read-only. Without socket fds it does not build its socket cache (which
# takes minutes under emulation).
work=$(mktemp -d "${TMPDIR:-/var/tmp}/mrn-trinity.XXXXXX") || exit 2
watch=
trap '[ -n "$watch" ] && kill $watch 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 2
(
	max=0
	while :; do
		n=$(cat $ctxs 2>/dev/null || echo 0)
		[ "$n" -gt "$max" ] && max=$n && echo "$max" >"$work/max-contexts"
		sleep 1
	done
) &
watch=$!
start=$(date +%s)
trinity --dangerous -l off -q -N "$calls" -C 2 -s 1 \
	--disable-fds=sockets,perf,drm,timerfd,eventfd,epoll \
	-V $dev -c ioctl -c mmap -c munmap -c madvise -c close >"$work/log" 2>&1
rc=$?
ran=$(sed -n 's/^\[main\] Ran \([0-9]*\) syscalls.*/\1/p' "$work/log" | tail -n 1)
max=$(cat "$work/max-contexts" 2>/dev/null || echo 0)
grep '^\[main\] Ran ' "$work/log" | sed 's/^/# /'
note "mrn_trinity: exit $rc, ${ran:-0} calls in $(($(date +%s) - start)) s, at most $max context(s) of $dev open"
if [ $rc -ne 0 ] || [ "${ran:-0}" -lt "$calls" ]; then
	show "$work/log" 20
	fail "trinity completed its $calls calls (exit $rc, ${ran:-0} ran)"
else
	pass "trinity completed its $calls calls"
fi
check "$dev was open in trinity (at most $max contexts)" [ "$max" -gt 0 ]
finish

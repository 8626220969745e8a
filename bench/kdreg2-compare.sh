#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# kdreg2-compare.sh: mrnotify.ko beside HPE's kdreg2 on one question: does
# munmap() return before the monitor knows (bench/monitor_race.c)? For
# measuring only: kdreg2 is built from a source tree you give (a clone of
# HewlettPackard/shs-kdreg2), in a folder of its own, never in this tree,
# and nothing here ships or depends on it.
#
# Usage (from the build directory, after make):
#   ../bench/kdreg2-compare.sh KDREG2_SRC [ROUNDS]
# It copies (or clones) KDREG2_SRC to ${TMPDIR:-/var/tmp}/mrn-kdreg2, builds kdreg2.ko
# against the guest kernel's headers (the host's, as make check-guest) and
# the probe with kdreg2's header, boots the guest with both modules and runs
# the probe on each with 0, 1 and 2 threads that watch and unwatch ranges
# of their own through the same file descriptor.
set -u -o pipefail
src=${1:?usage: kdreg2-compare.sh KDREG2_SRC [ROUNDS]}
rounds=${2:-20000}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$PWD
[ -f "$build/kernel/mrnotify.ko" ] && [ -x "$build/bench/monitor_race" ] ||
	{ echo "kdreg2-compare.sh: run from a build directory after make (kernel/mrnotify.ko, bench/monitor_race)" >&2; exit 2; }
kbuild=$(sed -n 's/^KERNEL_BUILD = //p' "$build/kernel/Makefile")
[ -d "$kbuild" ] || { echo "kdreg2-compare.sh: no kernel build tree ($kbuild)" >&2; exit 2; }
work=${TMPDIR:-/var/tmp}/mrn-kdreg2
rm -rf "$work" && mkdir -p "$work" || exit 1
# A work tree is copied, a bare repository (a mirror) cloned.
if [ -f "$src/Makefile" ]; then cp -a "$src/." "$work/src"; else git clone -q "$src" "$work/src"; fi || exit 1
echo "== kdreg2 $(git -C "$work/src" log -1 --format='%h %cs %s' 2>/dev/null) against $kbuild"
make -C "$work/src" modules KDIR="$kbuild" >"$work/build.log" 2>&1 ||
	{ tail -n 20 "$work/build.log"; exit 1; }
gcc -O2 -Wall -Wextra -Werror -DMRN_PROBE_KDREG2 -I"$work/src/include" -I"$top/lib/include" \
	"$top/bench/monitor_race.c" -o "$work/monitor_race" -L"$build/lib/.libs" -lmrnotify -lpthread ||
	exit 1
cmds=()
for t in 0 1 2; do
	for m in mrnotify kdreg2; do
		cmds+=("LD_LIBRARY_PATH=$build/lib/.libs $work/monitor_race $m --rounds=$rounds --threads=$t")
	done
done
"$top/tests/harness/run-in-guest.sh" --kernel-build "$kbuild" --module "$build/kernel/mrnotify.ko" \
	--module "$work/src/kdreg2.ko" --bind "$work" --results "$work/results" "${cmds[@]}"
rc=$?
echo "== results"
cat "$work"/results/[0-9]*.out | grep '^monitor_race:'
exit $rc

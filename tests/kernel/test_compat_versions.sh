#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The kernel releases kernel/mrnotify_compat.h admits, on the host (no
# kernel tree needed): the header compiled against a stand-in
# <linux/version.h> for each release. Refused with a clear message: before
# 5.10, and 5.10.y before 5.10.113 (no fix of the race in
# mmu_interval_notifier_remove()); admitted from 5.10.113 on; a release
# newer than the newest tested says so at load (MRN_BEYOND_TESTED).
# COMPAT_H=FILE tests another copy of the header (the negative control: the
# header before the 5.10.113 gate admits 5.10.112).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/tap.sh"
compat=${COMPAT_H:-$here/../../kernel/mrnotify_compat.h}
cc=${CC:-cc}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/linux"
cat >"$t/linux/mm.h" <<'EOF'
typedef unsigned long vm_flags_t;
struct vm_area_struct { vm_flags_t vm_flags; };
static inline void vm_flags_mod(struct vm_area_struct *vma, vm_flags_t set, vm_flags_t clear)
{
	vma->vm_flags = (vma->vm_flags | set) & ~clear;
}
EOF
cat >"$t/linux/mmu_notifier.h" <<'EOF'
#include <stdbool.h>
struct mmu_notifier_range { struct vm_area_struct *vma; };
static inline int vma_is_anonymous(struct vm_area_struct *vma) { return !vma->vm_flags; }
EOF
cat >"$t/linux/nodemask.h" <<'EOF'
#define IS_ENABLED(option) 1
#define nr_node_ids 2
EOF
cat >"$t/linux/stringify.h" <<'EOF'
#define __stringify_1(x...) #x
#define __stringify(x...) __stringify_1(x)
EOF
cp "$compat" "$t/mrnotify_compat.h"

# build MAJOR MINOR SUBLEVEL BEYOND: the header compiles for that release,
# with MRN_BEYOND_TESTED equal to BEYOND; the compiler's output in $t/out.
build() {
	cat >"$t/linux/version.h" <<EOF
#define KERNEL_VERSION(a, b, c) (((a) << 16) + ((b) << 8) + ((c) > 255 ? 255 : (c)))
#define LINUX_VERSION_CODE KERNEL_VERSION($1, $2, $3)
EOF
	printf '#include "mrnotify_compat.h"\n_Static_assert(MRN_BEYOND_TESTED == %s, "MRN_BEYOND_TESTED");\n' "$4" >"$t/probe.c"
	$cc -fsyntax-only -I"$t" "$t/probe.c" >"$t/out" 2>&1
}

refused() { # MAJOR MINOR SUBLEVEL MESSAGE
	if build "$1" "$2" "$3" 0; then
		fail "$1.$2.$3 refused: it was admitted"
	elif grep -q "$4" "$t/out"; then
		pass "$1.$2.$3 refused: $(grep -o "error: .*$4[^\"]*" "$t/out" | head -n 1)"
	else
		fail "$1.$2.$3 refused, but without '$4'"
		show "$t/out"
	fi
}
admitted() { # MAJOR MINOR SUBLEVEL BEYOND
	if build "$@"; then
		pass "$1.$2.$3 admitted$([ "$4" = 1 ] && echo ", and said to be beyond the tested range")"
	else
		fail "$1.$2.$3 (beyond the tested range: $4)"
		show "$t/out"
	fi
}

refused 5 9 0 'needs Linux 5.10 or later'
refused 5 10 0 'needs 5.10.113+'
refused 5 10 112 'needs 5.10.113+'
admitted 5 10 113 0
admitted 5 10 223 0
admitted 6 1 0 0
admitted 6 12 0 0
admitted 7 3 4 0
admitted 7 4 0 1
admitted 8 0 0 1
finish

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# kernel-crash.sh SERIAL-LOG: print the first kernel crash a guest's console
# holds (from its first report line to the end of that report, at most 40
# lines), so that a failed run says what happened before the console's last
# lines (run-in-guest.sh prints those; a long call trace pushes the report's
# head out of them).
#
# A crash: an oops, a BUG, a general protection or double fault, a WARNING,
# a panic. Not a crash: the panic a guest's init (sh) causes when it exits
# after the "sysrq: Power Off" that ends every run.
#
# Exit status: 0 when there was a crash (printed), 1 when none, 2 on a
# usage error.
[ $# -eq 1 ] || { echo "usage: $0 SERIAL-LOG" >&2; exit 2; }
[ -r "$1" ] || exit 1
awk '
	/sysrq: Power Off/ { powered_off = 1 }
	!started && /Kernel panic - not syncing: Attempted to kill init/ && powered_off { next }
	!started && (/BUG: / || /Oops: / || /general protection fault/ || /double fault/ ||
		/kernel BUG at/ || /WARNING: CPU: / || /Kernel panic - not syncing/) {
		started = 1
	}
	# After the report'"'"'s end, only the panic it caused, if any.
	ended && !/Kernel panic|Kernel Offset|end Kernel panic/ { exit }
	started && n < 40 { print; n++ }
	started && /---\[ end / { ended = 1 }
	END { exit started ? 0 : 1 }
' "$1"

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Where a cache hit's time goes: profiles our hit path (cache_bench
# --profile, random order) with 1e2 and 1e6 entries under perf (Debian's
# linux-perf), and writes, per size, the functions and then the source
# lines that took the most samples, each line with its text.
#
#   bench/profile-hits.sh BUILDDIR [OUT]      (OUT default: standard output)
#
# The event is cpu-clock (a timer), because virtual machines often offer no
# hardware counters: a sample lands an instruction or two after the one
# that stalled, so read the figures by source line and by function, not by
# instruction. Run it on a quiet machine.
set -u -o pipefail
[ $# -ge 1 ] || { echo "usage: profile-hits.sh BUILDDIR [OUT]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
bench=$build/bench/cache_bench
top=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$bench" ] || { echo "profile-hits.sh: $bench is missing (make -C $build/bench)" >&2; exit 2; }
command -v perf >/dev/null || { echo "profile-hits.sh: perf is missing (apt-get install linux-perf)" >&2; exit 2; }
work=$(mktemp -d) || exit 2
trap 'rm -rf "$work"' EXIT
out=${2:-/dev/stdout}

{
	echo "# bench/profile-hits.sh, $(date -u +%Y-%m-%d), $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'),"
	echo "# $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) CPUs, Linux $(uname -r), load $(cut -d' ' -f1 /proc/loadavg)"
	for n in 100 1000000; do
		echo
		perf record -q -e cpu-clock -o "$work/$n.data" "$bench" --profile=$n,5 2>/dev/null ||
			{ echo "perf record failed"; exit 1; }
		echo "## $n entries, random order"
		echo "### functions (share of samples)"
		perf report -i "$work/$n.data" --stdio --sort symbol 2>/dev/null |
			grep -v '^#' | grep -v '^$' | awk '$1 + 0 >= 1.0' | sed 's/  *- *- *$//' >"$work/functions"
		cut -c1-110 "$work/functions"
		# Their short names (no return type, template or arguments).
		allow=$(sed -e 's/^.*\] //' -e 's/[(<].*//' -e 's/^.* //' "$work/functions" | tr '\n' ' ')
		echo "### source lines (share of each function's samples, 3 % or more)"
		# perf annotate prints, per function, a sorted summary of its source
		# lines and then the function's name in its disassembly header.
		perf annotate -i "$work/$n.data" --stdio -l 2>/dev/null | awk -v allow=" $allow " '
			/^Sorted summary/ { n = 0; insum = 1; next }
			insum && /^ Percent/ { insum = 0; next }
			insum && $1 + 0 >= 3.0 { lines[n++] = $1 " " $2; next }
			/^ *: *[0-9]+ +[0-9a-f]+ <.*>:$/ && n > 0 {
				name = $0; sub(/^ *: *[0-9]+ +[0-9a-f]+ </, "", name)
				sub(/>:$/, "", name); sub(/[(<].*$/, "", name); sub(/^.* /, "", name)
				if (index(allow, " " name " ")) {
					print "in " name ":"
					for (i = 0; i < n; i++) print lines[i]
				}
				n = 0
			}' | while read -r pct loc; do
			if [ "$pct" = in ]; then
				echo "$pct $loc"
				continue
			fi
			file=${loc%%:*} line=${loc##*:}
			src=$(find "$top/lib" "$top/bench" -name "$file" 2>/dev/null | head -n 1)
			text=
			[ -n "$src" ] && text=$(sed -n "${line}p" "$src" | sed 's/^[[:space:]]*//' | cut -c1-70)
			printf '  %6s%%  %-22s %s\n' "$pct" "$loc" "$text"
		done
	done
} >"$out"

#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Writes the lane table of the last `./quickstart.sh test` (BUILD/lanes.tsv)
# into tests/lanes/README.md, between its "lanes:" markers, naming the commit and
# the date (the README carries no generated timing). Run it after a whole
# run on a quiet machine.
# Usage: tests/harness/lanes-doc.sh [BUILD [CONDITIONS]]
#   BUILD defaults to _build; CONDITIONS (free text: which caches were
#   cold, what else ran) is printed under the table.
set -u -o pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
tsv=${1:-$top/_build}/lanes.tsv
conditions=${2:-}
[ -s "$tsv" ] || { echo "lanes-doc.sh: no $tsv: run ./quickstart.sh test first" >&2; exit 2; }
# The commit that ran: the build directory's own tree (a clone's _build),
# else this one.
commit=$(git -C "$(dirname "$tsv")" rev-parse --short HEAD 2>/dev/null ||
	git -C "$top" rev-parse --short HEAD)
day=$(date -u -r "$tsv" +%Y-%m-%d)

# Replaces what stands between "<!-- lanes: ... -->" and "<!-- lanes: end -->"
# in FILE with standard input.
replace_between() {
	local file=$1 body
	body=$(cat)
	BODY=$body awk '
		/<!-- lanes: end -->/ { skip = 0 }
		!skip { print }
		/<!-- lanes: generated/ { print ENVIRON["BODY"]; skip = 1 }
	' "$file" >"$file.new" && mv "$file.new" "$file"
}

awk -F '\t' -v commit="$commit" -v day="$day" -v conditions="$conditions" '
	NR == 1 { next }
	{ rows[NR] = $0; p += $3; f += $4; s += $5; t += $6 }
	END {
		printf "`./quickstart.sh test` at commit %s (%s), one lane after the other:\n\n", commit, day
		print "| lane | result | passed | failed | skipped | seconds |"
		print "|---|---|---|---|---|---|"
		for (i = 2; i <= NR; i++) {
			split(rows[i], c, "\t")
			printf "| %s | %s | %d | %d | %d | %d |\n", c[1], c[2], c[3], c[4], c[5], c[6]
		}
		printf "| **total** | | %d | %d | %d | %d (%.0f min) |\n", p, f, s, t, t / 60
		if (conditions != "") printf "\n%s\n", conditions
	}' "$tsv" | replace_between "$top/tests/lanes/README.md"

echo "lanes-doc.sh: tests/lanes/README.md updated from $tsv"

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# check-entries.sh: every public UCP function that the UCX headers being
# built against declare must be in one of entry_list.h's two lists: an entry
# point the plugin checks (MRN_UCX_ENTRIES), or one read and found to look
# nothing up (MRN_UCX_NO_LOOKUP). A function in neither fails the build: a
# new UCX may have added a way into UCP's cache that the plugin would miss.
#
# Usage: check-entries.sh --cc CC --list ENTRY_LIST_H -- CFLAGS...
# CFLAGS are UCX's (pkg-config ucx --cflags). The declarations come from
# the compiler itself (gcc -aux-info), for each public UCP header the
# include path has: ucp/api/ucp.h (with ucp_compat.h), ucpx.h and
# device/ucp_host.h (UCX 1.20 on).
set -u
prog=check-entries.sh
cc= list=
while [ $# -gt 0 ]; do
	case $1 in
	--cc) cc=$2; shift 2 ;;
	--list) list=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "$prog: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$cc" ] && [ -r "$list" ] && list=$(cd "$(dirname "$list")" && pwd)/$(basename "$list") || { echo "usage: $prog --cc CC --list ENTRY_LIST_H -- CFLAGS..." >&2; exit 2; }

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# The public functions: declared in a file under a ucp/api/ folder.
: >"$tmp/declared"
for h in ucp/api/ucp.h ucp/api/ucpx.h ucp/api/device/ucp_host.h; do
	printf '#include <%s>\n' "$h" >"$tmp/h.c"
	# A header this UCX does not have is not an error; ucp.h must be there.
	# shellcheck disable=SC2086 # the compiler and its flags are words
	if ! $cc "$@" -E "$tmp/h.c" >/dev/null 2>&1; then
		[ "$h" = ucp/api/ucp.h ] || continue
		echo "$prog: <$h> not found with: $*" >&2
		exit 1
	fi
	# shellcheck disable=SC2086
	$cc "$@" -aux-info "$tmp/aux" -c "$tmp/h.c" -o "$tmp/h.o" 2>"$tmp/err" || {
		cat "$tmp/err" >&2
		echo "$prog: <$h> does not compile" >&2
		exit 1
	}
	grep '/ucp/api/' "$tmp/aux" | sed -n 's/.*[ *]\(ucp_[A-Za-z0-9_]*\) (.*/\1/p' >>"$tmp/declared"
done
sort -u "$tmp/declared" -o "$tmp/declared"
[ -s "$tmp/declared" ] || { echo "$prog: no ucp_ function found in the headers" >&2; exit 1; }

# The two lists, expanded by the preprocessor.
{
	printf '#include "%s"\n' "$list"
	printf '#define MRN_ENTRY(n) ENTRY n\n#define MRN_NONE(n) NONE n\n'
	printf 'MRN_UCX_ENTRIES(MRN_ENTRY)\nMRN_UCX_NO_LOOKUP(MRN_NONE)\n'
} >"$tmp/l.c"
$cc -E -P "$tmp/l.c" | tr ' ' '\n' | awk '/^(ENTRY|NONE)$/ { kind = $0; next } kind != "" && /^ucp_/ { print kind, $0; kind = "" }' >"$tmp/listed"
entries=$(grep -c '^ENTRY ' "$tmp/listed")
[ "$entries" -gt 0 ] || { echo "$prog: no entry points in $list" >&2; exit 1; }
sed 's/^[A-Z]* //' "$tmp/listed" | sort -u >"$tmp/names"

unlisted=$(comm -23 "$tmp/declared" "$tmp/names")
n=$(wc -l <"$tmp/declared")
if [ -n "$unlisted" ]; then
	echo "$prog: the UCX headers declare public UCP functions that entry_list.h does not classify:" >&2
	echo "$unlisted" | sed 's/^/  /' >&2
	echo "$prog: read each in UCX's source: a function that can look a registration up in" >&2
	echo "UCP's cache (ucp_memh_get) or progress posted requests goes in MRN_UCX_ENTRIES," >&2
	echo "one that cannot in MRN_UCX_NO_LOOKUP" >&2
	exit 1
fi
in_use=$(grep '^ENTRY ' "$tmp/listed" | sed 's/^ENTRY //' | sort -u | comm -12 - "$tmp/declared" | wc -l)
echo "$prog: $n public UCP functions, each classified: $in_use of them checked entry points"

# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash
#
# script-lib.sh: what the build's shell scripts (the stacks, the test
# lanes) share. Sourced, never run; the script sets prog first.

say() { echo "$prog: $*" >&2; }
die() { say "$*"; exit 1; }

# Time one step; the line is what CI logs show for cold and warm runs.
timed() { # $1: label, rest: command
	local label=$1 t0 rc
	shift
	t0=$(date +%s)
	"$@"
	rc=$?
	say "$label: $(($(date +%s) - t0)) s$([ $rc -ne 0 ] && echo " (failed, exit $rc)")"
	return $rc
}

# The Debian mirror the machine uses (MRNOTIFY_MIRROR overrides).
mirror() {
	if [ -n "${MRNOTIFY_MIRROR:-}" ]; then
		echo "$MRNOTIFY_MIRROR"
		return
	fi
	local m
	m=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
		grep -v security | head -n 1)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $3 !~ /security/ { print $2; exit }' \
		/etc/apt/sources.list 2>/dev/null)
	echo "${m:-http://deb.debian.org/debian}"
}

# A test lane's options: --srcdir DIR --builddir DIR (both needed), -h or
# --help (prints the script's header comment, lines $lane_help, e.g. 4,17),
# then "--" or the first other word starts what lane_rest holds.
lane_args() {
	srcdir='' builddir='' lane_rest=()
	while [ $# -gt 0 ]; do
		case "$1" in
		--srcdir) srcdir=$(readlink -f "$2"); shift 2 ;;
		--builddir) builddir=$(readlink -f "$2"); shift 2 ;;
		--) shift; break ;;
		-h|--help) sed -n "${lane_help}p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
		*) break ;;
		esac
	done
	lane_rest=("$@")
	[ -n "$srcdir" ] && [ -n "$builddir" ] ||
		{ echo "$prog: --srcdir and --builddir are needed" >&2; exit 2; }
}

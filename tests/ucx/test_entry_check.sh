#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ucx-plugin/check-entries.sh, which the build runs: every public UCP
# function of the UCX headers here is classified by entry_list.h, and a
# header that declares one the list does not know (what a new UCX release
# would bring) fails the check, naming it (its negative control).
set -u
. "$(dirname "$0")/../harness/tap.sh"

src=$(cd "$(dirname "$0")/../.." && pwd)
check=$src/ucx-plugin/check-entries.sh
list=$src/ucx-plugin/entry_list.h
# make check passes configure's (AM_TESTS_ENVIRONMENT); by hand, the system's.
cc=${CC:-cc}
cflags=${MRN_UCX_CFLAGS-$(pkg-config --cflags ucx 2>/dev/null)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck disable=SC2086 # the flags are words
if sh "$check" --cc "$cc" --list "$list" -- $cflags >"$tmp/out" 2>&1; then
	pass "every public UCP function of this UCX is classified"
else
	fail "every public UCP function of this UCX is classified"
fi
sed 's/^/# /' "$tmp/out"

# A UCX that adds a send function: the same headers with one declaration more.
mkdir -p "$tmp/inc/ucp/api"
printf '#include_next <ucp/api/ucp.h>\nucs_status_ptr_t ucp_tag_send_newer_nbx(ucp_ep_h ep, const void *buffer, size_t count);\n' \
	>"$tmp/inc/ucp/api/ucp.h"
# shellcheck disable=SC2086
if sh "$check" --cc "$cc" --list "$list" -- -I"$tmp/inc" $cflags >"$tmp/out" 2>&1; then
	fail "a UCP function the list does not classify fails the check"
elif grep -q '^  ucp_tag_send_newer_nbx$' "$tmp/out"; then
	pass "a UCP function the list does not classify fails the check, naming it"
else
	fail "a UCP function the list does not classify fails the check, naming it"
fi
sed 's/^/# /' "$tmp/out"
finish

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ucx-perftest-preloaded.sh BUILDDIR: UCX's own ucx_perftest, a server and a
# client on this machine, over shared memory and over tcp, with the plugin
# of BUILDDIR preloaded into both, then the same without it. No
# /dev/mrnotify is needed: without it the plugin stays inactive, but it is
# still what the program calls for each UCP entry point it wraps (the
# binding is checked with LD_DEBUG), and its trampoline must hand every
# argument on to UCX untouched. Used where the module cannot be loaded: the
# arm64 lane (tests/lanes/check-arm64.sh), under qemu-aarch64. TAP output.
set -u
. "$(dirname "$0")/../harness/tap.sh"

top=${1:?usage: ucx-perftest-preloaded.sh BUILDDIR}
plugin=$top/ucx-plugin/.libs/libmrnotify-ucx.so
export LD_LIBRARY_PATH=$top/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset LD_PRELOAD UCX_MRNOTIFY_ENABLE
if [ ! -r "$plugin" ] || ! command -v ucx_perftest >/dev/null; then
	skip "ucx_perftest with the plugin" "needs $plugin and ucx_perftest (ucx-utils)"
	finish
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$((20000 + $$ % 10000))
# A perftest built with MPI (Debian 13's) takes a single process for an MPI
# job of one unless told otherwise; -P does not exist before 1.14.
mpi_off=
ucx_perftest -h 2>&1 | grep -q -- '-P <0|1>' && mpi_off="-P 0"
# "# Version 1.13.1" (1.13), "# Library version: 1.18.1" (1.18)
minor=$(ucx_info -v | sed -n 's/^# [A-Za-z ]*ersion:* 1\.\([0-9]*\)\..*/\1/p' | head -n 1)

# pair NAME TLS TEST [ENV...]: a server and a client; both must finish.
# The client tries again while the server is not yet listening (under
# emulation it may take seconds to start); neither waits more than 300 s.
pair() {
	name=$1 tls=$2 test=$3
	shift 3
	port=$((port + 1))
	env UCX_TLS="$tls" "$@" timeout 300 ucx_perftest $mpi_off -p "$port" >"$tmp/server" 2>&1 &
	server=$!
	tries=0
	while :; do
		sleep 2
		env UCX_TLS="$tls" "$@" timeout 300 ucx_perftest 127.0.0.1 $mpi_off -p "$port" \
			-t "$test" -s 65536 -n 100 >"$tmp/client" 2>&1
		client_rc=$?
		tries=$((tries + 1))
		[ $client_rc != 0 ] && [ $tries -lt 10 ] && kill -0 "$server" 2>/dev/null &&
			! grep -q '^Final:' "$tmp/client" || break
	done
	[ $client_rc = 0 ] || kill "$server" 2>/dev/null
	wait "$server"
	server_rc=$?
	if [ $client_rc = 0 ] && [ $server_rc = 0 ] && grep -q '^Final:' "$tmp/client"; then
		pass "$name"
		return 0
	fi
	fail "$name (client $client_rc, server $server_rc)"
	tail -n 8 "$tmp/client" "$tmp/server" | sed 's/^/# /'
	return 1
}

for t in "shared memory|posix,self" "tcp|tcp,self"; do
	what=${t%%|*} tls=${t#*|}
	pair "$what, tag_bw, without the plugin" "$tls" tag_bw
	pair "$what, ucp_put_bw, the plugin preloaded" "$tls" ucp_put_bw LD_PRELOAD="$plugin"
	pair "$what, tag_bw, the plugin preloaded" "$tls" tag_bw \
		LD_PRELOAD="$plugin" UCX_MRNOTIFY_STATS=y LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/bind"
	if grep -q '^libmrnotify-ucx: pid' "$tmp/client"; then pass "... the plugin was loaded into the client"
	else fail "... the plugin was loaded into the client"; fi
	# From UCX 1.14 the plugin wraps UCP's entry points (1.13: only
	# ucs_rcache_get, which these transports never reach); the version
	# functions it also exports are its guard, not entry points. The
	# program binds them at load (Debian links with -z now): this shows
	# where its UCP calls went, the transfer above that they got through.
	# Only bindings *to* the plugin: its own dlsym(RTLD_NEXT) lookups of
	# UCX's functions are logged too, from it.
	bound=$(grep -h "normal symbol \`ucp_" "$tmp"/bind.* 2>/dev/null | grep ' to [^ ]*libmrnotify-ucx\.so' |
		sed -n "s/.*normal symbol \`\([a-z_0-9]*\)'.*/\1/p" | grep -v '_version$' | sort -u)
	if [ "$minor" -lt 14 ]; then
		skip "... the program's UCP calls bound to the plugin" "UCX 1.$minor: the plugin wraps none"
	elif [ -n "$bound" ]; then
		pass "... the program's UCP calls bound to the plugin: $(echo "$bound" | wc -l) entry points, $(echo "$bound" | grep -m 3 tag | tr '\n' ' ')..."
	else
		fail "... the program's UCP calls bound to the plugin (none is)"
	fi
	rm -f "$tmp"/bind.*
done
finish

#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The guest side of make check-two-nodes (check-two-nodes.sh boots the two
# guests): each guest has its own kernel, mrnotify.ko and rxe0, on a private
# link between them. Open MPI's rsh launcher reaches the second guest
# through dropbear (Debian's dropbear-bin), which works offline.
#
#   two-nodes.sh serve KEYDIR       on node 2: run dropbear until told to stop
#   two-nodes.sh connect KEYDIR PEER
#                                   on node 1: wait for the peer's dropbear,
#                                   then check that mpirun puts one rank on
#                                   each node
#   two-nodes.sh mpi PEER CMD...    on node 1: run CMD with mpirun's jobs
#                                   spread over both nodes (MRN_MPI_HOSTS)
#   two-nodes.sh stop PEER          on node 1: show the peer's mrnotify.ko
#                                   counters, fail unless they moved, then
#                                   stop the peer
#
# KEYDIR holds host_key and client_key (dropbearkey), and their public
# halves host_key.pub and client_key.pub. Each step prints TAP
# (tests/harness/tap.sh), as every test does; mpi's CMD prints its own.
set -u
prog=two-nodes.sh
stop_flag=/var/tmp/mrn-two-nodes-stop
. "$(dirname "$0")/../harness/tap.sh"
die() { fail "$prog: $*"; finish; }

my_address() {
	ip -4 -o addr show dev eth0 | sed -n 's/.* inet \([0-9.]*\)\/.*/\1/p' | head -n 1
}

# Open MPI's launcher and its out-of-band channel over the link: Open MPI
# 4's names (ORTE), and PRRTE's, which launches Open MPI 5's jobs.
mpi_env() {
	export OMPI_MCA_plm_rsh_agent=dbclient PRTE_MCA_plm_ssh_agent=dbclient
	export OMPI_MCA_oob_tcp_if_include=eth0 PRTE_MCA_oob_tcp_if_include=eth0
	export OMPI_MCA_btl_tcp_if_include=eth0
	export MRN_MPI_HOSTS="$(my_address),$1"
}

# A peer that died (its kernel crashed) would hold each call for TCP's
# whole connect timeout, minutes.
on_peer() { # PEER COMMAND
	timeout 60 dbclient "$1" "$2"
}

cmd=${1-}
[ $# -gt 0 ] && shift
case $cmd in
serve)
	[ $# -eq 1 ] || die "usage: $prog serve KEYDIR"
	keys=$1
	# dropbear refuses keys under a home or .ssh others can write to, and
	# the guest's /root is a tmpfs of mode 1777.
	chmod 700 /root && mkdir -p -m 700 /root/.ssh &&
		cp "$keys/client_key.pub" /root/.ssh/authorized_keys &&
		chmod 600 /root/.ssh/authorized_keys || die "cannot set up /root/.ssh"
	# -s: keys only, no passwords; -F -E: in the foreground, logging here.
	dropbear -F -E -s -p 22 -r "$keys/host_key" >/var/tmp/dropbear.log 2>&1 &
	pid=$!
	waited=0
	limit=${MRN_TWO_NODES_WAIT:-2400}
	while [ ! -e $stop_flag ] && [ $waited -lt "$limit" ]; do
		kill -0 $pid 2>/dev/null || { cat /var/tmp/dropbear.log; die "dropbear exited"; }
		sleep 2
		waited=$((waited + 2))
	done
	kill $pid 2>/dev/null
	logins=$(grep -c "auth succeeded" /var/tmp/dropbear.log)
	[ -e $stop_flag ] || die "node 1 never said stop within ${limit} s"
	pass "node $(hostname) served $logins login(s) in ${waited} s, until node 1 said stop"
	finish
	;;
connect)
	[ $# -eq 2 ] || die "usage: $prog connect KEYDIR PEER"
	keys=$1 peer=$2
	chmod 700 /root && mkdir -p -m 700 /root/.ssh &&
		cp "$keys/client_key" /root/.ssh/id_dropbear &&
		chmod 600 /root/.ssh/id_dropbear &&
		echo "$peer $(cat "$keys/host_key.pub")" >/root/.ssh/known_hosts ||
		die "cannot set up /root/.ssh"
	# The peer boots alongside this guest: wait for its dropbear.
	waited=0
	until out=$(on_peer "$peer" hostname 2>&1); do
		[ $waited -lt 600 ] || die "no login on $peer within 600 s: $out"
		sleep 5
		waited=$((waited + 5))
	done
	pass "logged in to $out ($peer) after ${waited} s"
	mpi_env "$peer"
	# One rank on each node, or the later cases prove nothing.
	# --oversubscribe: PRRTE (Open MPI 5) counts no free slot on its own
	# node when --host names it by address ("node node1 has 0 slots
	# available"); by node, the ranks still go one to each.
	names=$(mpirun --allow-run-as-root --host "$MRN_MPI_HOSTS" -np 2 --map-by node --oversubscribe \
		hostname 2>&1)
	echo "$names" | sed 's/^/# /'
	if echo "$names" | grep -qx "$(hostname)" && echo "$names" | grep -qx "$out"; then
		pass "mpirun placed one rank on $(hostname) and one on $out"
	else
		fail "mpirun did not place a rank on $(hostname) and one on $out"
	fi
	finish
	;;
mpi)
	[ $# -ge 2 ] || die "usage: $prog mpi PEER CMD..."
	mpi_env "$1"
	shift
	# env: CMD may start with VAR=VALUE words.
	exec env "$@"
	;;
stop)
	[ $# -eq 1 ] || die "usage: $prog stop PEER"
	peer=$1
	# The peer's kernel did our cache's work for its rank: its counters of
	# registrations invalidated and drained moved.
	counters=$(on_peer "$peer" 'cd /sys/kernel/debug/mrnotify && grep . invalidated drained contexts registrations') ||
		fail "read mrnotify.ko's counters on $peer"
	note "mrnotify.ko on $peer: $(echo "$counters" | tr '\n' ' ')"
	for c in invalidated drained; do
		n=$(echo "$counters" | sed -n "s/^$c:\([0-9]*\)$/\1/p")
		check "$c on $peer moved (${n:-missing})" [ "${n:-0}" -gt 0 ]
	done
	check "told $peer to stop" on_peer "$peer" "touch $stop_flag"
	finish
	;;
*)
	die "usage: $prog serve|connect|mpi|stop ..."
	;;
esac

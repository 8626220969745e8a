#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# make check-two-nodes: two guests, each booting its own kernel with
# mrnotify.ko and rxe0, on a private link (a Unix socket between the two
# qemu processes: nothing leaves the host). Node 2 runs dropbear; node 1 runs
# the commands given, between two-nodes.sh's connect (which checks that
# mpirun puts one rank on each node) and stop (which checks that node 2's
# module did work, and ends node 2).
#
#   check-two-nodes.sh --results DIR [--command CMD]... -- RUN-IN-GUEST [OPTION]...
#
# RUN-IN-GUEST...: run-in-guest.sh and the options both guests share (the
# kernel, --module, --rxe, --bind); each guest gets --link, --ip,
# --hostname, --results and --smp 1 on top. CMD: run on node 1 by
# two-nodes.sh mpi, so that its mpirun jobs span both nodes.
# Exit status: 0 when both guests passed, 1 otherwise, 2 on a usage error.
set -u -o pipefail
prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "$prog: $*" >&2; exit 2; }

results= commands=()
while [ $# -gt 0 ]; do
	case $1 in
	--results) results=$2; shift 2 ;;
	--command) commands+=("$2"); shift 2 ;;
	--) shift; break ;;
	*) die "unknown argument $1 (usage: $prog --results DIR [--command CMD]... -- RUN-IN-GUEST...)" ;;
	esac
done
[ -n "$results" ] && [ $# -gt 0 ] || die "usage: $prog --results DIR [--command CMD]... -- RUN-IN-GUEST..."
for t in dropbear dbclient dropbearkey; do
	command -v $t >/dev/null || die "$t is missing: apt-get install dropbear-bin"
done

rm -rf "$results"
mkdir -p "$results/keys" || die "cannot create $results"
results=$(readlink -f "$results")
keys=$results/keys
dropbearkey -t ed25519 -f "$keys/host_key" >/dev/null &&
	dropbearkey -t ed25519 -f "$keys/client_key" >/dev/null &&
	dropbearkey -y -f "$keys/client_key" | grep '^ssh-' >"$keys/client_key.pub" &&
	dropbearkey -y -f "$keys/host_key" | grep '^ssh-' | cut -d' ' -f1-2 >"$keys/host_key.pub" ||
	die "dropbearkey failed"

# The link's socket: a short path (a Unix socket's is limited to 107
# characters), one per run.
linkdir=$(mktemp -d /tmp/mrn-link.XXXXXX) || die "mktemp failed"
trap 'rm -rf "$linkdir"' EXIT
sock=$linkdir/sock
node1=10.0.3.1 node2=10.0.3.2
peer_script="sh $here/two-nodes.sh"
start=$(date +%s)

# run_pair: one run of both guests; sets rc1 and rc2, and node2_wedged when
# node 2 did not stop when told and had to be ended.
run_pair() {
	node2_wedged=no
	rm -rf "$results/node1" "$results/node2" "$results/node2.log"
	# Node 2 in its own process group, so that it can be ended as a whole
	# (qemu included) if node 1 never tells it to stop.
	setsid "$@" --smp 1 --hostname node2 --ip $node2 --link listen:$sock \
		--results "$results/node2" --bind "$keys" --env MRN_TWO_NODES_WAIT=1400 \
		"$peer_script serve $keys" >"$results/node2.log" 2>&1 &
	node2_pid=$!

	# Node 1's qemu connects to node 2's: wait until node 2's listens.
	for _ in $(seq 60); do
		[ -S "$sock" ] && break
		kill -0 $node2_pid 2>/dev/null || break
		sleep 1
	done
	[ -S "$sock" ] || {
		kill -KILL -- -$node2_pid 2>/dev/null
		cat "$results/node2.log"
		die "node 2's qemu never listened on $sock"
	}

	"$@" --smp 1 --hostname node1 --ip $node1 --link connect:$sock \
		--results "$results/node1" --bind "$keys" "${node1_cmds[@]}"
	rc1=$?

	# Node 2 stops once told to; give it a minute to power off, then end it.
	for _ in $(seq 60); do
		kill -0 $node2_pid 2>/dev/null || break
		sleep 1
	done
	if kill -0 $node2_pid 2>/dev/null; then
		echo "$prog: node 2 did not stop; ending it" >&2
		kill -KILL -- -$node2_pid 2>/dev/null
		node2_wedged=yes
	fi
	wait $node2_pid
	rc2=$?
	rm -f "$sock"
	echo "===== node 2 ($results/node2.log):"
	cat "$results/node2.log"
}

# rxe_crash: the first kernel crash in rdma_rxe either node's console
# holds (printed; status 0), or status 1.
rxe_crash() {
	for n in node1 node2; do
		report=$(sh "$here/../harness/kernel-crash.sh" "$results/$n/serial.log") || continue
		echo "$report" | grep -q 'rdma_rxe' || continue
		echo "$prog: $n's kernel crashed in rdma_rxe:"
		echo "$report"
		return 0
	done
	return 1
}

node1_cmds=("$peer_script connect $keys $node2")
for c in "${commands[@]+"${commands[@]}"}"; do
	node1_cmds+=("$peer_script mpi $node2 $c")
done
node1_cmds+=("$peer_script stop $node2")

run_pair "$@"
# Debian 13's rdma_rxe (6.12.117, --smp 1 under TCG) has crashed a node's
# kernel in some runs, with stock Open MPI's registrations and with ours
# (tests/mca/README.md, "Two nodes"): the pair runs once more, and a crash in
# the second run fails the lane as any other failure does. So does a node 2
# that stopped answering altogether (seen once in four runs of Debian 12's
# pair on 2026-12-07: a job hung, node 1's ssh to node 2 then timed out,
# node 2 never stopped, its console silent; the three runs after it
# passed). Any other failure is not retried.
if { [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; } && { rxe_crash || [ $node2_wedged = yes ]; }; then
	[ $node2_wedged = yes ] && echo "$prog: node 2 stopped answering and had to be ended"
	mkdir -p "$results/attempt1" &&
		mv "$results/node1" "$results/node2" "$results/node2.log" "$results/attempt1/"
	echo "$prog: the first run's results are in $results/attempt1; running both nodes again"
	run_pair "$@"
fi

status=0
[ $rc1 -eq 0 ] || status=1
[ $rc2 -eq 0 ] || status=1
echo "$prog: node 1 exit $rc1, node 2 exit $rc2, $(($(date +%s) - start)) s: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status

# SPDX-License-Identifier: BSD-3-Clause
# Shared by the application comparisons (hpcc-compare.sh,
# lammps-compare.sh, sweep-compare.sh), which run a program once with stock
# UCX and once behind a prefix (the plugin's wrapper) over the same
# launcher. Sourced, not run.

# split_launch ARG...: ARG is "LAUNCH... -- PREFIX...": sets $launch (the
# mpirun command line, without the program) and $prefix.
split_launch() {
	launch= prefix=
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		launch="$launch $1"
		shift
	done
	[ $# -gt 0 ] && shift
	prefix="$*"
}

# regs_in LOG: the registrations libregcount.so counted in all the ranks
# whose lines are in LOG.
regs_in() {
	sed -n 's/^regcount: pid [0-9]*: \([0-9]*\) registrations.*/\1/p' "$1" |
		awk '{ s += $1 } END { print s + 0 }'
}

# make_work: a scratch folder in $work, removed at exit.
make_work() {
	work=$(mktemp -d) || exit 2
	trap 'rm -rf "$work"' EXIT
}

# same_and_registered TOOL FILE WHAT: after "run stock" and "run
# prefixed", $work/stock/FILE and $work/prefixed/FILE (WHAT: the results
# compared) must be the same, and the prefixed run must have registered
# memory ($prefixed_regs, set by the caller's run); exits 1 otherwise.
same_and_registered() {
	if ! cmp -s "$work/stock/$2" "$work/prefixed/$2"; then
		echo "$1: $3 differ:"
		diff "$work/stock/$2" "$work/prefixed/$2"
		exit 1
	fi
	# shellcheck disable=SC2154 # set by the caller's run() through eval
	if [ "$prefixed_regs" -eq 0 ]; then
		echo "$1: the prefixed run registered nothing (no RDMA transport in use?)"
		exit 1
	fi
}

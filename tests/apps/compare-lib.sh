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

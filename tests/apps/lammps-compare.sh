#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# LAMMPS (Debian's lammps package) as an application test: its own
# Lennard-Jones melt example (4,000 atoms, 250 steps, the halo exchanged
# between two ranks every step) run once with stock UCX and once behind a
# prefix (the plugin's wrapper), over the same
# launcher. Passes when both runs finish, print the same thermodynamic
# output at every step LAMMPS reports (a molecular dynamics run is chaotic:
# one wrong byte in a halo shows within a few steps), and the prefixed run
# registered memory (libregcount.so counts ibv_reg_mr in every rank).
#
#   lammps-compare.sh REGCOUNT.so LAUNCH... -- PREFIX...
#
# Exit status 0, 1 when a check fails, 77 when LAMMPS or its example is
# missing (Debian packages lammps and lammps-examples).
set -u
[ $# -ge 3 ] || { echo "usage: lammps-compare.sh REGCOUNT.so LAUNCH... -- PREFIX..." >&2; exit 2; }
regcount=$1
shift
. "$(dirname "$0")/compare-lib.sh"
split_launch "$@"
lmp=$(command -v lmp) || { echo "lammps-compare: no lmp (Debian package lammps)"; exit 77; }
example=/usr/share/lammps/examples/melt/in.melt
[ -r "$example" ] || { echo "lammps-compare: no $example (Debian package lammps-examples)"; exit 77; }

make_work

# run NAME PREFIX...: the melt in $work/NAME; keeps its thermo lines.
run() {
	name=$1
	shift
	d=$work/$name
	mkdir "$d" || exit 2
	cp "$example" "$d/in.melt"
	echo "\$ (cd $d &&$launch -x LD_PRELOAD=$regcount $* $lmp -in in.melt -log log.lammps -screen none)"
	# shellcheck disable=SC2086
	(cd "$d" && $launch -x LD_PRELOAD="$regcount" "$@" "$lmp" -in in.melt -log log.lammps \
		-screen none) >"$d/out" 2>&1
	rc=$?
	grep -v '^#' "$d/out" | grep -v '^$'
	[ $rc -eq 0 ] || { echo "lammps-compare: the $name run exited $rc"; exit 1; }
	# Step, temperature, pair energy, bond energy, total energy, pressure.
	sed -n '/^ *Step /,/^Loop time/p' "$d/log.lammps" | grep -E '^ +[0-9]+ ' >"$d/thermo"
	sed 's/^/    thermo: /' "$d/thermo"
	grep -q '^ *250 ' "$d/thermo" || { echo "lammps-compare: the $name run did not reach step 250"; exit 1; }
	grep '^Loop time' "$d/log.lammps"
	regs=$(regs_in "$d/out")
	echo "lammps-compare: $name: $regs registrations in all ranks"
	eval "${name}_regs=$regs"
}

run stock
# shellcheck disable=SC2086
run prefixed $prefix
same_and_registered lammps-compare thermo "the thermodynamic outputs"
echo "lammps-compare: same thermodynamic output at $(wc -l <"$work/stock/thermo") steps; registrations: stock $stock_regs, prefixed $prefixed_regs"

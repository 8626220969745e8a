#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Host tests of libmrnotify-ucx and mrnotify-ucx-run that need no kernel
# module: the settings in UCX's configuration listing, no "unused variable"
# warning for them, that preloading the library never breaks a program (only
# creating a UCP context can fail, and only with UCX_MRNOTIFY_ENABLE=yes or a
# bad setting), what UCX_MRNOTIFY_ENABLE does when /dev/mrnotify is missing,
# a UCX the library has no build for, UCX_MEM_EVENTS=n, and the wrapper's
# choices. preload-brings-nothing.sh tests what the library leaves alone. Run by make check from tests/ (paths
# relative to the build tree), or with BUILDDIR=<top build dir>.
set -u
# The result verbs (TAP).
. "$(dirname "$0")/../harness/tap.sh"

top=${BUILDDIR:-$(cd .. && pwd)}
plugin=$top/ucx-plugin/.libs/libmrnotify-ucx.so
run=$top/ucx-plugin/mrnotify-ucx-run
export LD_LIBRARY_PATH=$top/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MRNOTIFY_UCX_PLUGIN=$plugin
if [ ! -r "$plugin" ] || [ ! -x "$run" ] || ! command -v ucx_info >/dev/null; then
	skip "ucx-host-tests" "needs $plugin, $run and ucx_info"
	finish
fi
unset UCX_MRNOTIFY_ENABLE UCX_MRNOTIFY_STATS LD_PRELOAD

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# expect_fail NAME COMMAND...: the command exits with a status other than 0.
expect_fail() {
	name=$1
	shift
	"$@" >"$tmp/out" 2>&1
	got=$?
	if [ "$got" != 0 ]; then pass "$name"; else echo "(exit status 0, expected a failure)" >>"$tmp/out"; ko "$name"; fi
}
ko() { fail "$1"; head -n 20 "$tmp/out" | sed 's/^/# /'; }
# expect NAME STATUS COMMAND...: the command's exit status is STATUS.
expect() {
	name=$1 want=$2
	shift 2
	"$@" >"$tmp/out" 2>&1
	got=$?
	if [ "$got" = "$want" ]; then pass "$name"; else echo "(exit status $got, expected $want)" >>"$tmp/out"; ko "$name"; fi
}
has() { grep -q -- "$1" "$tmp/out"; }
# The plugin's own words: its log lines ("mrnotify: ...") and its stderr
# lines ("libmrnotify-ucx: ..."), not a path that happens to hold the name.
says_something() { grep -Eq -- '(^|[] ])mrnotify: |libmrnotify-ucx: ' "$tmp/out"; }

# The settings are in UCX's configuration listing, with their defaults.
LD_PRELOAD=$plugin ucx_info -c >"$tmp/out" 2>&1
if has '^UCX_MRNOTIFY_ENABLE=try$' && has '^UCX_MRNOTIFY_STATS=n$'; then pass "ucx_info -c lists the settings"
else ko "ucx_info -c lists the settings"; fi
ucx_info -c >"$tmp/out" 2>&1
if ! has MRNOTIFY; then pass "ucx_info -c without the plugin does not"
else ko "ucx_info -c without the plugin does not"; fi

# UCX warns about UCX_* variables no configuration table claims ("unused env
# variable" in 1.13, "unused environment variable(s)" in 1.18); ours are
# claimed (ucx_info -e creates a UCP context, which warns).
w="UCX_WARN_UNUSED_ENV_VARS=y UCX_MRNOTIFY_ENABLE=try UCX_MRNOTIFY_STATS=n"
env $w LD_PRELOAD=$plugin ucx_info -e -u t >"$tmp/out" 2>&1
if ! has 'unused env[a-z]* variable'; then pass "no unused-variable warning with the plugin"
else ko "no unused-variable warning with the plugin"; fi
env $w ucx_info -e -u t >"$tmp/out" 2>&1
if has 'unused env[a-z]* variable.*UCX_MRNOTIFY'; then pass "the warning without the plugin (what it silences)"
else ko "the warning without the plugin (what it silences)"; fi
env $w UCX_MRNOTIFY_ENABLED=y LD_PRELOAD=$plugin ucx_info -e -u t >"$tmp/out" 2>&1
if has 'unused env[a-z]* variable.*UCX_MRNOTIFY_ENABLED'; then pass "a misspelt setting is still reported"
else ko "a misspelt setting is still reported"; fi

# A bad value is an error where UCX is used, never at load.
expect "a bad UCX_MRNOTIFY_ENABLE value does not stop a program that creates no UCP context" 0 \
	env UCX_MRNOTIFY_ENABLE=perhaps LD_PRELOAD=$plugin ucx_info -v
expect_fail "a bad UCX_MRNOTIFY_ENABLE value makes creating a UCP context fail" \
	env UCX_MRNOTIFY_ENABLE=perhaps LD_PRELOAD=$plugin ucx_info -e -u t
if has 'mrnotify: a UCX_MRNOTIFY_\* setting is not valid'; then pass "... and says why"; else ko "... and says why"; fi

if [ -e /dev/mrnotify ]; then
	skip "the missing-device cases" "/dev/mrnotify exists here: they need a host without it"
else
	# What a site's environment module does (LD_PRELOAD for every program,
	# ENABLE=yes) must not break programs that do not use UCX, on a node
	# without the module.
	expect "ENABLE=yes without the device: ls runs" 0 env UCX_MRNOTIFY_ENABLE=yes LD_PRELOAD=$plugin ls /
	expect "ENABLE=yes without the device: sh -c true runs" 0 \
		env UCX_MRNOTIFY_ENABLE=yes LD_PRELOAD=$plugin sh -c true
	expect "ENABLE=yes without the device: a UCX program that creates no UCP context runs" 0 \
		env UCX_MRNOTIFY_ENABLE=yes LD_PRELOAD=$plugin ucx_info -v
	if ! says_something; then pass "... and says nothing"; else ko "... and says nothing"; fi
	expect_fail "ENABLE=yes without the device: creating a UCP context fails" \
		env UCX_MRNOTIFY_ENABLE=yes LD_PRELOAD=$plugin ucx_info -e -u t
	if has 'mrnotify: UCX_MRNOTIFY_ENABLE=yes, but /dev/mrnotify is missing'; then pass "... and says why"
	else ko "... and says why"; fi
	expect "ENABLE=try without the device runs" 0 \
		env UCX_MRNOTIFY_ENABLE=try UCX_LOG_LEVEL=diag LD_PRELOAD=$plugin ucx_info -e -u t
	if has 'mrnotify: not used (UCX_MRNOTIFY_ENABLE=try): /dev/mrnotify is missing'; then pass "... and says so at diag level"
	else ko "... and says so at diag level"; fi
	expect "ENABLE defaults to try" 0 env UCX_LOG_LEVEL=diag LD_PRELOAD=$plugin ucx_info -e -u t
	if has 'mrnotify: not used (UCX_MRNOTIFY_ENABLE=try)'; then pass "... and says so at diag level"
	else ko "... and says so at diag level"; fi
	expect "ENABLE=no runs" 0 env UCX_MRNOTIFY_ENABLE=no UCX_LOG_LEVEL=diag LD_PRELOAD=$plugin ucx_info -e -u t
	if ! says_something; then pass "... and says nothing"; else ko "... and says nothing"; fi
	expect "statistics at exit when asked" 0 \
		env UCX_MRNOTIFY_STATS=y LD_PRELOAD=$plugin ucx_info -e -u t
	if has '^libmrnotify-ucx: pid [0-9]*: inactive, checks 0, entry checks 0, drains 0.*; /dev/mrnotify is missing'; then
		pass "... inactive, with counters and the reason"
	else ko "... inactive, with counters and the reason"; fi
	expect "no statistics from a program that never used UCX" 0 \
		env UCX_MRNOTIFY_STATS=y LD_PRELOAD=$plugin ucx_info -v
	if ! has libmrnotify-ucx; then pass "... none"; else ko "... none"; fi

	# The wrapper: try leaves the program as it is (UCX keeps its hooks).
	expect "mrnotify-ucx-run --enable=try without the device runs the program unchanged" 0 \
		sh -c "$run --enable=try sh -c 'test -z \"\${LD_PRELOAD:-}\" && test -z \"\${UCX_MEM_MMAP_HOOK_MODE:-}\"'"
	expect "mrnotify-ucx-run --enable=yes without the device refuses" 1 "$run" --enable=yes true
	if has '/dev/mrnotify is not usable'; then pass "... and says why"; else ko "... and says why"; fi
fi
# No build for the UCX the process runs: what a plugin built in another
# distribution's root (another UCX release) preloaded here meets, or a node
# whose UCX moved on (a MOFED/DOCA update). A copy of the preloaded object
# whose directory has this build's backend filed under another release
# (ucx-1.99/) stands in for it: nothing of UCX is touched, not even its
# configuration table, every call passes through, and one line per job says
# why (none with ENABLE=try or no); with ENABLE=yes a UCP context fails.
# "# Version 1.13.1" (1.13), "# Library version: 1.18.1" (later).
release=$(ucx_info -v | sed -n 's/^# \(Library \)\{0,1\}[Vv]ersion:\{0,1\} *\([0-9][0-9.]*\).*/\2/p' | head -n 1)
other=$tmp/other
mkdir -p "$other/ucx-1.99"
cp "$plugin" "$other/"
ln -s "$top/ucx-plugin/.libs/libmrnotify-ucx-backend.so" "$other/ucx-1.99/"
oplugin=$other/libmrnotify-ucx.so
expect "no build for this UCX: a UCP context is created" 0 env LD_PRELOAD="$oplugin" ucx_info -e -u t
if [ "$(grep -c "^libmrnotify-ucx: not used: this process runs UCX $release, for which it has no build ($other has: 1.99); UCX runs as configured$" "$tmp/out")" = 1 ]; then
	pass "... and one line says why, naming the releases it has"
else ko "... and one line says why, naming the releases it has"; fi
expect "no build for this UCX, a job's second rank: runs" 0 \
	env OMPI_COMM_WORLD_RANK=1 LD_PRELOAD="$oplugin" ucx_info -e -u t
if ! says_something; then pass "... and says nothing (one line a job, from rank 0)"; else ko "... and says nothing (one line a job, from rank 0)"; fi
expect "no build for this UCX, a job's rank 0 (PMIx): runs" 0 env PMIX_RANK=0 LD_PRELOAD="$oplugin" ucx_info -e -u t
if has '^libmrnotify-ucx: not used: this process runs UCX'; then pass "... and says why"; else ko "... and says why"; fi
for e in try no; do
	expect "no build for this UCX, ENABLE=$e: runs" 0 env UCX_MRNOTIFY_ENABLE=$e LD_PRELOAD="$oplugin" ucx_info -e -u t
	if ! says_something; then pass "... and says nothing"; else ko "... and says nothing"; fi
done
expect_fail "no build for this UCX, ENABLE=yes: creating a UCP context fails" \
	env UCX_MRNOTIFY_ENABLE=yes LD_PRELOAD="$oplugin" ucx_info -e -u t
if has '^libmrnotify-ucx: UCX_MRNOTIFY_ENABLE=yes, but this process runs UCX .*, for which it has no build'; then
	pass "... and says why"
else ko "... and says why"; fi
expect "no build for this UCX, ENABLE=yes: a program that creates no UCP context runs" 0 \
	env UCX_MRNOTIFY_ENABLE=yes LD_PRELOAD="$oplugin" ucx_info -v
LD_PRELOAD="$oplugin" ucx_info -c >"$tmp/out" 2>&1
if ! has MRNOTIFY_; then pass "no build for this UCX: the settings are not added to its configuration"
else ko "no build for this UCX: the settings are not added to its configuration"; fi
env MRNOTIFY_UCX_PROBE=version LD_PRELOAD="$oplugin" true >"$tmp/out" 2>&1
if has "^libmrnotify-ucx: built for UCX 1.99, runs UCX $release: unsupported: "; then
	pass "the probe says which releases it has, which the node's programs run, and that it is not served"
else ko "the probe says which releases it has, which the node's programs run, and that it is not served"; fi
env MRNOTIFY_UCX_PROBE=version LD_PRELOAD="$plugin" true >"$tmp/out" 2>&1
if has "^libmrnotify-ucx: built for UCX [0-9.]*, runs UCX $release: supported$"; then pass "... and that it is, with this build's backend"
else ko "... and that it is, with this build's backend"; fi

# UCX_MEM_EVENTS=n: UCM refuses every event handler, so UCX creates no
# cache for the plugin to feed; it says so (a warning, even with try) and
# stays inactive instead of calling itself active.
expect "UCX_MEM_EVENTS=n runs" 0 env UCX_MEM_EVENTS=n UCX_MRNOTIFY_STATS=y LD_PRELOAD=$plugin ucx_info -e -u t
if has 'UCX  WARN  mrnotify: not used (UCX_MRNOTIFY_ENABLE=try): UCX_MEM_EVENTS=n'; then pass "... warns that UCX then has no caches"
else ko "... warns that UCX then has no caches"; fi
if has '^libmrnotify-ucx: pid [0-9]*: inactive,.*rcaches 0; UCX_MEM_EVENTS=n'; then pass "... and reports itself inactive"
else ko "... and reports itself inactive"; fi

# The wrapper preloads the library wherever the device is usable: the
# library decides in each process, by the UCX it runs. /dev/null stands in
# for the device (the wrapper only checks that it is a usable character
# device).
expect "mrnotify-ucx-run preloads the library when the device is usable" 0 \
	env MRNOTIFY_UCX_DEVICE=/dev/null "$run" --enable=yes sh -c 'test "$LD_PRELOAD" = "$MRNOTIFY_UCX_PLUGIN"'
expect "... even where it has no build for the node's UCX (the process decides)" 0 \
	env MRNOTIFY_UCX_DEVICE=/dev/null MRNOTIFY_UCX_PLUGIN="$oplugin" "$run" --enable=try \
	sh -c 'test "$LD_PRELOAD" = "$MRNOTIFY_UCX_PLUGIN"'
expect "mrnotify-ucx-run --enable=no runs the program" 0 "$run" --enable=no true
expect "mrnotify-ucx-run rejects a bad --enable" 2 "$run" --enable=perhaps true
expect "mrnotify-ucx-run --help" 0 "$run" --help
expect "mrnotify-ucx-run without a program" 2 "$run"

finish

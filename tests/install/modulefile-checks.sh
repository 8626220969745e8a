#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The installed modulefiles, with Lmod (Debian's lmod) and environment-modules
# (Debian's package, unpacked: the two conflict as packages), in the root the
# packages were installed into.
# Each process decides on its own node (docs/deploying.md), so load sets the
# same variables everywhere: what is harmless where the device is missing
# (serve_grdma=kernel, the UCX plugin in try mode with UCM's hooks left as
# configured, MRNOTIFY_OFI=try). Load adds and never takes away: no
# component path, what a site or the user had set is kept, and unload gives
# it back.
#   modulefile-checks.sh without   no usable /dev/mrnotify (the host's
#                                  chroot): load prints one notice, sets
#                                  them, every command still runs
#   modulefile-checks.sh with      the device is usable (the guest): load
#                                  sets them quietly
#   modulefile-checks.sh control   the negative control: the README's old
#                                  unconditional snippet (UCM's hooks off
#                                  in the environment), checked as
#                                  "without": its checks must fail
# Both: unload removes every variable, and restores those set before.
# Environment: MODULEFILES (default /usr/share/modulefiles), ENVMODULES (the
# unpacked environment-modules, default /opt/mrn-test/environment-modules).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# The result verbs (TAP): tap.sh sits beside these scripts in the install
# root, in tests/harness in the tree.
. "$( [ -r "$here/tap.sh" ] && echo "$here" || echo "$here/../harness")/tap.sh"
case=${1:-}
modulefiles=${MODULEFILES:-/usr/share/modulefiles}
envm=${ENVMODULES:-/opt/mrn-test/environment-modules}
VARS='OMPI_MCA_mca_base_component_path|OMPI_MCA_btl_openib_rcache|OMPI_MCA_rcache_mrnotify_serve_grdma|OMPI_MCA_opal_common_ucx_opal_mem_hooks|LD_PRELOAD|UCX_MRNOTIFY_ENABLE|UCX_MEM_MMAP_HOOK_MODE|UCX_MEM_MALLOC_HOOKS|UCX_MEM_MALLOC_RELOC|MRNOTIFY_OFI|MRNOTIFY_MODULE_ACTIVE'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "$case" = control ]; then
	# The README's snippet as it was (before docs/deploying.md).
	mkdir -p "$tmp/mf/mrnotify"
	cat >"$tmp/mf/mrnotify/0.0" <<'TCL'
#%Module1.0
prepend-path LD_PRELOAD /usr/lib/x86_64-linux-gnu/mrnotify/libmrnotify-ucx.so
setenv UCX_MEM_MMAP_HOOK_MODE none
setenv UCX_MEM_MALLOC_HOOKS n
setenv UCX_MEM_MALLOC_RELOC n
setenv UCX_MRNOTIFY_ENABLE try
setenv OMPI_MCA_opal_common_ucx_opal_mem_hooks 0
TCL
	modulefiles=$tmp/mf
	systems=tcl
	expect=without
else
	systems="lua tcl"
	expect=$case
fi
case $expect in with|without) ;; *) echo "usage: modulefile-checks.sh with|without|control" >&2; exit 2 ;; esac

# Runs "module $*" in a fresh bash with one module system; prints the
# variables of ours that are set afterwards (stdout), the module's messages
# and the commands' errors (stderr).
in_module_shell() { # $1: lua|tcl, rest: a bash script after module is set up
	local sys=$1
	shift
	local init
	if [ "$sys" = lua ]; then
		init=". /usr/share/lmod/lmod/init/bash"
	else
		init="module() { eval \"\$(tclsh $envm/usr/lib/x86_64-linux-gnu/modulecmd.tcl bash \"\$@\")\"; }"
	fi
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb \
		bash --norc --noprofile -c "$init
module use $modulefiles
$*"
}

for sys in $systems; do
	if [ "$sys" = lua ] && [ ! -r /usr/share/lmod/lmod/init/bash ]; then
		fail "$sys: Lmod is not installed (lmod)"
		continue
	fi
	if [ "$sys" = tcl ] && [ ! -r "$envm/usr/lib/x86_64-linux-gnu/modulecmd.tcl" ]; then
		fail "$sys: environment-modules is not at $envm"
		continue
	fi
	name="$sys ($([ $sys = lua ] && echo Lmod || echo environment-modules))"
	in_module_shell $sys 'module load mrnotify; echo "load=$?"; env | grep -E "^('"$VARS"')=" | sort; ls / >/dev/null && echo ls=ok; true' \
		>"$tmp/out" 2>"$tmp/err"
	cat "$tmp/out" "$tmp/err" | sed 's/^/    /'
	check "$name: module load mrnotify exits 0" grep -qx 'load=0' "$tmp/out"
	check "$name: a command after the load runs" grep -qx 'ls=ok' "$tmp/out"
	notices=$(grep -c 'mrnotify: .* is not usable' "$tmp/err")
	if [ $expect = without ]; then
		check "$name: without the device, one notice (got $notices)" [ "$notices" -eq 1 ]
		check "$name: no loader errors" sh -c "! grep -q 'ld.so\|cannot be preloaded' '$tmp/err'"
	else
		check "$name: with the device, no notice" [ "$notices" -eq 0 ]
	fi
	# The same on every node: each process decides where it runs.
	for v in OMPI_MCA_rcache_mrnotify_serve_grdma \
		LD_PRELOAD OMPI_MCA_opal_common_ucx_opal_mem_hooks UCX_MRNOTIFY_ENABLE MRNOTIFY_OFI; do
		check "$name: $expect the device, $v set" grep -q "^$v=" "$tmp/out"
	done
	check "$name: serve_grdma=kernel (grdma served only where the device works)" \
		grep -qx 'OMPI_MCA_rcache_mrnotify_serve_grdma=kernel' "$tmp/out"
	check "$name: UCM's hooks not turned off in the environment (the plugin does it where it is active)" \
		sh -c "! grep -qE '^UCX_MEM_(MMAP_HOOK_MODE|MALLOC_HOOKS|MALLOC_RELOC)=' '$tmp/out'"
	check "$name: no component path (it would name directories another Open MPI or root lacks)" \
		sh -c "! grep -q '^OMPI_MCA_mca_base_component_path=' '$tmp/out'"
	preload=$(sed -n 's/^LD_PRELOAD=//p' "$tmp/out")
	check "$name: every preloaded object exists ($preload)" \
		sh -c 'for f in $(echo "$1" | tr ":" " "); do test -f "$f" || exit 1; done' sh "$preload"
	check "$name: libfabric's monitor preloaded (libmrnotify-ofi-preload.so)" \
		sh -c "echo '$preload' | tr ':' '\n' | grep -q '/libmrnotify-ofi-preload\.so\$'"
	# Unload restores the environment.
	in_module_shell $sys 'module load mrnotify; module unload mrnotify; env | grep -E "^('"$VARS"')=" | sort; true' \
		>"$tmp/out2" 2>"$tmp/err2"
	check "$name: unload removes every variable" sh -c "! grep -qE '^($VARS)=' '$tmp/out2'"
	# What a site's module or the user set before: kept by load (the
	# preloads go before theirs), given back by unload.
	before='export OMPI_MCA_mca_base_component_path=/site/ompi:SYS_DEFAULT UCX_MRNOTIFY_ENABLE=no \
OMPI_MCA_rcache_mrnotify_serve_grdma=0 MRNOTIFY_OFI=0 LD_PRELOAD=/site/lib/libsite.so'
	show_vars='env | grep -E "^('"$VARS"')=" | sort'
	in_module_shell $sys "$before; module load mrnotify; $show_vars; echo ---; module unload mrnotify; $show_vars; true" \
		>"$tmp/out3" 2>"$tmp/err3"
	sed -n '1,/^---$/p' "$tmp/out3" | sed '$d' >"$tmp/loaded"
	sed -n '/^---$/,$p' "$tmp/out3" | sed '1d' >"$tmp/unloaded"
	check "$name: a component path set before is kept" \
		grep -qx 'OMPI_MCA_mca_base_component_path=/site/ompi:SYS_DEFAULT' "$tmp/loaded"
	check "$name: a preload set before stays, after ours" \
		grep -qE '^LD_PRELOAD=/.*/libmrnotify-ucx\.so:.*/site/lib/libsite\.so$' "$tmp/loaded"
	want=$(printf '%s\n' LD_PRELOAD=/site/lib/libsite.so MRNOTIFY_OFI=0 \
		OMPI_MCA_mca_base_component_path=/site/ompi:SYS_DEFAULT \
		OMPI_MCA_rcache_mrnotify_serve_grdma=0 UCX_MRNOTIFY_ENABLE=no | sort)
	check "$name: unload gives back every value set before" [ "$want" = "$(cat "$tmp/unloaded")" ]
	[ "$want" = "$(cat "$tmp/unloaded")" ] || sed 's/^/    after unload: /' "$tmp/unloaded"
done
finish

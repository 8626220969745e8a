#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# failslab.sh CMD...: run CMD with one in ten allocations from the module's
# registration cache (mrn_reg) failing, in CMD's tasks only (fault
# injection's cache and task filters). Needs a kernel with FAILSLAB and
# FAULT_INJECTION_DEBUG_FS (tools/debug-kernel.sh builds one), booted with
# slab_nomerge (a merged cache's failslab cannot be set). Exit status:
# CMD's, or 77 when the kernel cannot inject.
f=/sys/kernel/debug/failslab
[ -d $f ] || mount -t debugfs none /sys/kernel/debug 2>/dev/null
slab=/sys/kernel/slab/mrn_reg/failslab
if [ ! -d $f ] || [ ! -w $slab ]; then
	echo "SKIP: no failslab, or no $slab"
	exit 77
fi
echo 1 >$slab &&
	echo Y >$f/cache-filter && echo Y >$f/task-filter &&
	echo N >$f/ignore-gfp-wait && echo 10 >$f/probability &&
	echo 1 >$f/interval && echo -1 >$f/times && echo 0 >$f/verbose &&
	echo 1 >/proc/self/make-it-fail || { echo "failslab.sh: cannot set up failslab"; exit 1; }
"$@"
rc=$?
echo 0 >$slab
exit $rc

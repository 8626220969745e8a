#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
#
# run-in-guest.sh: boot a Debian kernel under qemu (TCG) with the host's root
# file system (or another root, --root) shared read-only over 9p, load kernel
# modules (ours and, on request, Soft-RoCE), run test programs inside the
# guest and bring their output and exit status back to the host.
#
# Why a guest: the build machines' own kernel has no module support, so the
# module and rxe can only be exercised in a kernel we boot ourselves.
#
# Exit status: 0 when every program exited 0 (or 77: skipped) and the kernel log is clean,
# 1 when a program failed or the kernel complained, 2 on a usage or set-up
# error, 3 when the guest did not finish in time (it is killed), 4 when it
# did not start its first command within --boot-timeout (it is killed).


set -u -o pipefail

prog=$(basename "$0")

usage() {
	cat <<EOF
Usage: $prog [options] [--] 'COMMAND' ['COMMAND' ...]

Boots the guest kernel, loads the modules, then runs each COMMAND (a shell
command line, run by /bin/sh in the guest, whose root is the host's /, or
--root) one after the other. Prints each command's output and exit status,
then a summary.

Options:
  --root DIR            the root file system of the guest (default:
                        the host's /). The host's / stays visible at
                        /run/host, and the working directory, --bind folders
                        and modules are bound at their host paths; such a
                        path must be new to DIR from its first folder on,
                        lie under a folder DIR leaves empty (/home, /srv,
                        /opt: a tmpfs is put over it), or under /tmp, /root
                        or /var/tmp (a folder of DIR with content is
                        read-only)
  --modules-root DIR    where lib/modules/<release> (the guest kernel's
                        modules, with modules.dep) and boot/vmlinuz-<release>
                        are (default: --root)
  --release RELEASE     the guest kernel's release (default: that of
                        --kernel-build)
  --kernel-image FILE   bzImage to boot (default: <modules-root>/boot/
                        vmlinuz-<release>)
  --kernel-build DIR    kernel build tree the modules were built against
                        (default: /lib/modules/\$(uname -r)/build, else the
                        newest /lib/modules/*/build)
  --module FILE.ko      insmod this module in the guest (repeatable; in order)
  --module-param 'NAME ARGS'
                        parameters for the module named NAME (repeatable)
  --rxe                 load Soft-RoCE and create rxe0 on a virtio-net device
  --link listen:SOCKET|connect:SOCKET
                        put that device on a private link to another guest
                        instead of qemu's closed user network: Ethernet
                        frames go over the Unix socket SOCKET (a path), which
                        one guest listens on and the other connects to
                        (start the listening one first); nothing leaves the
                        host
  --ip ADDR             the guest's address on that device (default
                        10.0.2.15; with --link, give each guest its own)
  --hostname NAME       the guest's host name (default: none)
  --cwd DIR             working directory of the commands (default: \$PWD)
  --bind DIR            make DIR visible in the guest even where the guest
                        mounts a tmpfs (under /tmp, /root, /var/tmp); the
                        working directory and the modules always are
                        (repeatable)
  --env NAME=VALUE      export this variable to the commands (repeatable)
  --timeout SECONDS     kill the guest after this long (default: 900)
  --test-timeout SECONDS
                        kill one command after this long (default: 600)
  --memory MIB          guest memory (default: 2048)
  --smp N               guest CPUs (default: 2)
  --numa-nodes 1|2      NUMA nodes; with 2, the memory is split in two and
                        the second node has no CPU (for move_pages tests;
                        default: 1)
  --results DIR         keep results here (default: a new temporary folder);
                        DIR/serial.log is the guest console,
                        DIR/N.out and DIR/N.rc each command's output and status,
                        DIR/dmesg.txt the guest kernel log
  --kernel-arg ARG      add ARG to the guest kernel's command line (repeatable)
  --kernel-clock        let the guest kernel's clocksource watchdog watch
                        the TSC (no tsc=nowatchdog): only to show what goes
                        wrong under host load
  --allow-kernel-warnings
                        do not fail when the guest kernel log has a WARNING,
                        BUG, Oops or lockdep report
  --boot-timeout SECONDS
                        kill the guest when it has not started its first
                        command after this long (exit status 4; default:
                        no limit but --timeout): a boot that hung, which a
                        caller may try again
  --quiet               print only failing commands' output
  -h, --help            this text
EOF
}

die() {
	echo "$prog: $*" >&2
	exit 2
}

kernel_build=
kernel_image=
release=
root=/
modules_root=
modules=()
module_params=()
rxe=0
link=
ip=10.0.2.15
guest_hostname=
cwd=$PWD
envs=()
binds=()
timeout_s=900
boot_timeout_s=0
test_timeout_s=600
memory=2048
smp=2
numa_nodes=1
results=
allow_warn=0
kernel_args=()
tsc_watchdog_off=1
quiet=0

while [ $# -gt 0 ]; do
	case "$1" in
	--kernel-image) kernel_image=$2; shift 2 ;;
	--root) root=$(readlink -f "$2"); shift 2 ;;
	--modules-root) modules_root=$(readlink -f "$2"); shift 2 ;;
	--release) release=$2; shift 2 ;;
	--kernel-build) kernel_build=$2; shift 2 ;;
	--module) modules+=("$(readlink -f "$2")"); shift 2 ;;
	--module-param) module_params+=("$2"); shift 2 ;;
	--rxe) rxe=1; shift ;;
	--link) link=$2; shift 2 ;;
	--ip) ip=$2; shift 2 ;;
	--hostname) guest_hostname=$2; shift 2 ;;
	--cwd) cwd=$(readlink -f "$2"); shift 2 ;;
	--bind) binds+=("$(readlink -f "$2")"); shift 2 ;;
	--env) envs+=("$2"); shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--test-timeout) test_timeout_s=$2; shift 2 ;;
	--memory) memory=$2; shift 2 ;;
	--smp) smp=$2; shift 2 ;;
	--numa-nodes) numa_nodes=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	--allow-kernel-warnings) allow_warn=1; shift ;;
	--kernel-arg) kernel_args+=("$2"); shift 2 ;;
	--kernel-clock) tsc_watchdog_off=0; shift ;;
	--quiet) quiet=1; shift ;;
	--boot-timeout) boot_timeout_s=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	--) shift; break ;;
	-*) usage >&2; die "unknown option $1" ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { usage >&2; die "no command to run"; }

for n in "$timeout_s" "$test_timeout_s" "$memory" "$smp"; do
	[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive whole number"
done
case $numa_nodes in
1) numaargs=() ;;
2) half=$((memory / 2))
	numaargs=(-object "memory-backend-ram,id=mem0,size=${half}M"
		-object "memory-backend-ram,id=mem1,size=$((memory - half))M"
		-numa "node,nodeid=0,cpus=0-$((smp - 1)),memdev=mem0"
		-numa "node,nodeid=1,memdev=mem1") ;;
*) die "--numa-nodes takes 1 or 2, not '$numa_nodes'" ;;
esac
if [ -n "$link" ]; then
	[[ "$link" =~ ^(listen|connect):(/[^,]+)$ ]] && [ ${#BASH_REMATCH[2]} -lt 108 ] ||
		die "--link wants listen:SOCKET or connect:SOCKET (an absolute path of under 108 characters, no commas), not '$link'"
	[ "$rxe" = 1 ] || die "--link needs --rxe (the link is rxe0's device)"
fi
[[ "$ip" =~ ^10\.[0-9]{1,3}\.[0-9]{1,3}\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] &&
	[ "${BASH_REMATCH[1]}" -le 254 ] || die "--ip wants an address 10.X.Y.Z (Z 1-254), not '$ip'"
ip_last=${BASH_REMATCH[1]}
[ -z "$guest_hostname" ] || [[ "$guest_hostname" =~ ^[a-z][a-z0-9-]{0,30}$ ]] ||
	die "--hostname wants a short lowercase name, not '$guest_hostname'"
for e in "${envs[@]+"${envs[@]}"}"; do
	[[ "$e" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants NAME=VALUE, not '$e'"
done
for m in "${modules[@]+"${modules[@]}"}"; do
	[ -f "$m" ] || die "module $m does not exist (build it first)"
done

# --- what to boot -----------------------------------------------------------

[ -d "$root/bin" ] || die "--root $root does not look like a root file system"
[ -n "$modules_root" ] || modules_root=$root
if [ -z "$release" ]; then
	if [ -z "$kernel_build" ]; then
		if [ -d "/lib/modules/$(uname -r)/build" ]; then
			kernel_build=/lib/modules/$(uname -r)/build
		else
			kernel_build=$(ls -d /lib/modules/*/build 2>/dev/null | sort -V | tail -n 1)
		fi
	fi
	[ -n "$kernel_build" ] && [ -d "$kernel_build" ] ||
		die "no kernel build tree found; install linux-headers-amd64 or pass --kernel-build"
	release=$(sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' \
		"$kernel_build/include/generated/utsrelease.h" 2>/dev/null)
	[ -n "$release" ] || die "cannot read the kernel release of $kernel_build"
fi
moddir=${modules_root%/}/lib/modules/$release
[ -d "$moddir/kernel" ] ||
	die "$moddir/kernel is missing; install linux-image-$release (or linux-image-amd64)"
[ -r "$moddir/modules.dep" ] || die "$moddir/modules.dep is missing; run depmod -b $modules_root $release"
[ -n "$kernel_image" ] || kernel_image=${modules_root%/}/boot/vmlinuz-$release
[ -r "$kernel_image" ] ||
	die "kernel image $kernel_image is missing; install linux-image-$release (or linux-image-amd64)"

qemu=$(command -v qemu-system-x86_64) ||
	die "qemu-system-x86_64 is missing; install qemu-system-x86"
busybox=
for b in /bin/busybox /usr/bin/busybox; do
	if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || die "a static busybox is missing; install busybox-static"
command -v cpio >/dev/null || die "cpio is missing; install cpio"

# --- results folder ---------------------------------------------------------

if [ -z "$results" ]; then
	results=$(mktemp -d "${TMPDIR:-/tmp}/mrn-guest.XXXXXX")
else
	mkdir -p "$results" || die "cannot create $results"
	rm -f "$results"/*.out "$results"/*.rc "$results"/serial.log \
		"$results"/dmesg.txt "$results"/setup.* "$results"/done "$results"/kernel-log \
		"$results"/boot-hung
fi
results=$(readlink -f "$results")

# --- the initramfs: busybox, the 9p modules, and an init that switches root -

# Modules the initramfs needs to mount the host's root; their dependencies are
# taken from modules.dep and loaded first (virtio before virtio_ring fails).
declare -A seen=()
ordered=()
add_module() { # $1: path relative to $moddir
	local rel=$1 dep
	[ -n "${seen[$rel]+x}" ] && return
	seen[$rel]=1
	for dep in $(awk -v m="$rel:" '$1 == m { $1 = ""; print }' "$moddir/modules.dep"); do
		add_module "$dep"
	done
	ordered+=("$rel")
}
for name in virtio_pci 9pnet_virtio 9p; do
	# Debian 13 compresses its modules (name.ko.xz).
	rel=$(awk -F: -v n="$name" '{ f = $1; sub(/.*\//, "", f); sub(/\.ko(\.(xz|zst|gz))?$/, "", f) }
		f == n { print $1; exit }' "$moddir/modules.dep")
	if [ -z "$rel" ]; then
		# Built into some kernels: then there is nothing to load.
		grep -q "/$name.ko\$" "$moddir/modules.builtin" 2>/dev/null && continue
		# Packages without modules.builtin (trixie-backports' 7.x) cannot
		# say: taken as built in; if it is not, the guest's set-up fails
		# when it mounts the shares, and says so.
		[ -e "$moddir/modules.builtin" ] || { echo "$prog: $name: not in modules.dep, no modules.builtin: taken as built in" >&2; continue; }
		die "module $name not found in $moddir/modules.dep"
	fi
	add_module "$rel"
done

cache_dir=${XDG_CACHE_HOME:-$HOME/.cache}/mrnotify
mkdir -p "$cache_dir" || die "cannot create $cache_dir"
# Keyed by the modules' folder too: the same release may come from two places.
initrd=$cache_dir/initramfs-$release-$(echo "$moddir" | md5sum | cut -c1-8).cpio.gz
init_src=$(dirname "$(readlink -f "$0")")/guest-init.sh
[ -r "$init_src" ] || die "$init_src is missing"
if [ ! -s "$initrd" ] || [ "$init_src" -nt "$initrd" ] || [ "$0" -nt "$initrd" ]; then
	stage=$(mktemp -d) || die "mktemp failed"
	mkdir -p "$stage"/{bin,dev,proc,sys,mnt,lib/mod}
	cp "$busybox" "$stage/bin/busybox"
	cp "$init_src" "$stage/init"
	chmod 755 "$stage/init"
	: >"$stage/lib/mod/order"
	for rel in "${ordered[@]}"; do
		f="$moddir/$rel"
		base=$(basename "$rel")
		case "$rel" in
		*.ko) cp "$f" "$stage/lib/mod/$base" ;;
		*.ko.xz) xz -dc "$f" >"$stage/lib/mod/${base%.xz}"; base=${base%.xz} ;;
		*.ko.zst) zstd -qdc "$f" >"$stage/lib/mod/${base%.zst}"; base=${base%.zst} ;;
		*) die "unknown module format $rel" ;;
		esac
		echo "$base" >>"$stage/lib/mod/order"
	done
	# Two guests may start at once (check-two-nodes.sh): each writes its
	# own file and renames it into place.
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.$$.tmp" &&
		mv "$initrd.$$.tmp" "$initrd" || die "cannot build the initramfs"
	rm -rf "$stage"
fi

# --- the script the guest runs in its root -----------------------------------

q() { printf '%q' "$1"; }
{
	echo "# generated by $prog"
	echo "MRN_RXE=$rxe"
	echo "MRN_IP=$ip"
	echo "MRN_HOSTNAME=$guest_hostname"
	echo "MRN_CWD=$(q "$cwd")"
	echo "MRN_TEST_TIMEOUT=$test_timeout_s"
	# modprobe in the guest finds the kernel's modules here ('' = the root's)
	if [ "$modules_root" = "$root" ]; then
		echo "MRN_MODULES_ROOT="
	else
		echo "MRN_MODULES_ROOT=$(q "$modules_root")"
		binds+=("$modules_root")
	fi
	printf 'MRN_MODULES=('
	for m in "${modules[@]+"${modules[@]}"}"; do printf ' %s' "$(q "$m")"; done
	echo ' )'
	printf 'MRN_MODULE_PARAMS=('
	for m in "${module_params[@]+"${module_params[@]}"}"; do printf ' %s' "$(q "$m")"; done
	echo ' )'
	printf 'MRN_BINDS=('
	for b in "${binds[@]+"${binds[@]}"}"; do printf ' %s' "$(q "$b")"; done
	echo ' )'
	printf 'MRN_ENV=('
	for e in "${envs[@]+"${envs[@]}"}"; do printf ' %s' "$(q "$e")"; done
	echo ' )'
	printf 'MRN_COMMANDS=('
	for c in "$@"; do printf ' %s' "$(q "$c")"; done
	echo ' )'
} >"$results/guest.conf"
cp "$(dirname "$(readlink -f "$0")")/guest-main.sh" "$results/guest-main.sh" ||
	die "guest-main.sh is missing"

# --- boot ---------------------------------------------------------------------

# Another root: the host's / goes in as a third export, for /run/host.
rootargs=(-virtfs "local,path=$root,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap")
# no_timer_check: under TCG on a loaded host the kernel's check that the
# timer interrupt arrives through the IO-APIC can time out, and 6.12 then
# panics ("IO-APIC + timer doesn't work"); QEMU's timer routing is known good.
append="console=ttyS0 quiet loglevel=4 panic=-1 no_timer_check"
# tsc=nowatchdog: under TCG the guest's TSC is the host's, which is
# synchronized and constant, but a vCPU that the host deschedules between
# reading the TSC and the HPET looks like a TSC gone wrong. The clocksource
# watchdog then marks it unstable at run time, which flips sched_clock's
# static key while the other vCPU runs that code: text patching through
# int3 that TCG does not make atomic across vCPUs, and 6.12 oopsed ("Oops:
# int3" in sched_clock_cpu) in a loaded CI run. Not tsc=reliable, which
# also skips the boot-time synchronization test and so moves 6.1 from the
# HPET to the TSC: a change the fix does not need. Kernels before 5.13
# ignore the option.
[ "$tsc_watchdog_off" = 1 ] && append="$append tsc=nowatchdog"
if [ "$root" != / ]; then
	rootargs+=(-virtfs "local,path=/,mount_tag=hostfs,security_model=none,readonly=on,multidevs=remap")
	append="$append mrn_hostfs=1"
fi
for a in "${kernel_args[@]+"${kernel_args[@]}"}"; do append="$append $a"; done

netargs=()
# Each guest on a link needs its own MAC address: the last byte is that of
# its IP address.
mac=$(printf '52:54:00:12:34:%02x' "$ip_last")
if [ -n "$link" ]; then
	# A Unix stream socket: not UDP datagrams, which the host drops under
	# load (rxe's retransmission timeouts then stall transfers for
	# seconds), nor TCP, whose Nagle and delayed ACKs add 20 ms to every
	# small message.
	if [ "${link%%:*}" = listen ]; then server=on; else server=off; fi
	netargs=(-netdev "stream,id=n0,server=$server,addr.type=unix,addr.path=${link#*:}"
		-device "virtio-net-pci,netdev=n0,mac=$mac")
elif [ "$rxe" = 1 ]; then
	# restrict=on: the guest's network reaches nothing outside qemu. rxe
	# traffic to the guest's own address is looped back inside the guest.
	netargs=(-netdev user,id=n0,restrict=on -device "virtio-net-pci,netdev=n0,mac=$mac")
else
	netargs=(-nic none)
fi

echo "$prog: booting $kernel_image ($release)$([ "$root" != / ] && echo " on $root") with ${#modules[@]} module(s)$([ "$rxe" = 1 ] && echo ' and rxe0'), $# command(s)" >&2
start=$(date +%s)
# The boot watchdog: the guest's init says "guest: running" (or that its
# set-up failed) on the console before its first command.
if [ "$boot_timeout_s" -gt 0 ]; then
	(
		waited=0
		while [ "$waited" -lt "$boot_timeout_s" ]; do
			sleep 5
			waited=$((waited + 5))
			grep -q '^guest: ' "$results/serial.log" 2>/dev/null && exit 0
		done
		: >"$results/boot-hung"
		pkill -KILL -f -- "-virtfs local,path=$results,mount_tag=results" 2>/dev/null
	) &
	watchdog=$!
fi
timeout --foreground -s KILL "$timeout_s" "$qemu" \
	-machine q35 -accel tcg -cpu max -m "$memory" -smp "$smp" \
	"${numaargs[@]+"${numaargs[@]}"}" \
	-nographic -no-reboot -serial stdio -monitor none \
	-kernel "$kernel_image" -initrd "$initrd" \
	-append "$append" "${rootargs[@]}" \
	-virtfs "local,path=$results,mount_tag=results,security_model=none,multidevs=remap" \
	"${netargs[@]}" </dev/null >"$results/serial.log" 2>&1
qrc=$?
elapsed=$(($(date +%s) - start))
[ -n "${watchdog:-}" ] && { kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null; }
if [ -e "$results/boot-hung" ]; then
	echo "$prog: the guest did not start its first command within ${boot_timeout_s}s and was killed; last lines of the console ($results/serial.log):" >&2
	tail -n 20 "$results/serial.log" >&2
	exit 4
fi

# --- report -------------------------------------------------------------------

status=0
if [ ! -e "$results/done" ]; then
	if [ $qrc -eq 137 ] || [ $qrc -eq 124 ]; then
		echo "$prog: the guest did not finish within ${timeout_s}s and was killed" >&2
		status=3
	else
		echo "$prog: the guest stopped before finishing (qemu exit $qrc)" >&2
		status=1
	fi
	# A long call trace pushes a crash report's head out of the last lines.
	if crash=$(sh "$(dirname "$(readlink -f "$0")")/kernel-crash.sh" "$results/serial.log"); then
		echo "$prog: the guest's kernel crashed; the report:" >&2
		echo "$crash" >&2
	fi
	echo "$prog: last lines of the console ($results/serial.log):" >&2
	tail -n 40 "$results/serial.log" >&2
fi
if [ -e "$results/setup.err" ]; then
	echo "$prog: guest set-up failed:" >&2
	cat "$results/setup.err" >&2
	status=1
fi

passed=0
failed=0
skipped=0
i=0
for c in "$@"; do
	i=$((i + 1))
	rc=$(cat "$results/$i.rc" 2>/dev/null)
	if [ -z "$rc" ]; then
		label="NOT RUN"
		failed=$((failed + 1))
		[ $status -ne 0 ] || status=1
	elif [ "$rc" = 0 ]; then
		label="ok"
		passed=$((passed + 1))
	elif [ "$rc" = 77 ]; then
		# automake's skip: reported as such, and not a failure.
		label="SKIP"
		skipped=$((skipped + 1))
	else
		label="FAILED (exit $rc)"
		failed=$((failed + 1))
		[ $status -ne 0 ] || status=1
	fi
	if [ "$quiet" = 0 ] || [ "$label" != ok ]; then
		echo "===== guest: $c"
		[ -r "$results/$i.out" ] && cat "$results/$i.out"
	fi
	echo "===== guest: $c: $label"
done

if [ -r "$results/dmesg.txt" ]; then
	bad=$(grep -E 'WARNING:|BUG:|Oops|general protection|possible circular locking|lockdep is turned off|INFO: task .* blocked|KASAN:|KFENCE:|UBSAN:|refcount_t:|kmemleak' \
		"$results/dmesg.txt")
	if [ -n "$bad" ]; then
		echo "$prog: the guest kernel log reports problems ($results/dmesg.txt):" >&2
		echo "$bad" >&2
		[ "$allow_warn" = 1 ] || { [ $status -ne 0 ] || status=1; }
		echo bad >"$results/kernel-log"
	else
		echo clean >"$results/kernel-log"
	fi
fi

echo "$prog: $passed of $# command(s) passed$([ $skipped -gt 0 ] && echo ", $skipped skipped") in ${elapsed}s; results in $results" >&2
exit $status

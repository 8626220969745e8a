#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# An upgrade while a job holds /dev/mrnotify open, in the guest: the
# installed packages (version OLD, module loaded) are upgraded to NEW with
# dpkg, as an administrator would, while mrn_holder keeps watching and
# unmapping memory. The guest's root is read-only: the upgrade writes into
# overlays (tmpfs) on /etc, /usr and /var, which is what dpkg and DKMS touch.
#   guest-upgrade.sh OLD NEW DEBS_DIR HOLDER
# Checks: dpkg succeeds (DKMS builds NEW for this kernel), the loaded module
# is not unloaded (the maintainer scripts never rmmod; the kernel would
# refuse anyway while the device is open), the job keeps seeing every unmap
# through the upgrade, and once the job is gone the module can be replaced
# by the new one (what the next boot or an idle node does).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# The result verbs (TAP): tap.sh sits beside these scripts in the install
# root, in tests/harness in the tree.
. "$( [ -r "$here/tap.sh" ] && echo "$here" || echo "$here/../harness")/tap.sh"
old=$1 new=$2 debs=$3 holder=$4
rel=$(uname -r)
w=$(mktemp -d)

# The guest's /dev is a bare devtmpfs; udev would make /dev/fd, which
# DKMS's <(...) needs.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
modprobe mrnotify
check "before: DKMS has $old installed for $rel" sh -c "dkms status mrnotify 2>/dev/null | grep -q '$old.*$rel.*installed'"
"$holder" "$w/ready" "$w/stop" >"$w/holder.out" 2>&1 &
hpid=$!
for _ in $(seq 300); do [ -e "$w/ready" ] && break; sleep 0.1; done
check "the job holds /dev/mrnotify open and sees unmaps" test -e "$w/ready"
echo "    /sys/module/mrnotify/refcnt: $(cat /sys/module/mrnotify/refcnt)"

# Loaded from the chroot: the kernel's own request would run the
# initramfs's modprobe, which has none.
modprobe overlay
for d in etc usr var; do
	mkdir -p "$w/ov/$d/upper" "$w/ov/$d/work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$w/ov/$d/upper,workdir=$w/ov/$d/work" "/$d" ||
		{ fail "cannot put a writable overlay on /$d"; finish; }
done
DEBIAN_FRONTEND=noninteractive dpkg -i "$debs"/*.deb >"$w/dpkg.out" 2>&1
rc=$?
sed 's/^/    /' "$w/dpkg.out" | tail -n 25
check "dpkg -i (upgrade $old -> $new) exits 0 while the job runs (got $rc)" [ $rc -eq 0 ]
check "after: DKMS has $new installed for $rel" sh -c "dkms status mrnotify 2>/dev/null | grep -q '$new.*$rel.*installed'"
check "after: DKMS no longer has $old" sh -c "! dkms status mrnotify 2>/dev/null | grep -q '$old'"
check "after: dpkg says $new" sh -c "[ \"\$(dpkg-query -W -f='\${Version}' mrnotify-dkms)\" = '$new' ]"
check "the running module was not unloaded" test -d /sys/module/mrnotify
check "the job is still running" kill -0 $hpid
# What a maintainer script that tried to unload it would meet.
if rmmod mrnotify 2>"$w/rmmod.err"; then
	fail "rmmod of the busy module succeeded"
else
	pass "rmmod of the busy module is refused: $(cat "$w/rmmod.err")"
fi
: >"$w/stop"
wait $hpid
rc=$?
cat "$w/holder.out" | sed 's/^/    /'
check "the job kept seeing every unmap through the upgrade (exit $rc)" [ $rc -eq 0 ]
# Idle now: replace the module by the one DKMS built for $new.
check "idle: modprobe -r mrnotify" modprobe -r mrnotify
check "idle: modprobe mrnotify" modprobe mrnotify
built=$(ls /var/lib/dkms/mrnotify/"$new"/"$rel"/*/module/mrnotify.ko* 2>/dev/null | head -n 1)
loaded=$(modinfo -n mrnotify 2>/dev/null)
echo "    DKMS built for $new: ${built:-(nothing)}; modprobe's file: ${loaded:-(none)}"
check "idle: the module now loaded is the one DKMS built for $new" \
	sh -c "[ -n '$built' ] && [ -n '$loaded' ] && cmp -s '$built' '$loaded'"
check "idle: /dev/mrnotify is back" test -c /dev/mrnotify
finish

#!/usr/bin/env bash
# Runs inside the Debian 12 VM (scripts/vm/cgroup-v2.sh boots it): Hearth as
# the shipped systemd unit on a real cgroup v2 kernel, checked from outside
# as an operator would — layout, limits, pauses, a SIGKILL, a read-only
# cgroupfs. Every check names what it expected; the first failure ends the
# job with a non-zero status.
set -euo pipefail
. /mnt/out/env # REPO: the host's checkout, mounted at the same path
mkdir -p "$REPO"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 repo "$REPO"

t0=$(date +%s)
step() { echo "== [$(($(date +%s) - t0)) s] $*"; }
fail() {
  echo "FAILED: $*"
  for unit in hearth hearth-ns hearth-pod; do
    systemctl status "$unit" --no-pager -l 2>/dev/null | tail -20 || true
    journalctl -u "$unit" --no-pager | tail -30
  done
  echo "AppArmor's refusals:"
  journalctl -k --no-pager | grep -i 'apparmor="DENIED"' | tail -20 || true
  exit 1
}
check() { local what=$1; shift; if "$@"; then echo "ok: $what"; else fail "$what"; fi; }

step "machine: $(uname -r), $(systemctl --version | head -1), /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup)"
check "the cgroup filesystem is v2" test "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs
# What systemd itself enables at the root for a delegated unit, to tell
# its writes from Hearth's.
systemd-run --quiet --unit probe -p Delegate=yes sleep 30
root_control_before=$(cat /sys/fs/cgroup/cgroup.subtree_control)
systemctl stop probe
mount_units_before=$(systemctl list-units --all -t mount --no-legend | wc -l)

step "install the shipped unit"
install -m 0755 /mnt/out/hearth /usr/local/bin/hearth
install -m 0644 "$REPO/deploy/systemd/hearth.service" /etc/systemd/system/hearth.service
systemctl daemon-reload
export HEARTH_DATA_DIR=/var/lib/hearth
svc=/sys/fs/cgroup/system.slice/hearth.service

# Waits until the daemon started by systemd (pid $1, or any) answers;
# fails at once if its unit ($UNIT) did.
UNIT=hearth
wait_up() {
  local want=${1:-} deadline=$(($(date +%s) + 300))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    systemctl is-failed --quiet "$UNIT" && fail "$UNIT failed to start"
    if [ -s $HEARTH_DATA_DIR/server.json ] && hearth status >/dev/null 2>&1; then
      [ -z "$want" ] || grep -q "\"pid\":$want\b" $HEARTH_DATA_DIR/server.json && return 0
    fi
    sleep 1
  done
  fail "hearth did not answer within 300 s"
}
url() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/server.json"))["url"])' "$HEARTH_DATA_DIR"; }
token() { cat $HEARTH_DATA_DIR/token; }
deploy() { # name file memory_mib: deploys stdin
  local runtime=python; [[ $2 == *.py ]] || runtime=node
  curl -fsS -X POST -H "Authorization: Bearer $(token)" -H 'Content-Type: application/octet-stream' --data-binary @- \
    "$(url)/v1/functions/$1?runtime=$runtime&file_name=$2&memory_mib=$3&timeout_ms=20000" >/dev/null
}
call() { curl -sS -o /tmp/body -w '%{http_code}' -X POST -H "Authorization: Bearer $(token)" "$(url)/fn/admin/$1" || true; }

systemctl start hearth
wait_up
main=$(systemctl show -p MainPID --value hearth)
step "hearth up (pid $main)"
hearth status | tee /tmp/status
check "status says cgroups v2" grep -q "cgroups v2" /tmp/status
check "nothing about cgroups is degraded" bash -c '! grep -qiE "^  - .*cgroup" /tmp/status'
check "the daemon moved itself into a leaf of its own unit" grep -qx "$main" $svc/daemon/cgroup.procs
check "its unit's group holds no process" test -z "$(cat $svc/cgroup.procs)"
check "controllers are enabled from the unit down" grep -q "memory" $svc/cgroup.subtree_control
check "nothing is made at the root of the hierarchy" test ! -e /sys/fs/cgroup/hearth
check "the root's controllers are what systemd gives any delegated unit ($root_control_before)" test "$(cat /sys/fs/cgroup/cgroup.subtree_control)" = "$root_control_before"

step "Python and Node.js functions run in sandbox groups below the unit"
cat >/tmp/h.py <<'EOF'
import os, time
def handler(event, context):
    what = (event["queryStringParameters"] or {}).get("what")
    if what == "mem":
        hog = []
        while True:
            hog.append(bytearray(8 << 20))
    if what == "fork":
        n = 0
        try:
            while n < 10000:
                if os.fork() == 0:
                    time.sleep(20)
                    os._exit(0)
                n += 1
        except OSError:
            return f"stopped after {n}"
        return "fork bomb not stopped"
    if what == "spin":
        # Two processes spin: without a CPU limit they take two cores.
        end = time.clock_gettime(time.CLOCK_MONOTONIC) + float(event["queryStringParameters"]["s"])
        pid = os.fork()
        while time.clock_gettime(time.CLOCK_MONOTONIC) < end:
            pass
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        t = os.times()
        return f"{t.user + t.system + t.children_user + t.children_system:.2f}"
    return "fine"
EOF
deploy hostile h.py 64 </tmp/h.py
# Its own sandbox: the fork bomb's children hold the hostile one's pids.
deploy spinner h.py 64 </tmp/h.py
deploy js index.mjs 128 <<'EOF'
export default { async fetch(req) { return new Response("node " + process.version); } };
EOF
check "a Python call answers" test "$(call 'hostile?what=x')" = 200
check "a Node.js call answers" test "$(call js)" = 200
instance=$(find $svc -mindepth 1 -maxdepth 1 -type d ! -name daemon | head -1)
check "sandbox groups are below the unit ($instance)" test -n "$instance"
check "a sandbox group carries a memory limit" grep -rqx 67108864 --include=memory.max "$instance"
check "a sandbox group carries a CPU limit" grep -rqx "100000 100000" --include=cpu.max "$instance"
check "a paused handler's group is frozen (cgroup.freeze)" grep -rqx 1 --include=cgroup.freeze "$instance"

step "limits hold"
code=$(call 'hostile?what=mem')
check "memory past 64 MiB is out_of_memory ($code: $(head -c 200 /tmp/body))" grep -q out_of_memory /tmp/body
check "the unit survives its sandbox's OOM kill (OOMPolicy=continue)" systemctl is-active --quiet hearth
code=$(call 'hostile?what=fork')
check "a fork bomb stops at the pids limit ($(cat /tmp/body))" grep -q "stopped after" /tmp/body
code=$(call 'spinner?what=spin&s=3')
# Two cores unlimited (6 s); one with cpu.max, give or take the emulated
# guest's coarse accounting.
check "two spinning processes get about one core between them ($(cat /tmp/body) s of CPU in 3 s)" \
  python3 -c "import sys; sys.exit(0 if float(open('/tmp/body').read()) <= 4.5 else 1)"
throttled=$(cat $(find "$instance" -name cpu.stat) | awk '$1 == "nr_throttled" { n += $2 } END { print n + 0 }')
check "the kernel throttled them by cpu.max ($throttled periods)" test "$throttled" -gt 0
check "the unit is still active" systemctl is-active --quiet hearth
mount_units_after=$(systemctl list-units --all -t mount --no-legend | wc -l)
check "sandbox mounts are not systemd mount units ($mount_units_before before, $mount_units_after after)" \
  test "$mount_units_after" -le "$mount_units_before"
check "sandbox mounts are not in the host's mount namespace" bash -c '! grep -q /var/lib/hearth /proc/self/mountinfo'

step "SIGKILL of the daemon: its sandboxes go with its unit"
sandboxes=$(cat $(find "$instance" -name cgroup.procs))
check "sandboxes are running before the kill ($(echo $sandboxes))" test -n "$sandboxes"
systemctl kill -s SIGKILL --kill-whom=main hearth
deadline=$(($(date +%s) + 60))
while [ "$(systemctl show -p MainPID --value hearth)" = "$main" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
wait_up
new=$(systemctl show -p MainPID --value hearth)
check "systemd restarted hearth (pid $main, then $new)" test "$new" != "$main"
left=$(for p in $sandboxes; do [ -d /proc/$p ] && echo $p; done || true)
check "no sandbox of the killed daemon is left (${left:-none})" test -z "$left"
check "after the restart a Python call answers" test "$(call 'hostile?what=x')" = 200

step "read-only cgroupfs (ProtectControlGroups=yes): degraded, and Python still works"
mkdir -p /etc/systemd/system/hearth.service.d
printf '[Service]\nProtectControlGroups=yes\n' >/etc/systemd/system/hearth.service.d/ro.conf
systemctl daemon-reload
systemctl restart hearth
wait_up "$(systemctl show -p MainPID --value hearth)"
hearth status | tee /tmp/status
check "status says DEGRADED and why" grep -q "no cgroups" /tmp/status
check "a Python call answers" test "$(call 'hostile?what=x')" = 200
check "a Node.js call answers" test "$(call js)" = 200
rm -r /etc/systemd/system/hearth.service.d
systemctl daemon-reload

step "in a container's own cgroup namespace (unshare -C, as a container runtime does on v2)"
systemd-run --unit hearth-ns -p Delegate=yes -p OOMPolicy=continue -p PrivateMounts=yes \
  unshare --cgroup --mount --propagation private sh -c \
  'umount -l /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec /usr/local/bin/hearth --data-dir /var/lib/hearth-ns up --listen 127.0.0.1:8081 --examples false'
export HEARTH_DATA_DIR=/var/lib/hearth-ns UNIT=hearth-ns
wait_up
ns=/sys/fs/cgroup/system.slice/hearth-ns.service
nsmain=$(systemctl show -p MainPID --value hearth-ns)
hearth status | tee /tmp/status
check "status says cgroups v2" grep -q "cgroups v2" /tmp/status
check "it sees its namespace's root as its group and moved into a leaf of it" grep -qx "$nsmain" $ns/daemon/cgroup.procs
deploy hostile h.py 64 </tmp/h.py
code=$(call 'hostile?what=mem')
check "memory past 64 MiB is out_of_memory in the namespace ($code)" grep -q out_of_memory /tmp/body
check "its sandbox groups are below its own unit" bash -c "grep -rqx 67108864 --include=memory.max $ns"
systemctl stop hearth-ns
export HEARTH_DATA_DIR=/var/lib/hearth UNIT=hearth

step "stop: nothing is left"
systemctl stop hearth
check "the unit's group is gone" test ! -e $svc
check "no mount of the data directory is left in the host's namespace" bash -c '! grep -q /var/lib/hearth /proc/self/mountinfo'

step "as the Kubernetes node pod runs (deploy/kubernetes/base/node.yaml): its own cgroup namespace mounted read-only, its capabilities, its seccomp and AppArmor profiles"
check "AppArmor is enabled" test "$(cat /sys/module/apparmor/parameters/enabled)" = Y
profiles=$REPO/deploy/kubernetes/profiles
apparmor_parser --replace "$profiles/hearth-node.apparmor"
check "the AppArmor profile is loaded" grep -q "^hearth-node (enforce)" /sys/kernel/security/apparmor/profiles
# The capabilities the DaemonSet adds, as setpriv's bounding set.
caps=$(awk '/capabilities:/{c=1} c&&/add:/{a=1;next} a&&/^ *- [A-Z_]+$/{printf ",+%s", tolower($2)} a&&/appArmorProfile:/{exit}' \
  "$REPO/deploy/kubernetes/base/node.yaml")
check "the DaemonSet adds capabilities ($caps)" test -n "$caps"
# `confined CMD...` runs CMD as the pod's container is confined: the
# bounding set, the AppArmor profile, the seccomp profile (loaded by
# libseccomp, as runc does). A script, so systemd's units can run it too.
cat >/usr/local/bin/confined <<EOF
#!/bin/bash
exec setpriv --bounding-set "-all$caps" --inh-caps -all -- \\
  aa-exec -p hearth-node -- \\
  python3 "$REPO/scripts/seccomp-exec.py" "$profiles/hearth-node.json" -- "\$@"
EOF
chmod 0755 /usr/local/bin/confined
# A container runtime's view: a cgroup namespace whose root is the pod's
# group, mounted read-only, in a mount namespace of its own.
systemd-run --unit hearth-pod -p Delegate=yes -p OOMPolicy=continue \
  unshare --cgroup --mount --propagation private bash -c \
  'umount -l /sys/fs/cgroup && mount -t cgroup2 -o ro,nosuid,nodev,noexec cgroup2 /sys/fs/cgroup && exec confined /usr/local/bin/hearth --data-dir /var/lib/hearth up --listen 127.0.0.1:8082 --examples false --remount-cgroupfs true'
export UNIT=hearth-pod
wait_up
pod=/sys/fs/cgroup/system.slice/hearth-pod.service
podmain=$(systemctl show -p MainPID --value hearth-pod)
hearth status | tee /tmp/status
check "status says cgroups v2" grep -q "cgroups v2" /tmp/status
check "nothing is degraded" bash -c '! grep -q DEGRADED /tmp/status'
check "it runs under the AppArmor profile" grep -q "^hearth-node (enforce)" /proc/$podmain/attr/current
check "it runs under a seccomp filter" grep -qx "Seccomp:	2" <(grep Seccomp: /proc/$podmain/status)
check "it remounted its namespace's cgroupfs read-write and moved into a leaf of it" grep -qx "$podmain" $pod/daemon/cgroup.procs
# The functions deployed above are in its data directory's store.
check "a Python call answers" test "$(call 'hostile?what=x')" = 200
check "a Node.js call answers" test "$(call js)" = 200
code=$(call 'hostile?what=mem')
check "memory past 64 MiB is out_of_memory ($code)" grep -q out_of_memory /tmp/body
check "its sandbox groups are below the pod's group" bash -c "grep -rqx 67108864 --include=memory.max $pod"
check "the host's cgroupfs is still read-write for the host, and nothing was made at its root" test ! -e /sys/fs/cgroup/hearth
# What a process that took the node over tries, confined as the node is,
# in a mount namespace of its own (as the pod's).
escape() { unshare --mount --propagation private confined bash -c "$1" >/dev/null 2>&1; }
export -f escape
mkdir -p /tmp/escape /var/lib/hearth/escape
check "mounting a cgroup v1 hierarchy (the release_agent escape) is refused" \
  bash -c '! escape "mount -t cgroup -o none,name=escape none /tmp/escape"'
check "... and it is the AppArmor profile that refuses it (root with these capabilities may, unconfined)" \
  unshare --mount --propagation private bash -c 'mount -t cgroup -o none,name=escape none /tmp/escape'
check "mounting proc is refused" bash -c '! escape "mount -t proc proc /tmp/escape"'
for src in /proc/sys /proc /sys /dev; do
  check "binding $src into the data directory is refused" bash -c "! escape 'mount --bind $src /var/lib/hearth/escape'"
  check "binding $src onto the cgroup mount is refused" bash -c "! escape 'mount --bind $src /sys/fs/cgroup'"
done
check "writing the kernel's core_pattern is refused" bash -c '! escape "cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern"'
check "reading the host's disk is refused" bash -c '! escape "head -c 1 /dev/vda"'
check "making a block device node is refused" bash -c '! escape "mknod /tmp/escape/disk b 254 0"'
check "the mounts the sandbox builder makes are allowed (a system directory bound into the data directory, a scratch tmpfs)" \
  escape "mount --rbind /usr /var/lib/hearth/escape && mount -t tmpfs -o nosuid,nodev tmpfs /var/lib/hearth/escape"
systemctl stop hearth-pod
check "the pod's group is gone with it" test ! -e $pod
step "passed"

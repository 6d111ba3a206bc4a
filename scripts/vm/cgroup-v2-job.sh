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
  for unit in hearth hearth-ns; do
    systemctl status "$unit" --no-pager -l 2>/dev/null | tail -20 || true
    journalctl -u "$unit" --no-pager | tail -30
  done
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
step "passed"

#!/usr/bin/env bash
# The process tier on a real cgroup v2 host: boots the Debian 12 image
# (scripts/vm/image.sh; systemd 252, kernel 6.1) under QEMU and runs
# scripts/vm/cgroup-v2-job.sh in it against this checkout's hearth binary,
# installed as deploy/systemd/hearth.service. Prints the job's output and
# exits with its status.
#
#   scripts/vm/cgroup-v2.sh [path/to/hearth [job.sh]]
#   (default: the debug build, and scripts/vm/cgroup-v2-job.sh)
#
# QEMU emulates the CPU (-accel tcg) unless /dev/kvm runs a stock kernel
# (HEARTH_VM_ACCEL=kvm); user networking with restrict=on: the guest has a
# network interface and reaches nothing outside itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
bin=$(realpath "${1:-${CARGO_TARGET_DIR:-$HOME/.cache/hearth/target}/debug/hearth}")
[ -x "$bin" ] || { echo "vm: no hearth binary at $bin (cargo build -p hearth)" >&2; exit 1; }
image=$(scripts/vm/image.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cp "${2:-scripts/vm/cgroup-v2-job.sh}" "$out/job.sh"
# Without its debug information (most of a debug build's size), read by
# the guest over 9p.
objcopy --strip-debug "$bin" "$out/hearth"
printf 'REPO=%q\n' "$repo" >"$out/env"
qemu-img create -q -f qcow2 -b "$image/root.img" -F raw "$out/overlay.qcow2"
started=$(date +%s)
echo "vm: booting $image (${HEARTH_VM_ACCEL:-tcg})" >&2
set +e
timeout "${HEARTH_VM_TIMEOUT_S:-2400}" qemu-system-x86_64 \
  -accel "${HEARTH_VM_ACCEL:-tcg}" -cpu max -smp 2 -m 3072 \
  -nographic -no-reboot -serial file:"$out/console.log" -monitor none \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 quiet panic=-1 systemd.show_status=false" \
  -drive file="$out/overlay.qcow2",if=virtio,format=qcow2 \
  -virtfs local,path="$out",mount_tag=out,security_model=none \
  -virtfs local,path="$repo",mount_tag=repo,security_model=none,readonly=on \
  -netdev user,id=n0,restrict=on \
  -device virtio-net-pci,netdev=n0 >/dev/null 2>"$out/qemu.err"
qemu=$?
set -e
cat "$out/job.log" 2>/dev/null || true
echo "vm: ran in $(($(date +%s) - started)) s (boot, job and power-off; qemu exit $qemu)" >&2
if [ ! -s "$out/job.rc" ]; then
  echo "vm: the job did not finish; the console's last lines:" >&2
  tail -40 "$out/console.log" >&2 || true
  cat "$out/qemu.err" >&2 || true
  exit 1
fi
rc=$(cat "$out/job.rc")
[ "$rc" -eq 0 ] || tail -60 "$out/journal.log" 2>/dev/null >&2 || true
exit "$rc"

#!/usr/bin/env bash
# Builds, once, the Debian 12 image the cgroup v2 tests boot (systemd 252,
# kernel 6.1, cgroup2fs: what users run) and prints its directory. The
# image is cached outside the checkout and rebuilt only when this recipe
# changes (its hash is in the cache's name); debootstrap takes minutes.
#
# The image holds no Hearth: each run mounts the checkout and the build
# directory read-only at their host paths over 9p (scripts/vm/run.sh), so a
# test binary finds its fixtures and the daemon where cargo put them.
set -euo pipefail

need=()
for pkg in debootstrap qemu-system-x86 qemu-utils e2fsprogs; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "vm: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

recipe=$(sha256sum "$0" | cut -c1-12)
cache="${HEARTH_VM_CACHE:-$HOME/.cache/hearth/vm}/debian12-$recipe"
if [ -f "$cache/root.img" ] && [ -f "$cache/vmlinuz" ] && [ -f "$cache/initrd.img" ]; then
  echo "$cache"
  exit 0
fi
mkdir -p "$(dirname "$cache")"
# Older recipes' images are of no further use.
find "$(dirname "$cache")" -mindepth 1 -maxdepth 1 -name 'debian12-*' ! -path "$cache" -exec rm -rf {} +
work="$cache.building"
rm -rf "$work"
mkdir -p "$work"
trap 'umount -R "$work/root" 2>/dev/null || true; rm -rf "$work"' EXIT
started=$(date +%s)

# What the process tier runs (python3, node) and what a node's host has
# (systemd as PID 1, udev, a kernel with its initramfs); nothing else.
echo "vm: debootstrap bookworm (once; minutes)" >&2
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,udev,kmod,linux-image-amd64,python3,nodejs,procps,iproute2,util-linux,curl,ca-certificates,apparmor,python3-seccomp \
  bookworm "$work/root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
  { tail -30 "$work/debootstrap.log" >&2; exit 1; }

root="$work/root"
echo hearth-vm >"$root/etc/hostname"
cat >"$root/etc/fstab" <<'EOF'
/dev/vda  /          ext4  rw,relatime                                 0 1
out       /mnt/out   9p    trans=virtio,version=9p2000.L,msize=262144  0 0
EOF
mkdir -p "$root/mnt/out"
printf '9p\n9pnet_virtio\n' >"$root/etc/modules-load.d/9p.conf"
# A network interface, for what a host has (user networking, restrict=on:
# it reaches nothing outside the guest).
mkdir -p "$root/etc/systemd/network"
cat >"$root/etc/systemd/network/10-eth.network" <<'EOF'
[Match]
Name=en* eth*
[Network]
DHCP=ipv4
EOF
ln -sf /lib/systemd/system/systemd-networkd.service \
  "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
# The job: the host writes /mnt/out/job.sh before each boot; its output,
# exit code and the guest's journal come back in /mnt/out, then the guest
# powers off (qemu runs with -no-reboot and exits).
cat >"$root/etc/systemd/system/hearth-vm-job.service" <<'EOF'
[Unit]
Description=Runs the host's job (/mnt/out/job.sh) and powers off
After=multi-user.target network-online.target
Wants=network-online.target
RequiresMountsFor=/mnt/out

[Service]
Type=oneshot
ExecStart=/bin/bash -c 'bash /mnt/out/job.sh >/mnt/out/job.log 2>&1; echo $? >/mnt/out/job.rc'
ExecStopPost=/bin/bash -c 'journalctl -b --no-pager >/mnt/out/journal.log 2>&1; systemctl --no-block poweroff'
TimeoutStartSec=infinity
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/hearth-vm-job.service \
  "$root/etc/systemd/system/multi-user.target.wants/hearth-vm-job.service"
# Root without a password on the serial console, for looking around by hand.
sed -i 's/^root:[^:]*:/root::/' "$root/etc/shadow"
# Quiet what an emulated boot need not wait for.
ln -sf /dev/null "$root/etc/systemd/system/systemd-timesyncd.service"
ln -sf /dev/null "$root/etc/systemd/system/apt-daily.timer"
ln -sf /dev/null "$root/etc/systemd/system/apt-daily-upgrade.timer"
rm -f "$root"/var/cache/apt/archives/*.deb

cp "$root"/boot/vmlinuz-* "$work/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/initrd.img"
mkfs.ext4 -q -F -L root -d "$root" "$work/root.img" 4G >/dev/null
rm -rf "$root"
rm -f "$work/debootstrap.log"
mv "$work" "$cache"
trap - EXIT
echo "vm: image built in $(($(date +%s) - started)) s: $cache" >&2
echo "$cache"

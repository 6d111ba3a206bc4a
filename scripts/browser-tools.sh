#!/usr/bin/env bash
# What the console's tests need: Debian's chromium and its chromedriver
# (the tests drive the system browser; nothing downloads a browser of its
# own). Sourced after scripts/setup.sh by test.sh.
set -euo pipefail

need=()
for pkg in chromium chromium-driver; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} from Debian (the console's browser tests)" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

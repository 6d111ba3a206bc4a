#!/usr/bin/env bash
# What checking `/metrics` needs: Prometheus' promtool, from Debian's
# `prometheus` package (without its recommends). The package would also
# run a Prometheus server under systemd; it is stopped and disabled, as
# only the tool is wanted. Sourced after scripts/setup.sh by test.sh.
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1; then
  echo "setup: installing prometheus (for promtool) from Debian" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

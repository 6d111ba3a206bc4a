#!/usr/bin/env bash
# What checking the Kubernetes manifests needs: kubectl (its kustomize
# renders the overlays; Debian's kubernetes-client, unless a kubectl is
# there already) and kubernetes-validate (PyPI, in a virtualenv of its
# own), and what runs a node pod's confinement on this machine: libseccomp's
# Python binding (python3-seccomp) for scripts/seccomp-exec.py, and
# util-linux's setpriv. Sourced after scripts/setup.sh by test.sh.
set -euo pipefail

if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: installing kubernetes-client (kubectl) from Debian" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kubernetes-client >/dev/null
fi

need=()
/usr/bin/python3 -c "import seccomp" 2>/dev/null || need+=(python3-seccomp)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} from Debian" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

KV_VENV="$HOME/.cache/hearth/kubernetes-validate-1.37.0"
if [ ! -x "$KV_VENV/bin/kubernetes-validate" ]; then
  echo "setup: installing kubernetes-validate 1.37.0 with pip (once)" >&2
  /usr/bin/python3 -m venv "$KV_VENV"
  "$KV_VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==1.37.0"
fi
export KUBERNETES_VALIDATE="$KV_VENV/bin/kubernetes-validate"

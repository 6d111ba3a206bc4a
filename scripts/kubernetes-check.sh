#!/usr/bin/env bash
# Renders every overlay in deploy/kubernetes with `kubectl kustomize` and
# validates every object against the Kubernetes schemas
# (kubernetes-validate, strict: an unknown field is an error). Exits
# non-zero on any error. Sourced setup installs kubectl and the validator.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${TMPDIR:-/tmp}/hearth-kubernetes"
rm -rf "$out" && mkdir -p "$out"
for overlay in deploy/kubernetes/overlays/*/; do
  name=$(basename "$overlay")
  kubectl kustomize "$overlay" 2> >(grep -v "is deprecated" >&2) > "$out/$name.yaml"
  objects=$(grep -c '^kind:' "$out/$name.yaml")
  "$KUBERNETES_VALIDATE" --strict --quiet "$out/$name.yaml"
  echo "kubernetes: overlay $name renders $objects objects, all valid"
done

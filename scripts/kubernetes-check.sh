#!/usr/bin/env bash
# Renders every overlay in deploy/kubernetes with `kubectl kustomize` and
# validates every object against the Kubernetes schemas
# (kubernetes-validate, strict: an unknown field is an error). Exits
# non-zero on any error. Sourced setup installs kubectl and the validator.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${TMPDIR:-/tmp}/hearth-kubernetes"
rm -rf "$out" && mkdir -p "$out"
# The dev overlay's secrets are made at random, never committed.
deploy/kubernetes/overlays/dev/secrets.sh >/dev/null
for overlay in deploy/kubernetes/overlays/*/; do
  name=$(basename "$overlay")
  kubectl kustomize "$overlay" 2> >(grep -v "is deprecated" >&2) > "$out/$name.yaml"
  objects=$(grep -c '^kind:' "$out/$name.yaml")
  # The oldest Kubernetes the manifests are written for (appArmorProfile,
  # the preStop sleep action) and the newest the validator knows.
  for version in 1.30.0 1.37.0; do
    "$KUBERNETES_VALIDATE" --strict --quiet -k "$version" "$out/$name.yaml"
  done
  echo "kubernetes: overlay $name renders $objects objects, all valid on Kubernetes 1.30 and 1.37"
done

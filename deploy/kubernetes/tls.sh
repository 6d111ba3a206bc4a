#!/usr/bin/env bash
# Makes the cluster's certificates (make-certs.sh) and stores them as the
# Secret hearth-tls in namespace hearth. Run once before `kubectl apply
# -k`; again (then restart the pods) to replace them. Needs openssl and
# kubectl.
# Usage: deploy/kubernetes/tls.sh [DAYS]   (default 365)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$here/make-certs.sh" "$dir" "${1:-365}"
kubectl get namespace hearth >/dev/null 2>&1 || kubectl create namespace hearth
kubectl -n hearth create secret generic hearth-tls \
  --from-file="$dir/ca.crt" --from-file="$dir/tls.crt" --from-file="$dir/tls.key" \
  --dry-run=client -o yaml | kubectl apply -f -
echo "Secret hearth/hearth-tls holds the cluster's CA and member certificate."
echo "The CA's key was not kept: run this again to renew, then restart the pods."

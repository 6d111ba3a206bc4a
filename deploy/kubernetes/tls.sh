#!/usr/bin/env bash
# Makes the cluster's certificates (make-certs.sh) and stores them as
# Secrets: hearth-tls (the CA and every member's certificate) in both
# namespaces, hearth and hearth-nodes, and hearth-postgres-tls (the dev
# overlay's PostgreSQL's, signed by the same CA) in hearth. Run once before
# `kubectl apply -k`; again (then restart the pods) to replace them. Needs
# openssl and kubectl.
# Usage: deploy/kubernetes/tls.sh [DAYS]   (default 365)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$here/make-certs.sh" "$dir" "${1:-365}"
for ns in hearth hearth-nodes; do
  kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"
  kubectl -n "$ns" create secret generic hearth-tls \
    --from-file="$dir/ca.crt" --from-file="$dir/tls.crt" --from-file="$dir/tls.key" \
    --dry-run=client -o yaml | kubectl apply -f -
done
kubectl -n hearth create secret tls hearth-postgres-tls \
  --cert="$dir/postgres.crt" --key="$dir/postgres.key" \
  --dry-run=client -o yaml | kubectl apply -f -
echo "Secrets hearth/hearth-tls and hearth-nodes/hearth-tls hold the cluster's CA"
echo "and member certificate; hearth/hearth-postgres-tls the dev PostgreSQL's."
echo "The CA's key was not kept: run this again to renew, then restart the pods."

#!/usr/bin/env bash
# Makes the cluster's certificates and stores them as the Secret
# hearth-tls in namespace hearth: a CA, and one member certificate it
# signed (subject alternative name hearth-member, for servers and clients)
# that every gateway and node presents. Run once before `kubectl apply -k`;
# again (then restart the pods) to replace them. Needs openssl and kubectl.
# Usage: deploy/kubernetes/tls.sh [DAYS]   (default 365)
set -euo pipefail
days=${1:-365}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
printf 'subjectAltName=DNS:hearth-member\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout ca.key -out ca.crt -days "$days" -subj /CN=hearth-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout tls.key -out tls.csr -subj /CN=hearth-member 2>/dev/null
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out tls.crt -days "$days" -extfile ext.cnf 2>/dev/null
kubectl get namespace hearth >/dev/null 2>&1 || kubectl create namespace hearth
kubectl -n hearth create secret generic hearth-tls \
  --from-file=ca.crt --from-file=tls.crt --from-file=tls.key \
  --dry-run=client -o yaml | kubectl apply -f -
echo "Secret hearth/hearth-tls holds the cluster's CA and member certificate (valid $days days)."
echo "The CA's key was not kept: make a new set with this script to add or renew members."

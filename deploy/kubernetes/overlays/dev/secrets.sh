#!/usr/bin/env bash
# Makes the dev overlay's secrets, once, at random, beside this script:
# secrets.env (the gateways': the store's URL, the cluster key, the admin
# token), node-secrets.env (the nodes': the store's URL and the cluster
# key, no admin token: as the store role hearth_node) and postgres.env
# (the in-cluster PostgreSQL's passwords: its owner's and hearth_node's). They are never committed (.gitignore); kustomize reads them
# into the Secrets hearth-secrets, hearth-node-secrets and hearth-postgres. Run it before
# `kubectl apply -k deploy/kubernetes/overlays/dev`; the admin token for
# the CLI is in secrets.env. Again after deleting both to make new ones.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$here/secrets.env" ] && [ -f "$here/node-secrets.env" ] && [ -f "$here/postgres.env" ]; then
  exit 0
fi
umask 077
hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
password=$(hex 24)
node_password=$(hex 24)
tmp=$(mktemp -d "$here/.secrets.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf 'password=%s\nnode-password=%s\n' "$password" "$node_password" > "$tmp/postgres.env"
# Members verify the store's certificate against the cluster's CA (tls.sh
# signs the dev PostgreSQL's).
tls='sslmode=verify-full&sslrootcert=/etc/hearth/tls/ca.crt'
cluster_key=$(hex 32)
printf 'store-url=postgres://hearth:%s@hearth-postgres.hearth.svc:5432/hearth?%s\ncluster-key=%s\nadmin-token=hth_%s\n' \
  "$password" "$tls" "$cluster_key" "$(hex 24)" > "$tmp/secrets.env"
printf 'store-url=postgres://hearth_node:%s@hearth-postgres.hearth.svc:5432/hearth?%s\ncluster-key=%s\n' \
  "$node_password" "$tls" "$cluster_key" > "$tmp/node-secrets.env"
mv "$tmp/postgres.env" "$tmp/secrets.env" "$tmp/node-secrets.env" "$here/"
echo "wrote $here/secrets.env, node-secrets.env and postgres.env (not committed)"

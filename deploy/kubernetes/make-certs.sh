#!/usr/bin/env bash
# Makes a cluster's certificates in DIR: ca.crt, a CA of its own;
# tls.crt/tls.key, the member certificate it signed (subject alternative
# name hearth-member; for servers and clients), which every gateway and
# node presents; and postgres.crt/postgres.key, the dev overlay's
# PostgreSQL's (its Service's names), which members verify against the
# same CA. The CA's key is not kept. tls.sh stores them as Secrets; the
# tests make theirs with this too.
# Usage: deploy/kubernetes/make-certs.sh DIR [DAYS]   (default 365)
set -euo pipefail
dir=$1
days=${2:-365}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'subjectAltName=DNS:hearth-member\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout ca.key -out ca.crt -days "$days" -subj /CN=hearth-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout tls.key -out tls.csr -subj /CN=hearth-member 2>/dev/null
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out tls.crt -days "$days" -extfile ext.cnf 2>/dev/null
printf 'subjectAltName=DNS:hearth-postgres,DNS:hearth-postgres.hearth,DNS:hearth-postgres.hearth.svc,DNS:hearth-postgres.hearth.svc.cluster.local\nextendedKeyUsage=serverAuth\n' > pg.cnf
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout postgres.key -out postgres.csr -subj /CN=hearth-postgres 2>/dev/null
openssl x509 -req -in postgres.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out postgres.crt -days "$days" -extfile pg.cnf 2>/dev/null
mkdir -p "$dir"
install -m 0600 ca.crt tls.crt tls.key postgres.crt postgres.key "$dir/"

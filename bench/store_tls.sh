#!/usr/bin/env bash
# TLS to the store (issue 58): what verify-full TLS to PostgreSQL costs a
# deploy, a KV write, a change notice between two members and opening the
# store, against the same server in plain text, in paired rounds
# (bench/store_tls.py). PostgreSQL is Debian's, on loopback.
# Usage: bench/store_tls.sh   (prints Markdown; ROUNDS, DEPLOYS, CALLS)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
. bench/daemon.sh
. bench/postgres.sh
trap 'stop_postgres; cleanup' EXIT
PG_TLS=1 start_postgres
for db in plain tls; do create_database "$db"; done
PYTHONPATH=bench python3 bench/store_tls.py "$BIN/hearth" "$WORK" "$PGPORT" "$WORK/pg/ca.pem"

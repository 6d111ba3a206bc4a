#!/usr/bin/env bash
# Events (issue 57): schedule accuracy on one node and through two
# gateways, firings with a gateway killed every 100 ticks, async calls
# against direct ones, a KV write awaited vs passed to waitUntil, and
# kill -9 with 10,000 queued, and NATS JetStream triggers against a raw
# consumer (bench/events.py). PostgreSQL (Debian's) holds the cluster's
# store; Debian's nats-server is the broker.
# Usage: bench/events.sh   (prints Markdown; PARTS, FUNCS, SECS, KILL_TICKS,
# QUEUED as bench/events.py says)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
. bench/daemon.sh
. bench/postgres.sh
trap 'stop_postgres; cleanup' EXIT
start_postgres
cargo build --release -q -p hearth-events --example nats_bench
PYTHONPATH=bench python3 bench/events.py "$BIN" "$WORK" "$STORE"

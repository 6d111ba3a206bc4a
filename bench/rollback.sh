#!/usr/bin/env bash
# How fast `live` moves back under load (issue 56): on one node, and in a
# cluster of two gateways and one node on PostgreSQL, where the rollback
# goes through one gateway and the load through both. A public function
# has version 1 (hello) and version 2 (echo), live at 2; bench/rollback.py
# measures each run.
#
# Usage: bench/rollback.sh [runs] [clients]   (prints Markdown)
# Environment: BIN, a `hearth` binary (default: a release build of this tree).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-5}"
CLIENTS="${2:-8}"
if [ -z "${BIN:-}" ]; then
  . scripts/setup.sh
  cargo build --release -q -p hearth
  BIN="$CARGO_TARGET_DIR/release/hearth"
fi
WORK="$(mktemp -d)"
PIDS=()
. bench/postgres.sh
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  stop_postgres
  rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME [args...]: hearth with data in $WORK/NAME; sets URL.
start() {
  local name=$1; shift
  HEARTH_LOG=error HEARTH_CLIENT_BODY_MIB_PER_SEC=1048576 \
    "$BIN" --data-dir "$WORK/$name" up --listen 127.0.0.1:0 "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$WORK/$name/server.json" ] && break; sleep 0.05; done
  URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/$name/server.json")
}
deploy() { # URL TOKEN FILE
  curl -sf -H "Authorization: Bearer $2" --data-binary @"$3" \
    "$1/v1/functions/rb?runtime=wasm&public=true" >/dev/null
}
measure() { # URL(for the API) TOKEN TARGET...
  local api=$1 token=$2; shift 2
  python3 bench/rollback.py "$token" "$api/v1/functions/rb/aliases/live/rollback" \
    "$api/v1/functions/rb/aliases/live" 1 2 "$@" --runs "$RUNS" --clients "$CLIENTS"
}

echo "### One node: $CLIENTS clients, $RUNS runs"
echo
start one
TOKEN=$(cat "$WORK/one/token")
deploy "$URL" "$TOKEN" examples/wasm/hello.wat
deploy "$URL" "$TOKEN" examples/wasm/echo.wat
measure "$URL" "$TOKEN" "$URL/fn/admin/rb"

echo
echo "### Two gateways and a node on PostgreSQL: the rollback through gateway 1, the load through both"
echo
start_postgres
export HEARTH_CLUSTER_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
start gw1 --role gateway --store "$STORE"
GW1=$URL
TOKEN=$(cat "$WORK/gw1/token")
start node --role node --store "$STORE"
start gw2 --role gateway --store "$STORE"
GW2=$URL
for gw in "$GW1" "$GW2"; do
  for _ in $(seq 1 100); do
    curl -sf -H "Authorization: Bearer $TOKEN" "$gw/v1/cluster/nodes" | grep -q '"alive":true' && break
    sleep 0.1
  done
done
deploy "$GW1" "$TOKEN" examples/wasm/hello.wat
deploy "$GW1" "$TOKEN" examples/wasm/echo.wat
curl -sf "$GW2/fn/admin/rb" >/dev/null
measure "$GW1" "$TOKEN" "$GW1/fn/admin/rb" "$GW2/fn/admin/rb"

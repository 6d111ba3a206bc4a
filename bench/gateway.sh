#!/usr/bin/env bash
# Gateway overhead (issue 6): the wasm hello function invoked through a
# gateway and its one node vs directly on that node, in the same run,
# rounds interleaved. PostgreSQL (Debian's) holds the cluster's registry.
#
# Direct calls name the version (/fn/admin/hello@1) as the gateway's
# forwarded calls do, so both take the same path on the node.
#
# Usage: bench/gateway.sh [rounds] [seconds]   (prints Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
ROUNDS="${1:-3}"
DUR="${2:-5}"
cargo build --release -q -p hearth
BIN="$CARGO_TARGET_DIR/release/hearth"
WORK="$(mktemp -d)"
PIDS=()
. bench/postgres.sh
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  stop_postgres
  rm -rf "$WORK"
}
trap cleanup EXIT
start_postgres

# start NAME [args...]: starts hearth with data in $WORK/NAME; sets URL.
start() {
  local name=$1; shift
  HEARTH_LOG=error "$BIN" --data-dir "$WORK/$name" up --listen 127.0.0.1:0 --store "$STORE" "$@" \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$WORK/$name/server.json" ] && break; sleep 0.05; done
  URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/$name/server.json")
}
# The secret every member shares (a Kubernetes Secret in production).
export HEARTH_CLUSTER_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
start gateway --role gateway
GW=$URL
TOKEN=$(cat "$WORK/gateway/token")
start node --role node
NODE=$URL
for _ in $(seq 1 100); do
  curl -sf -H "Authorization: Bearer $TOKEN" "$GW/v1/cluster/nodes" | grep -q '"alive":true' && break
  sleep 0.1
done
curl -sf "$GW/fn/admin/hello" | grep -q "hello from wasm"
curl -sf "$NODE/fn/admin/hello@1" | grep -q "hello from wasm"

. bench/wrk.sh
echo "### Gateway overhead: wasm hello, ${ROUNDS} interleaved rounds of ${DUR} s, $(nproc) cores (gateway, node, PostgreSQL and wrk share them)"
echo
echo "| c | path | req/s (median) | p50 µs | p99 µs | non-2xx |"
echo "|---|---|---|---|---|---|"
for c in 1 16; do
  declare -A RPS=() P50=() P99=() ERR=()
  for r in $(seq 1 "$ROUNDS"); do
    for path in direct gateway; do
      url=$([ $path = direct ] && echo "$NODE/fn/admin/hello@1" || echo "$GW/fn/admin/hello")
      read -r rps p50 p99 errs < <(wrk_stats us -t1 -c"$c" -d"${DUR}s" "$url")
      RPS[$path]+="$rps "; P50[$path]+="$p50 "; P99[$path]+="$p99 "; ERR[$path]=$(( ${ERR[$path]:-0} + errs ))
    done
  done
  med() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.0f}")' $1; }
  for path in direct gateway; do
    echo "| $c | $path | $(med "${RPS[$path]}") | $(med "${P50[$path]}") | $(med "${P99[$path]}") | ${ERR[$path]} |"
  done
  python3 -c "
import sys
d, g, dl, gl = (float(x) for x in sys.argv[1:])
print(f'| {$c} | gateway ÷ direct | {g / d:.2f} | +{gl - dl:.0f} µs | | |')" \
    "$(med "${RPS[direct]}")" "$(med "${RPS[gateway]}")" "$(med "${P50[direct]}")" "$(med "${P50[gateway]}")"
done

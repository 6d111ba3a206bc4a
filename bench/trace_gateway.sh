#!/usr/bin/env bash
# What tracing costs an invocation through a gateway: two clusters on one
# PostgreSQL (a database each), each a gateway and one node, in one run:
#   off  neither member traces (the default)
#   ctl  the same again: the A/A noise floor
#   on   both export every span (the gateway's `forward hello` and its
#        `POST` attempt span, the node's `hello`) to a loopback sink
#        (hearth-bench's ceiling server)
#   smp  the same with --otlp-sample-ratio 0.01 on the gateway (the node
#        follows the gateway's choice)
# The wasm hello through each gateway, rounds taking the clusters in
# rotating orders; changes are medians of per-round ratios with 95%
# bootstrap intervals (bench/paired.py). CPU per request is the gateway's
# and the node's utime + stime together over each run.
# Usage: bench/trace_gateway.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-4}"
ROUNDS="${2:-6}"
C=16
. bench/daemon.sh
start_ceiling sink
SINK=$CEILING_URL

. bench/postgres.sh
trap 'stop_postgres; cleanup' EXIT
start_postgres
export HEARTH_CLUSTER_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')

declare -A URLS PIDS_OF
# start_member NAME STORE [ARGS…]: a member with its own data directory.
start_member() {
  local name=$1 store=$2; shift 2
  local dir="$WORK/$name"
  HEARTH_LOG=error "$BIN/hearth" --data-dir "$dir" up --listen 127.0.0.1:0 --store "$store" "$@" \
    >"$WORK/$name.log" 2>&1 &
  PIDS_OF[$name]=$!
  track "$!"
  for _ in $(seq 1 600); do [ -s "$dir/server.json" ] && break; sleep 0.05; done
  URLS[$name]=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$dir/server.json")
}
for c in off ctl on smp; do
  create_database "$c"
  store="$PG_URL/$c"
  traced=()
  [ "$c" = on ] || [ "$c" = smp ] && traced=(--otlp-endpoint "$SINK")
  sampled=()
  [ "$c" = smp ] && sampled=(--otlp-sample-ratio 0.01)
  start_member "gw_$c" "$store" --role gateway "${traced[@]}" "${sampled[@]}"
  start_member "node_$c" "$store" --role node "${traced[@]}"
  token=$(cat "$WORK/gw_$c/token")
  for _ in $(seq 1 100); do
    curl -sf -H "Authorization: Bearer $token" "${URLS[gw_$c]}/v1/cluster/nodes" | grep -q '"alive":true' && break
    sleep 0.1
  done
  curl -sf "${URLS[gw_$c]}/fn/admin/hello" | grep -q "hello from wasm"
  wrk -t1 -c"$C" -d1s "${URLS[gw_$c]}/fn/admin/hello" >/dev/null
done

. bench/wrk.sh

echo "### Tracing through a gateway: wasm hello, wrk -t1 -c$C, ${DUR}s per run, $ROUNDS rounds, $(nproc) cores (four clusters, PostgreSQL and wrk share them)"
echo
echo "| cluster | req/s | p99 | CPU per request (gateway + node) | throughput change | p99 change | CPU change |"
echo "|---|---|---|---|---|---|---|"
orders=("off ctl on smp" "ctl on smp off" "on smp off ctl" "smp off ctl on"
        "off smp ctl on" "smp ctl on off" "ctl on off smp" "on off smp ctl")
runs=()
for i in $(seq 0 $((ROUNDS - 1))); do
  for c in ${orders[$((i % 8))]}; do
    read -r r p t < <(wrk_cpu "${URLS[gw_$c]}/fn/admin/hello" "${PIDS_OF[gw_$c]}" "${PIDS_OF[node_$c]}")
    runs+=("$i:$c:$r:$p:$t")
  done
done
python3 - "$DUR" "$(getconf CLK_TCK)" "${runs[@]}" <<'PY'
import sys
sys.path.insert(0, "bench")
from paired import cpu_cells, cpu_rounds
dur, hz, *runs = sys.argv[1:]
rounds = cpu_rounds(runs, dur, hz)
def row(c, label, against):
    print(f"| {label} | {cpu_cells(rounds, c, against)} |")
row("off", "tracing off", None)
row("ctl", "tracing off again, against off (A/A)", "off")
row("on", "tracing on (both members), against off", "off")
row("smp", "tracing on, 1% of traces sampled, against off", "off")
PY

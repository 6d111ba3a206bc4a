#!/usr/bin/env bash
# What OpenTelemetry tracing costs the invocation path, in one run:
#   base  a release build from before tracing existed (BASE_BIN)
#   off   this build, tracing off (the default)
#   ctl   this build, tracing off again: the A/A noise floor
#   on    this build with --otlp-endpoint, exporting every span to a
#         loopback sink (hearth-bench's ceiling server answers 200)
# for the wasm hello function and a JS function making one outbound call
# (a child span, and a traceparent on the request). Rounds take the four
# daemons in rotating orders; changes are medians of per-round ratios with
# 95% bootstrap intervals (bench/paired.py), as bench/record.sh does.
# CPU per request is the daemon's utime + stime over each run.
# Usage: BASE_BIN=/path/to/old/hearth bench/trace.sh [seconds-per-run] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-5}"
ROUNDS="${2:-8}"
C=16
: "${BASE_BIN:?set BASE_BIN to a hearth binary built before tracing (e.g. git worktree add /tmp/base 7c896e4 and build it)}"
. bench/daemon.sh
start_ceiling sink
SINK=$CEILING_URL
start_ceiling upstream
UP=$CEILING_URL

declare -A URLS PIDS_OF TOKS
# start_one NAME BIN [ARGS…]: a daemon with its own data directory.
start_one() {
  local name=$1 bin=$2; shift 2
  local dir="$WORK/$name"
  HEARTH_LOG=warn HEARTH_ALLOW_PRIVATE_EGRESS=true "$bin" --data-dir "$dir" \
    up --listen 127.0.0.1:0 "$@" >"$WORK/$name.log" 2>&1 &
  PIDS_OF[$name]=$!
  track "$!"
  for _ in $(seq 1 600); do [ -s "$dir/server.json" ] && break; sleep 0.05; done
  URLS[$name]=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$dir/server.json")
  TOKS[$name]=$(cat "$dir/token")
}
start_one base "$BASE_BIN"
start_one off "$BIN/hearth"
start_one ctl "$BIN/hearth"
start_one on "$BIN/hearth" --otlp-endpoint "$SINK"

cat >"$WORK/onecall.mjs" <<JS
export default {
  async fetch() {
    const r = await fetch("$UP/");
    return new Response("upstream said " + (await r.text()).length + " bytes");
  },
};
JS
for d in base off ctl on; do
  curl -sf -H "Authorization: Bearer ${TOKS[$d]}" --data-binary @"$WORK/onecall.mjs" \
    "${URLS[$d]}/v1/functions/onecall?public=true&runtime=js&file_name=index.mjs&allow_host=${UP#http://}" >/dev/null
  for f in hello onecall; do wrk -t1 -c"$C" -d1s "${URLS[$d]}/fn/admin/$f" >/dev/null; done
done

. bench/wrk.sh

echo "### Tracing: off against a build without it, and on against off (wrk -t1 -c$C, ${DUR}s per run, $ROUNDS rounds, $(nproc) cores)"
echo
echo "| function | daemon | req/s | p99 | CPU per request | throughput change | p99 change | CPU change |"
echo "|---|---|---|---|---|---|---|---|"
orders=("base off ctl on" "off ctl on base" "ctl on base off" "on base off ctl"
        "base on ctl off" "on ctl off base" "ctl off base on" "off base on ctl")
for f in hello onecall; do
  runs=()
  for i in $(seq 0 $((ROUNDS - 1))); do
    for d in ${orders[$((i % 8))]}; do
      read -r r p t < <(wrk_cpu "${URLS[$d]}/fn/admin/$f" "${PIDS_OF[$d]}")
      runs+=("$i:$d:$r:$p:$t")
    done
  done
  python3 - "$f" "$DUR" "$(getconf CLK_TCK)" "${runs[@]}" <<'PY'
import sys
sys.path.insert(0, "bench")
from paired import cpu_cells, cpu_rounds
f, dur, hz, *runs = sys.argv[1:]
rounds = cpu_rounds(runs, dur, hz)
def row(d, label, against):
    print(f"| {f} | {label} | {cpu_cells(rounds, d, against)} |")
row("base", "build without tracing", None)
row("off", "tracing off, against that build", "base")
row("ctl", "tracing off again, against off (A/A)", "off")
row("on", "tracing on, against off", "off")
PY
done

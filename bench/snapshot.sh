#!/usr/bin/env bash
# Wasm snapshots (issue 6, Hydra §4.2): first invocation after deploy, and
# warm invocations, of a function whose set-up is heavy, with its init step
# snapshotted at deploy vs the same code building its state per invocation.
#
# The function is examples/wasm/preinit.c (a prime sieve of 4M numbers):
# built as is it exports `wizer-initialize`, which Hearth runs once at
# deploy; built with -DNO_INIT it builds the sieve in every invocation.
# Each deploy makes a new version, so every "first invocation" prepares the
# version (loads the cached compiled module, links) as a cold start does.
#
# Usage: bench/snapshot.sh [deploys] [warm-seconds]   (prints Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
RUNS="${1:-7}"
DUR="${2:-3}"
cargo build --release -q -p hearth
BIN="$CARGO_TARGET_DIR/release/hearth"
WORK="$(mktemp -d)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

clang --target=wasm32-wasi -O2 -o "$WORK/snap.wasm" examples/wasm/preinit.c
clang --target=wasm32-wasi -O2 -DNO_INIT -o "$WORK/plain.wasm" examples/wasm/preinit.c

HEARTH_LOG=error HEARTH_EXAMPLES=false "$BIN" --data-dir "$WORK/data" up --listen 127.0.0.1:0 >"$WORK/up.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && break; sleep 0.05; done
URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/data/server.json")
TOKEN=$(cat "$WORK/data/token")

stats() { python3 -c "
import statistics, sys
xs = sorted(float(x) * 1000 for x in sys.argv[1:])
print(f'{statistics.median(xs):.2f} ms | {xs[-1]:.2f} ms | {len(xs)}')" "$@"; }
. bench/wrk.sh

echo "### Wasm snapshots: examples/wasm/preinit.c (sieve of 4M numbers), ${RUNS} deploys each, $(nproc) cores"
echo
echo "| variant | deploy p50 | max | n | first invocation p50 | max | n | warm req/s (wrk -c1) | warm p50 |"
echo "|---|---|---|---|---|---|---|---|---|"
declare -A FIRST
for variant in plain snap; do
  deploys=(); firsts=()
  for i in $(seq 1 "$RUNS"); do
    deploys+=("$(curl -sf -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $TOKEN" \
      --data-binary @"$WORK/$variant.wasm" "$URL/v1/functions/$variant?runtime=wasm&public=true")")
    firsts+=("$(curl -sf -o "$WORK/out" -w '%{time_total}' "$URL/fn/admin/$variant?n=1000000")")
    grep -q "78498 primes up to 1000000" "$WORK/out" || { echo "wrong answer: $(cat "$WORK/out")" >&2; exit 1; }
  done
  read -r rps p50 _ _ < <(wrk_stats ms -t1 -c1 -d"${DUR}s" "$URL/fn/admin/$variant?n=1000000")
  FIRST[$variant]=$(python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "${firsts[@]}")
  echo "| $([ $variant = snap ] && echo 'init step snapshotted at deploy' || echo 'set-up in every invocation') | $(stats "${deploys[@]}") | $(stats "${firsts[@]}") | $rps | ${p50} ms |"
done
echo
python3 -c "print(f'First invocation, snapshot vs none: {float(\"${FIRST[plain]}\") / float(\"${FIRST[snap]}\"):.1f}x faster (p50)')"

#!/usr/bin/env bash
# End-to-end HTTP benchmark, in one run on this machine:
#   * Hearth's hello function vs a minimal hyper server answering the same
#     bytes (the ceiling), with wrk at concurrency 1, 16 and 64;
#   * first invocation after deploy, and after a restart (compiled module
#     cached on disk) vs after a restart with the cache removed.
# Usage: bench/http.sh [seconds-per-run]   (prints a Markdown report)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-5}"
cargo build --release -q -p hearth -p hearth-bench
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
PIDS=()
# Wait for each daemon to exit (and unmount its sandbox roots) before the
# data directory goes.
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

start_hearth() {
  rm -f "$WORK/data/server.json"
  HEARTH_LOG=warn "$BIN/hearth" --data-dir "$WORK/data" up --listen 127.0.0.1:0 >"$WORK/up.log" 2>&1 &
  HEARTH_PID=$!; PIDS+=("$HEARTH_PID")
  for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && break; sleep 0.05; done
  URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/data/server.json")
}
stop_hearth() { kill "$HEARTH_PID"; wait "$HEARTH_PID" 2>/dev/null || true; }

. bench/wrk.sh
# -> "req/s p50_us p99_us non2xx"
wrk_run() { wrk_stats us -t1 -c"$1" -d"${DUR}s" "$2"; }

start_hearth
"$BIN/hearth-bench" ceiling 127.0.0.1:0 >"$WORK/ceiling.log" &
PIDS+=("$!")
for _ in $(seq 1 100); do grep -q listening "$WORK/ceiling.log" 2>/dev/null && break; sleep 0.05; done
CEIL=$(awk '{print $4}' "$WORK/ceiling.log")
curl -sf "$URL/fn/admin/hello" >/dev/null   # prepare hello once, outside the measurement
# The same greeting from C through wasi-libc (examples/wasm/hello.c): what
# a compiled function looks like (a stack, data and heap over 2+ pages).
clang --target=wasm32-wasi -O2 -o "$WORK/hello_c.wasm" examples/wasm/hello.c
curl -sf -H "Authorization: Bearer $(cat "$WORK/data/token")" --data-binary @"$WORK/hello_c.wasm" \
  "$URL/v1/functions/hello-c?runtime=wasm&public=true" >/dev/null
curl -sf "$URL/fn/admin/hello-c" >/dev/null

echo "### HTTP: hello function vs ceiling (wrk -t1, ${DUR}s per run, $(nproc) cores)"
echo
echo "| concurrency | server | req/s | p50 | p99 | non-2xx | ratio to ceiling |"
echo "|---|---|---|---|---|---|---|"
for c in 1 16 64; do
  read -r crps cp50 cp99 cerr < <(wrk_run "$c" "$CEIL/")
  read -r hrps hp50 hp99 herr < <(wrk_run "$c" "$URL/fn/admin/hello")
  ratio=$(python3 -c "print(f'{$hrps/$crps:.2f}')")
  read -r krps kp50 kp99 kerr < <(wrk_run "$c" "$URL/fn/admin/hello-c")
  kratio=$(python3 -c "print(f'{$krps/$crps:.2f}')")
  echo "| $c | ceiling (hyper) | $crps | ${cp50} µs | ${cp99} µs | $cerr | |"
  echo "| $c | hearth hello (.wat) | $hrps | ${hp50} µs | ${hp99} µs | $herr | **$ratio** |"
  echo "| $c | hearth hello (C) | $krps | ${kp50} µs | ${kp99} µs | $kerr | $kratio |"
done

ms() { python3 -c "print(f'{float(\"$1\")*1000:.1f}')"; }
TOKEN=$(cat "$WORK/data/token")
echo
echo "### First invocations"
echo
echo "| case | time |"
echo "|---|---|"
# A module nobody has compiled yet: a fresh greeting makes a fresh hash.
sed "s/hello from wasm/hello $(date +%s%N | tail -c 7)  /" examples/wasm/hello.wat >"$WORK/fresh.wat"
DEPLOY=$(curl -sf -w ' %{time_total}' -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/fresh.wat" \
  "$URL/v1/functions/fresh?runtime=wasm&public=true")
echo "| deploy (upload, validate, compile, store) | $(ms "${DEPLOY##* }") ms (compile $(echo "${DEPLOY% *}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["compile_ms"])') ms) |"
first=$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/fresh")
second=$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/fresh")
echo "| first invocation after deploy (cold: load cached module, link) | $(ms "$first") ms |"
echo "| second invocation (warm) | $(ms "$second") ms |"
stop_hearth; start_hearth
first=$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/fresh")
echo "| first invocation after restart, compiled module cached on disk | $(ms "$first") ms |"
stop_hearth; rm -rf "$WORK/data/cache"; start_hearth
first=$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/fresh")
echo "| first invocation after restart, cache removed (recompiles) | $(ms "$first") ms |"
echo
echo "(curl from this machine over loopback; each figure is one request, so expect ±1 ms noise.)"

#!/usr/bin/env bash
# End-to-end HTTP benchmark, in one run on this machine:
#   * Hearth's hello function vs a minimal hyper server answering the same
#     bytes (the ceiling), with wrk at concurrency 1, 16 and 64;
#   * first invocation after deploy, and after a restart (compiled module
#     cached on disk) vs after a restart with the cache removed.
# Usage: bench/http.sh [seconds-per-run] [rounds]   (prints a Markdown report)
# With rounds > 1 the three servers run back to back in each round and each
# ratio is the median of the rounds' ratios with a 95% bootstrap interval:
# this shared machine's speed drifts within minutes, and a single run's
# ratio moved between 0.35 and 0.44 from one hour to the next.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-5}"
ROUNDS="${2:-1}"
. bench/daemon.sh
. bench/wrk.sh
# -> "req/s p50_us p99_us non2xx"
wrk_run() { wrk_stats us -t1 -c"$1" -d"${DUR}s" "$2"; }

start_hearth
start_ceiling ceiling

curl -sf "$URL/fn/admin/hello" >/dev/null   # prepare hello once, outside the measurement
# The same greeting from C through wasi-libc (examples/wasm/hello.c): what
# a compiled function looks like (a stack, data and heap over 2+ pages).
clang --target=wasm32-wasi -O2 -o "$WORK/hello_c.wasm" examples/wasm/hello.c
curl -sf -H "Authorization: Bearer $(cat "$WORK/data/token")" --data-binary @"$WORK/hello_c.wasm" \
  "$URL/v1/functions/hello-c?runtime=wasm&public=true" >/dev/null
curl -sf "$URL/fn/admin/hello-c" >/dev/null

echo "### HTTP: hello function vs ceiling (wrk -t1, ${DUR}s per run, $ROUNDS round(s), $(nproc) cores)"
echo
if [ "$ROUNDS" -gt 1 ]; then
  echo "Each round runs the three servers back to back, rotating which goes"
  echo "first. Levels are medians over the rounds; a ratio is the median of the"
  echo "rounds' own ratios, with a 95% bootstrap interval in brackets"
  echo "(bench/paired.py)."
  echo
fi
echo "| concurrency | server | req/s | p50 | p99 | non-2xx | ratio to ceiling |"
echo "|---|---|---|---|---|---|---|"
for c in 1 16 64; do
  runs=()
  targets=("ceil $CEILING_URL/" "wat $URL/fn/admin/hello" "c $URL/fn/admin/hello-c")
  for i in $(seq 0 $((ROUNDS - 1))); do
    # Each round starts with the next server, so none always runs first.
    for k in 0 1 2; do
      read -r d u <<<"${targets[$(((i + k) % 3))]}"
      runs+=("$i:$d:$(wrk_run "$c" "$u" | tr ' ' :)")
    done
  done
  python3 - "$c" "${runs[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from paired import paired, ratio
c, *runs = sys.argv[1:]
rounds = {}
for run in runs:
    i, d, rps, p50, p99, bad = run.split(":")
    rounds.setdefault(i, {})[d] = {"rps": float(rps), "p50": float(p50), "p99": float(p99), "bad": int(bad)}
rounds = list(rounds.values())
med = lambda d, k: statistics.median(r[d][k] for r in rounds)
bad = lambda d: sum(r[d]["bad"] for r in rounds)
for d, name in [("ceil", "ceiling (hyper)"), ("wat", "hearth hello (.wat)"), ("c", "hearth hello (C)")]:
    r = "" if d == "ceil" else ratio(paired(rounds, d, "ceil", "rps"))
    if d == "wat":
        r = f"**{r}**"
    print(f"| {c} | {name} | {med(d, 'rps'):.0f} | {med(d, 'p50'):.0f} µs | {med(d, 'p99'):.0f} µs | {bad(d)} | {r} |")
PY
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

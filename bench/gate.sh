#!/usr/bin/env bash
# Gated promotion (issue 56): how many tapes a gate replays per second,
# and what a gate running costs live traffic on the same node.
#   * The gated function is examples/wasm/counter.wat (a KV get and set
#     per call, answered from the tape on replay), or FILE; it gets
#     traffic, then the same code again as version 2 (--no-promote). Each
#     gate replays the newest LAST tapes of version 1 against version 2
#     and promotes it; the alias is then put back (ungated) for the next.
#   * Live traffic is wrk (c=16) on the public hello function for SECS
#     seconds, alone and while gates run back to back, in rounds that
#     alternate which goes first. The change is the median of the
#     per-round throughput ratios with a 95% bootstrap interval
#     (bench/paired.py).
# Usage: bench/gate.sh [rounds] [secs] [last]   (prints Markdown)
# Environment: FILE, the gated function's code (wasm or .mjs).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
ROUNDS="${1:-6}"
SECS="${2:-5}"
LAST="${3:-1000}"
FILE="${FILE:-examples/wasm/counter.wat}"
. bench/daemon.sh
start_hearth
TOKEN=$(cat "$WORK/data/token")
AUTH="Authorization: Bearer $TOKEN"
case "$FILE" in
  *.mjs | *.js) RT="runtime=js&file_name=index.mjs" ;;
  *) RT="runtime=wasm" ;;
esac
curl -sf -H "$AUTH" --data-binary @"$FILE" "$URL/v1/functions/gated?$RT" >/dev/null
# Tapes of version 1: LAST and more.
wrk -t1 -c4 -d3s -H "$AUTH" -s <(printf 'wrk.method = "POST"\nwrk.body = "x"\n') \
  "$URL/fn/admin/gated" >/dev/null
curl -sf -H "$AUTH" --data-binary @"$FILE" "$URL/v1/functions/gated?$RT&promote=false" >/dev/null
sleep 1

# gate: one gated promotion to version 2 and the move back; prints
# "replayed took_ms passed".
gate() {
  curl -sf -H "$AUTH" -H 'content-type: application/json' \
    -d "{\"version\": 2, \"gate\": {\"last\": $LAST}}" \
    "$URL/v1/functions/gated/aliases/live" |
    python3 -c 'import json,sys; g=json.load(sys.stdin)["gate"]; print(g["replayed"], g["took_ms"], g["passed"])'
  curl -sf -H "$AUTH" -H 'content-type: application/json' -d '{"version": 1}' \
    "$URL/v1/functions/gated/aliases/live" >/dev/null
}

echo "### A gate alone: $LAST tapes of $(basename "$FILE") replayed"
echo
ALONE=()
for _ in 1 2 3 4 5; do ALONE+=("$(gate)"); done
printf '%s\n' "${ALONE[@]}" | python3 -c '
import statistics, sys
runs = [l.split() for l in sys.stdin if l.strip()]
assert all(r[2] == "True" for r in runs), runs
rates = [int(r[0]) / (int(r[1]) / 1000) for r in runs]
print(f"| gates | tapes each | tapes/s, median [min, max] |")
print(f"|---|---|---|")
print(f"| {len(runs)} | {runs[0][0]} | {statistics.median(rates):,.0f} [{min(rates):,.0f}, {max(rates):,.0f}] |")
'

# wrk on hello for SECS seconds: requests/s.
live() {
  wrk -t1 -c16 -d"${SECS}s" "$URL/fn/admin/hello" | awk '/Requests\/sec/{print $2}'
}
gates_until() { # FILE: run gates until FILE exists; append their lines to $WORK/during
  while [ ! -e "$1" ]; do gate >>"$WORK/during"; done
}
echo
echo "### Live traffic while gates run: hello, c=16, ${SECS} s per run, $ROUNDS rounds"
echo
RUNS=()
for r in $(seq 1 "$ROUNDS"); do
  for which in $( ((r % 2)) && echo "alone with" || echo "with alone"); do
    if [ "$which" = with ]; then
      rm -f "$WORK/stop"
      gates_until "$WORK/stop" &
      G=$!
      sleep 0.3
      RUNS+=("$r:with:$(live)")
      touch "$WORK/stop"
      wait "$G"
    else
      RUNS+=("$r:alone:$(live)")
    fi
  done
done
printf '%s\n' "${RUNS[@]}" | PYTHONPATH=bench python3 -c '
import statistics, sys
from paired import median_ci
rounds = {}
for line in sys.stdin:
    r, which, rps = line.strip().split(":")
    rounds.setdefault(r, {})[which] = float(rps)
ratios = [v["with"] / v["alone"] for v in rounds.values()]
m, lo, hi = median_ci(ratios)
alone = statistics.median(v["alone"] for v in rounds.values())
with_ = statistics.median(v["with"] for v in rounds.values())
print("| hello req/s alone | with gates running | throughput with ÷ alone, median [95% CI] |")
print("|---|---|---|")
print(f"| {alone:,.0f} | {with_:,.0f} | {m:.3f} [{lo:.3f}, {hi:.3f}] |")
'
python3 - "$WORK/during" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1]) if l.strip()]
rates = [int(r[0]) / (int(r[1]) / 1000) for r in runs if int(r[1]) > 0]
print()
print(f"Gates during the load: {len(runs)}, {statistics.median(rates):,.0f} tapes/s median, "
      f"all passed: {all(r[2] == 'True' for r in runs)}")
PY

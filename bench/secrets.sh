#!/usr/bin/env bash
# What binding a secret costs an invocation (issue 56): one daemon holds
# the same function twice, once with API_KEY in plain env (`env=`) and
# once bound to the secret API_KEY (`secret=`), the same value; wrk (c=16)
# calls each for SECS seconds, in rounds that alternate which goes first.
# The change is the median of the per-round throughput ratios with a 95%
# bootstrap interval (bench/paired.py).
# Usage: bench/secrets.sh [rounds] [secs]   (prints Markdown)
# Environment: FILE (default: a js function answering env.API_KEY; a
# .wat or .wasm module is deployed as wasm).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
ROUNDS="${1:-8}"
SECS="${2:-5}"
. bench/daemon.sh
start_hearth
TOKEN=$(cat "$WORK/data/token")
AUTH="Authorization: Bearer $TOKEN"
if [ -z "${FILE:-}" ]; then
  FILE="$WORK/key.mjs"
  echo 'export default { fetch(req, env) { return new Response(env.API_KEY); } };' >"$FILE"
fi
case "$FILE" in
  *.mjs | *.js) RT="runtime=js&file_name=index.mjs" ;;
  *) RT="runtime=wasm" ;;
esac
VALUE="k-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
curl -sf -X PUT -H "$AUTH" --data-binary "$VALUE" "$URL/v1/secrets/API_KEY" >/dev/null
curl -sf -H "$AUTH" --data-binary @"$FILE" "$URL/v1/functions/plain?$RT&public=true&env=API_KEY=$VALUE" >/dev/null
curl -sf -H "$AUTH" --data-binary @"$FILE" "$URL/v1/functions/bound?$RT&public=true&secret=API_KEY" >/dev/null
for f in plain bound; do curl -sf "$URL/fn/admin/$f" >/dev/null; done

run() { wrk -t1 -c16 -d"${SECS}s" "$URL/fn/admin/$1" | awk '/Requests\/sec/{print $2}'; }
RUNS=()
for r in $(seq 1 "$ROUNDS"); do
  for f in $( ((r % 2)) && echo "plain bound" || echo "bound plain"); do
    RUNS+=("$r:$f:$(run "$f")")
  done
done
echo "### $(basename "$FILE"): a secret-bound function against the same value in plain env, c=16, ${SECS} s runs, $ROUNDS rounds"
echo
printf '%s\n' "${RUNS[@]}" | PYTHONPATH=bench python3 -c '
import statistics, sys
from paired import median_ci
rounds = {}
for line in sys.stdin:
    r, f, rps = line.strip().split(":")
    rounds.setdefault(r, {})[f] = float(rps)
m, lo, hi = median_ci([v["bound"] / v["plain"] for v in rounds.values()])
plain = statistics.median(v["plain"] for v in rounds.values())
bound = statistics.median(v["bound"] for v in rounds.values())
print("| plain env req/s | secret-bound req/s | bound ÷ plain, median [95% CI] |")
print("|---|---|---|")
print(f"| {plain:,.0f} | {bound:,.0f} | {m:.3f} [{lo:.3f}, {hi:.3f}] |")
'

#!/usr/bin/env bash
# Console page loads with 100,000 recordings in the index: one daemon,
# N invocations of `hello` (all taped) and 20 of a function that fails,
# then each console page loaded ROUNDS times in Debian's headless chromium
# (bench/console.mjs, playwright-core driving the system browser), timed
# from the navigation's start until the page shows its data. The API calls
# behind each page are timed alone with curl too.
# Usage: bench/console.sh [invocations] [rounds]   (prints Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
. scripts/browser-tools.sh
N="${1:-100000}"
ROUNDS="${2:-10}"
NODE_DIR="$HOME/.cache/hearth/bench-node"
if [ ! -d "$NODE_DIR/node_modules/playwright-core" ]; then
  mkdir -p "$NODE_DIR"
  npm install --prefix "$NODE_DIR" --silent --no-audit --no-fund playwright-core@1.64.1
fi
. bench/daemon.sh
start_hearth
TOK=$(cat "$WORK/data/token")
auth=(-H "Authorization: Bearer $TOK")
printf 'exports.handler = async () => { throw new Error("always"); };\n' >"$WORK/fails.js"
curl -sf "${auth[@]}" --data-binary @"$WORK/fails.js" \
  "$URL/v1/functions/fails?runtime=js&file_name=index.js" >/dev/null
for _ in $(seq 1 20); do curl -s "${auth[@]}" -o /dev/null -X POST "$URL/fn/admin/fails"; done
FIRST_MS=$(date +%s%3N)
tapes() { curl -sf "${auth[@]}" "$URL/v1/status" | python3 -c 'import json,sys;print(json.load(sys.stdin)["recording"]["tapes_written"])'; }
while [ "$(tapes)" -lt "$N" ]; do
  wrk -t2 -c16 -d3s "$URL/fn/admin/hello" >/dev/null
done
LAST_MS=$(date +%s%3N)
sleep 2
echo "tapes written: $(tapes)" >&2
# An id from half way through the run: the page before it is a deep one.
MID=$(printf '%012x%020x' $(((FIRST_MS + LAST_MS) / 2)) 1)
# W3C's example trace id: no tape is in it, so every block is read.
TRACE=4bf92f3577b34da6a3ce929d0e0e4736
ID=$(curl -sf "${auth[@]}" "$URL/v1/recordings?function=hello&limit=1" | python3 -c 'import json,sys;print(json.load(sys.stdin)["recordings"][0]["id"])')

echo "| API call | median ms (of $ROUNDS) |"
echo "|---|---|"
for path in "/v1/functions" "/v1/stats" "/v1/recordings?limit=100" "/v1/recordings?status=error&limit=100" \
  "/v1/recordings?slower_than_ms=1000&limit=100" "/v1/recordings?before=$MID&limit=100" \
  "/v1/recordings?trace_id=$TRACE&limit=100" "/v1/recordings/$ID" "/v1/functions/hello/logs?invocation=$ID"; do
  for _ in $(seq 1 "$ROUNDS"); do
    curl -s -o /dev/null -w '%{time_total}\n' "${auth[@]}" "$URL$path"
  done | sort -n | awk -v p="$path" '{a[NR]=$1} END {printf "| `%s` | %.1f |\n", p, a[int((NR+1)/2)]*1000}'
done
echo
echo "| page | median ms | slowest ms |"
echo "|---|---|---|"
# Beside its node_modules, where the import of playwright-core resolves.
cp bench/console.mjs "$NODE_DIR/console.mjs"
node "$NODE_DIR/console.mjs" "$URL" "$TOK" "$ID" "$ROUNDS" "$MID"

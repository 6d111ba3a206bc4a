#!/usr/bin/env bash
# First invocation of fresh js functions: deploys N distinct functions one
# by one (0.2 s apart, so idle workers can refill their blank isolates) and
# times each one's first call with curl; prints the p50.
# Usage: bench/js_first.sh [N] [hearth binary ...]
#   (default: this checkout's release build; pass two binaries to compare
#   them in one run, interleaved)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
N="${1:-15}"; shift || true
if [ $# -eq 0 ]; then
  cargo build --release -q -p hearth
  set -- "$CARGO_TARGET_DIR/release/hearth"
fi
one() {
  local bin=$1 w pid url token
  w=$(mktemp -d)
  HEARTH_LOG=warn "$bin" --data-dir "$w" up --listen 127.0.0.1:0 >"$w/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$w/server.json" ] && break; sleep 0.05; done
  sleep 1
  url=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$w/server.json")
  token=$(cat "$w/token")
  for i in $(seq 1 "$N"); do
    echo "export default { fetch: async (req) => new Response('hi $i ' + (await req.text())) };" >"$w/f.mjs"
    curl -sf -H "Authorization: Bearer $token" --data-binary @"$w/f.mjs" \
      "$url/v1/functions/f$i?runtime=js&file_name=index.mjs&public=true" >/dev/null
    sleep 0.2
    curl -sf -o /dev/null -w "%{time_total}\n" "$url/fn/admin/f$i"
  done >"$w/times"
  python3 -c "import statistics,sys;t=sorted(float(x)*1000 for x in open(sys.argv[1]));print(f'| {sys.argv[2]} | {statistics.median(t):.2f} ms | {t[0]:.2f} ms | {t[-1]:.2f} ms | {len(t)} |')" "$w/times" "$bin"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$w"
}
echo "| binary | first invocation p50 | min | max | functions |"
echo "|---|---|---|---|---|"
for round in 1 2; do for b in "$@"; do one "$b"; done; done

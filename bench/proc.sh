#!/usr/bin/env bash
# Process tier cold starts, in one run (SOCK Fig. 17's configurations that
# this tier has, over HTTP with curl):
#   * baseline: a fresh `python3` process importing the package per request;
#   * install cache hit, new zygote (the function's first invocation: the
#     zygote for its package set imports the package, the handler forks);
#   * import cache hit (a second function with the same requirements: its
#     handler forks from the existing zygote, nothing imported);
#   * handler cache hit (the next invocation: a paused handler resumes).
# And Node.js: a new function's first invocation from the generic pool vs
# starting `node` for it.
# Usage: bench/proc.sh [package==version] [runs]   (prints a Markdown report)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
PKG="${1:-numpy==1.26.4}"
RUNS="${2:-5}"
MOD=$(python3 -c "import sys; n=sys.argv[1].split('==')[0].lower(); print({'pyyaml':'yaml','pillow':'PIL','scikit-learn':'sklearn'}.get(n, n.replace('-','_')))" "$PKG")
cargo build --release -q -p hearth
BIN="$CARGO_TARGET_DIR/release/hearth"
WORK="$(mktemp -d)"
cleanup() { [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
HEARTH_LOG=warn "$BIN" --data-dir "$WORK/data" up --listen 127.0.0.1:0 >"$WORK/up.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && break; sleep 0.05; done
URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/data/server.json")
TOKEN=$(cat "$WORK/data/token")
ms() { python3 -c "import sys; print(f'{float(sys.argv[1])*1000:.1f}')" "$1"; }
stats() { python3 -c "
import statistics, sys
xs = sorted(float(x) for x in sys.argv[1:])
print(f'{statistics.median(xs):.1f} ms | {xs[-1]:.1f} ms')" "$@"; }

# Baseline: a plain interpreter that imports the package, per request.
pip_dir="$WORK/site"; python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$pip_dir" "$PKG"
base=(); for _ in $(seq "$RUNS"); do
  s=$(date +%s%N); PYTHONPATH="$pip_dir" /usr/bin/python3 -c "import $MOD" ; e=$(date +%s%N)
  base+=("$(python3 -c "print(($e-$s)/1e6)")"); done

mkdir -p "$WORK/fn"
printf 'import %s\ndef handler(event, context):\n    return "ok"\n' "$MOD" >"$WORK/fn/handler.py"
echo "$PKG" >"$WORK/fn/requirements.txt"
tar -C "$WORK/fn" -cf "$WORK/fn.tar" handler.py requirements.txt
deploy() { curl -sf -o /dev/null -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/fn.tar" "$URL/v1/functions/$1?runtime=python&file_name=fn.tar"; }
invoke() { curl -sf -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $TOKEN" "$URL/fn/admin/$1"; }

first=(); import_hit=(); resume=()
for i in $(seq "$RUNS"); do
  deploy "f$i-a"; deploy "f$i-b"
  # A new package set per round would need a new package; instead the
  # zygote made in round 1 serves later rounds, so only round 1 measures
  # "new zygote". Rounds >1 of f-a are import-cache hits too.
  t=$(invoke "f$i-a"); [ "$i" = 1 ] && first+=("$(ms "$t")") || import_hit+=("$(ms "$t")")
  import_hit+=("$(ms "$(invoke "f$i-b")")")
  resume+=("$(ms "$(invoke "f$i-a")")")
done

# Node.js: a new function from the generic pool vs starting node.
printf 'export default { fetch() { return new Response("ok"); } };\n' >"$WORK/index.mjs"
node_first=(); for i in $(seq "$RUNS"); do
  curl -sf -o /dev/null -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/index.mjs" "$URL/v1/functions/n$i?runtime=node&file_name=index.mjs"
  sleep 1   # let the pool refill, as it would between arrivals
  node_first+=("$(ms "$(invoke "n$i")")"); done
node_start=(); for _ in $(seq "$RUNS"); do
  s=$(date +%s%N); node "$WORK/index.mjs"; e=$(date +%s%N)
  node_start+=("$(python3 -c "print(($e-$s)/1e6)")"); done

echo "### Process tier cold starts ($PKG, $RUNS runs, $(nproc) cores)"
echo
echo "| configuration | p50 | max |"
echo "|---|---|---|"
echo "| plain python3 importing $MOD per request (baseline) | $(stats "${base[@]}") |"
echo "| first invocation: install cache hit, new zygote imports $MOD | ${first[0]} ms | (1 sample) |"
echo "| import cache hit: handler forked from the zygote | $(stats "${import_hit[@]}") |"
echo "| handler cache hit: paused handler resumed | $(stats "${resume[@]}") |"
echo "| Node.js: new function's first invocation from the generic pool | $(stats "${node_first[@]}") |"
echo "| Node.js: starting \`node\` for it (baseline) | $(stats "${node_start[@]}") |"

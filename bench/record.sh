#!/usr/bin/env bash
# Cost of always-on recording, in one run on this machine:
#   * throughput and p99 with recording on vs off (two daemons side by
#     side, runs interleaved on/off/on/off) for the wasm hello function, a
#     JS function making one outbound call, and a Python function;
#   * bytes on disk per invocation for each, and replay speed (tapes/s).
# A third daemon, also with recording off, runs in the same rotation: the
# off/off difference is this run's noise floor, printed beside the result
# (on this 2-core machine one run's p99 moves by tens of percent). Each
# figure is the median over the rounds.
# Usage: bench/record.sh [seconds-per-run] [rounds]   (prints Markdown)
#        FNS="hello py" bench/record.sh …   only these functions
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-5}"
ROUNDS="${2:-2}"
C=16
cargo build --release -q -p hearth -p hearth-bench
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
PIDS=()
# Daemons get SIGTERM and time to unmount their sandboxes before the
# directory goes.
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME [flags...]: a daemon with data in $WORK/NAME; sets URL_NAME.
start() {
  local name=$1; shift
  HEARTH_LOG=warn "$BIN/hearth" --data-dir "$WORK/$name" up --listen 127.0.0.1:0 "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 1 600); do [ -s "$WORK/$name/server.json" ] && break; sleep 0.05; done
  printf -v "URL_$name" '%s' "$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/$name/server.json")"
}
start on
start off --record false
start ctl --record false

# The outbound call's target: the ceiling server (fixed bytes, no work).
"$BIN/hearth-bench" ceiling 127.0.0.1:0 >"$WORK/upstream.log" &
PIDS+=("$!")
for _ in $(seq 1 100); do grep -q listening "$WORK/upstream.log" 2>/dev/null && break; sleep 0.05; done
UP=$(awk '{print $4}' "$WORK/upstream.log")
UPHOST=${UP#http://}

cat >"$WORK/onecall.mjs" <<JS
export default {
  async fetch() {
    const r = await fetch("$UP/");
    return new Response("upstream said " + (await r.text()).length + " bytes");
  },
};
JS
cat >"$WORK/handler.py" <<'PY'
import random, time
def handler(event, context):
    return {"statusCode": 200, "body": f"t={time.time():.3f} r={random.random():.6f}"}
PY
for d in on off ctl; do
  url="URL_$d"; url=${!url}
  tok=$(cat "$WORK/$d/token")
  curl -sf -H "Authorization: Bearer $tok" --data-binary @"$WORK/onecall.mjs" \
    "$url/v1/functions/onecall?runtime=js&file_name=index.mjs&public=true&allow_host=$UPHOST" >/dev/null
  curl -sf -H "Authorization: Bearer $tok" --data-binary @"$WORK/handler.py" \
    "$url/v1/functions/py?runtime=python&file_name=handler.py&public=true" >/dev/null
  for f in hello onecall py; do curl -sf "$url/fn/admin/$f" >/dev/null; done
done

. bench/wrk.sh
# -> "req/s p99_us"; any non-2xx answer ends the run: it would skew the ratio.
wrk_run() {
  local rps p50 p99 bad
  read -r rps p50 p99 bad < <(wrk_stats us -t1 -c"$C" -d"${DUR}s" "$1")
  [ "$bad" = 0 ] || { echo "non-2xx responses from $1: $bad" >&2; exit 1; }
  echo "$rps $p99"
}
tapes() { curl -sf "$URL_on/metrics" | awk '$1=="hearth_tapes_total"{print $2}'; }
seg_bytes() { du -sb "$WORK/on/recordings/segments" | awk '{print $1}'; }

echo "### Recording on vs off (wrk -t1 -c$C, ${DUR}s per run, $ROUNDS rounds of on/off/off interleaved, medians, $(nproc) cores)"
echo
echo "| function | recording | req/s | p99 | throughput change | p99 change | bytes on disk per invocation |"
echo "|---|---|---|---|---|---|---|"
for f in ${FNS:-hello onecall py}; do
  runs=()
  t0=$(tapes); b0=$(seg_bytes)
  for _ in $(seq 1 "$ROUNDS"); do
    for d in on off ctl; do
      url="URL_$d"
      read -r r p < <(wrk_run "${!url}/fn/admin/$f")
      runs+=("$d:$r:$p")
    done
  done
  sleep 0.5   # one flush interval
  t1=$(tapes); b1=$(seg_bytes)
  python3 - "$f" "$t0" "$t1" "$b0" "$b1" "${runs[@]}" <<'PY'
import statistics, sys
f, t0, t1, b0, b1, *runs = sys.argv[1:]
rps, p99 = {}, {}
for run in runs:
    d, r, p = run.split(":")
    rps.setdefault(d, []).append(int(r)); p99.setdefault(d, []).append(int(p))
med = lambda xs: statistics.median(xs)
r = {d: med(v) for d, v in rps.items()}; p = {d: med(v) for d, v in p99.items()}
per = (int(b1) - int(b0)) / max(1, int(float(t1)) - int(float(t0)))
ch = lambda a, b: f"{(a / b - 1) * 100:+.1f}%"
print(f"| {f} | off | {r['off']:.0f} | {p['off']/1000:.2f} ms | | | |")
print(f"| {f} | on | {r['on']:.0f} | {p['on']/1000:.2f} ms | **{ch(r['on'], r['off'])}** | **{ch(p['on'], p['off'])}** | {per:.0f} B |")
print(f"| {f} | off again (A/A: the noise floor) | {r['ctl']:.0f} | {p['ctl']/1000:.2f} ms | {ch(r['ctl'], r['off'])} | {ch(p['ctl'], p['off'])} | |")
PY
done

echo
echo "### Replay speed"
echo
echo "| function | tapes replayed | seconds | tapes/s |"
echo "|---|---|---|---|"
TOK=$(cat "$WORK/on/token")
for f in ${FNS:-hello onecall py}; do
  curl -sf -w ' %{time_total}' -X POST -H "Authorization: Bearer $TOK" \
    "$URL_on/v1/functions/$f/replay?against=1&last=2000" >"$WORK/replay.out"
  python3 - "$f" "$WORK/replay.out" <<'PY'
import json, sys
f = sys.argv[1]
body, secs = open(sys.argv[2]).read().rsplit(" ", 1)
v = json.loads(body)
secs = float(secs)
assert v["changed"] == 0 and v["diverged"] == 0, (v["changed"], v["diverged"])
print(f"| {f} | {v['replayed']} (all identical) | {secs:.2f} | {v['replayed']/secs:.0f} |")
PY
done

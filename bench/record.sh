#!/usr/bin/env bash
# Cost of always-on recording, in one run on this machine:
#   * throughput, p99 and the daemon's CPU per request with recording on vs
#     off, for the wasm hello function, a JS function making one outbound
#     call, and a Python function;
#   * bytes on disk per invocation for each, and replay speed (tapes/s);
#   * recording's own CPU per tape in process (`hearth-bench record`: the
#     handover on the invocation's thread, and the writer's share), which
#     this machine's noise does not blur the way it blurs the runs above.
# One daemon holds each function three times: as deployed (every
# invocation taped), and twice with `record_sample=0` (no tapes). Runs
# rotate among the three; the two unrecorded copies against each other are
# this run's noise floor (A/A), printed beside the result. Comparing within
# one daemon matters here: two daemons started alike differed by up to 7%
# in CPU per request on this machine (eleventh session), more than the
# cost being measured. Levels are medians over the rounds; each change is
# the median of the per-round ratios to that round's "off" run, with a 95%
# bootstrap interval (bench/paired.py): the machine's speed drifts within
# minutes, and runs seconds apart share most of that drift. The "on" copy
# is also compared with the mean of both untaped copies, which halves any
# quirk of one of them. Rounds take the six orders of the three copies in
# turn, so within rounds each copy runs first, second and last, and right
# after each of the others, equally often (use a multiple of 6 rounds):
# with the old fixed rotation, "off" beat "off again" in each of three
# hello runs (by 0.5-2.4% in throughput); with the six orders it moved
# both ways (-2.7% to +2.2% over five runs). CPU per request is utime + stime from /proc over each run,
# steadier than wrk's figures when the machine is noisy.
# Usage: bench/record.sh [seconds-per-run] [rounds]   (prints Markdown)
#        FNS="hello py" bench/record.sh …   only these functions
#        UNTAPED=1 bench/record.sh …        the "on" copy untaped too: an
#                                            A/A/A run, which shows whether
#                                            the copies differ by themselves
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-5}"
ROUNDS="${2:-2}"
C=16
. bench/daemon.sh
start_hearth
TOK=$(cat "$WORK/data/token")

# The outbound call's target: the ceiling server (fixed bytes, no work).
start_ceiling upstream
UP=$CEILING_URL
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
# deploy NAME FILE QUERY: NAME as is, and NAME-off and NAME-ctl untaped.
deploy() {
  for suffix in "" -off -ctl; do
    local q="$3"
    [ -z "$suffix" ] && [ -z "${UNTAPED:-}" ] || q="$q&record_sample=0"
    curl -sf -H "Authorization: Bearer $TOK" --data-binary @"$2" \
      "$URL/v1/functions/$1$suffix?public=true&$q" >/dev/null
    # Warm: c=$C concurrent requests start that many handlers in the
    # process tier, which the first measured run should not pay for.
    wrk -t1 -c"$C" -d1s "$URL/fn/admin/$1$suffix" >/dev/null
  done
}
deploy hello examples/wasm/hello.wat "runtime=wasm"
deploy onecall "$WORK/onecall.mjs" "runtime=js&file_name=index.mjs&allow_host=$UPHOST"
deploy py "$WORK/handler.py" "runtime=python&file_name=handler.py"

. bench/wrk.sh
tapes() { curl -sf -H "Authorization: Bearer $TOK" "$URL/metrics" | awk '$1=="hearth_tapes_total"{print $2}'; }
seg_bytes() { du -sb "$WORK/data/recordings/segments" | awk '{print $1}'; }

echo "### Recording on vs off, one daemon (wrk -t1 -c$C, ${DUR}s per run, $ROUNDS rounds of on/off/off interleaved, rotating which goes first, $(nproc) cores)"
echo
echo "Levels are medians over the rounds. Changes are the median of each round's"
echo "ratio to that round's \"off\" run (\"both\": to the geometric mean of its two"
echo "untaped runs), with a 95% bootstrap interval in brackets (bench/paired.py)."
echo
echo "| function | recording | req/s | p99 | daemon CPU per request | throughput change | p99 change | CPU change | bytes on disk per invocation |"
echo "|---|---|---|---|---|---|---|---|---|"
for f in ${FNS:-hello onecall py}; do
  runs=()
  t0=$(tapes); b0=$(seg_bytes)
  # The six orders in turn: no copy always runs first, or always after
  # the same other copy.
  orders=("on off ctl" "off ctl on" "ctl on off" "on ctl off" "ctl off on" "off on ctl")
  for i in $(seq 0 $((ROUNDS - 1))); do
    for d in ${orders[$((i % 6))]}; do
      name=$f; [ "$d" = on ] || name="$f-$d"
      read -r r p t < <(wrk_cpu "$URL/fn/admin/$name" "$HEARTH_PID")
      runs+=("$i:$d:$r:$p:$t")
    done
  done
  sleep 0.5   # one flush interval
  t1=$(tapes); b1=$(seg_bytes)
  python3 - "$f" "$t0" "$t1" "$b0" "$b1" "$DUR" "$(getconf CLK_TCK)" "${runs[@]}" <<'PY'
import sys
sys.path.insert(0, "bench")
from paired import change, cpu_rounds, median_of, paired, paired_to_mean
f, t0, t1, b0, b1, dur, hz, *runs = sys.argv[1:]
rounds = cpu_rounds(runs, dur, hz)
med = lambda d, k: median_of(rounds, d, k)
per = (int(b1) - int(b0)) / max(1, int(float(t1)) - int(float(t0)))
ch = lambda a, k: change(paired(rounds, a, "off", k))
print(f"| {f} | off | {med('off', 'rps'):.0f} | {med('off', 'p99')/1000:.2f} ms | {med('off', 'cpu'):.1f} µs | | | | |")
print(f"| {f} | on | {med('on', 'rps'):.0f} | {med('on', 'p99')/1000:.2f} ms | {med('on', 'cpu'):.1f} µs | **{ch('on', 'rps')}** | **{ch('on', 'p99')}** | **{ch('on', 'cpu')}** | {per:.0f} B |")
both = lambda k: change(paired_to_mean(rounds, "on", ["off", "ctl"], k))
print(f"| {f} | on, against both untaped copies | | | | **{both('rps')}** | **{both('p99')}** | **{both('cpu')}** | |")
print(f"| {f} | off again (A/A: the noise floor) | {med('ctl', 'rps'):.0f} | {med('ctl', 'p99')/1000:.2f} ms | {med('ctl', 'cpu'):.1f} µs | {ch('ctl', 'rps')} | {ch('ctl', 'p99')} | {ch('ctl', 'cpu')} | |")
PY
done

echo
echo "### Replay speed"
echo
echo "| function | tapes replayed | seconds | tapes/s |"
echo "|---|---|---|---|"
for f in ${FNS:-hello onecall py}; do
  curl -sf -w ' %{time_total}' -X POST -H "Authorization: Bearer $TOK" \
    "$URL/v1/functions/$f/replay?against=1&last=2000" >"$WORK/replay.out"
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

echo
echo "### Recording's own CPU per tape, in process (hello's tape; hearth-bench record 300000)"
echo
"$BIN/hearth-bench" record 300000

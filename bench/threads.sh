#!/usr/bin/env bash
# Where recording's CPU goes, by thread: hello taped and untaped in one
# daemon, in alternating rounds (which goes first alternates too), and
# each group of the daemon's threads' CPU per request (schedstat: ns, not
# /proc ticks, which are too coarse for a thread using 0.3 µs a request).
# Prints, per group, the median per-request CPU of each copy and the
# median of the rounds' differences with a 95% bootstrap interval
# (bench/paired.py). The invocation threads are `tokio-rt-worker`; the
# recorder's writer is `hearth-recorder`.
# Usage: bench/threads.sh [seconds-per-run] [rounds]   (prints Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-2}"
ROUNDS="${2:-30}"
. bench/daemon.sh
start_hearth
TOK=$(cat "$WORK/data/token")
for suffix in "" -off; do
  q="runtime=wasm"
  [ -z "$suffix" ] || q="$q&record_sample=0"
  curl -sf -H "Authorization: Bearer $TOK" --data-binary @examples/wasm/hello.wat \
    "$URL/v1/functions/hello$suffix?public=true&$q" >/dev/null
  wrk -t1 -c16 -d1s "$URL/fn/admin/hello$suffix" >/dev/null
done
# CPU ns of the daemon's threads so far, summed by thread name.
snap() {
  for t in /proc/"$HEARTH_PID"/task/*; do
    echo "$(tr ' ' _ <"$t/comm") $(awk '{print $1}' "$t/schedstat")"
  done | awk '{a[$1] += $2} END {for (k in a) printf "%s=%.0f ", k, a[k]}'
}
runs="$WORK/threads.txt"
for i in $(seq 1 "$ROUNDS"); do
  order="on off"
  [ $((i % 2)) = 0 ] || order="off on"
  for d in $order; do
    suffix=""
    [ "$d" = on ] || suffix=-off
    before=$(snap)
    n=$(wrk -t1 -c16 -d"${DUR}s" "$URL/fn/admin/hello$suffix" | awk '/requests in/{print $1}')
    echo "$i $d $n|$before|$(snap)" >>"$runs"
  done
done
echo "### CPU per request by thread, hello taped vs untaped (one daemon, wrk -t1 -c16, ${DUR}s runs, $ROUNDS rounds)"
echo
python3 - "$runs" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from paired import median_ci
rounds = {}
for line in open(sys.argv[1]):
    head, before, after = line.split("|")
    i, copy, n = head.split()
    a = dict(x.split("=") for x in before.split())
    b = dict(x.split("=") for x in after.split())
    rounds.setdefault(i, {})[copy] = {k: (float(b[k]) - float(a.get(k, 0))) / int(n) for k in b}
rounds = [r for r in rounds.values() if "on" in r and "off" in r]
print("| threads | untaped | taped | difference per request |")
print("|---|---|---|---|")
for group in ["tokio-rt-worker", "hearth-recorder", "all"]:
    cpu = lambda run: sum(run.values()) if group == "all" else run.get(group, 0.0)
    on = [cpu(r["on"]) for r in rounds]
    off = [cpu(r["off"]) for r in rounds]
    m, lo, hi = median_ci([x - y for x, y in zip(on, off)])
    print(f"| {group} | {statistics.median(off) / 1000:.2f} µs | {statistics.median(on) / 1000:.2f} µs "
          f"| {m / 1000:+.2f} µs [{lo / 1000:+.2f}, {hi / 1000:+.2f}] |")
PY

#!/usr/bin/env bash
# The recorder's writer thread's CPU per request, per flush interval: one
# daemon per interval, taped hello under wrk -c16, the writer thread's
# run time over the run from schedstat (ns: /proc's 10 ms ticks would be
# ~10 ticks a run), and the whole daemon's and the machine's busy time
# for scale. Intervals are run in the order given; repeat
# them to alternate (bench/flush.sh 10 200 1000 50 200 1000 50).
# Usage: bench/flush.sh SECONDS FLUSH_MS...
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:?seconds per run}"
shift
. bench/daemon.sh
ticks() { awk '{print $14 + $15}' "$1"; }
run_ns() { awk '{print $1}' "$1"; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $6 + $7 + $8}' /proc/stat; }
writer_tid() {
  for t in /proc/"$HEARTH_PID"/task/*; do
    [ "$(cat "$t/comm")" = hearth-recorder ] && basename "$t"
  done
  true
}
echo "| flush interval | req/s | writer CPU per request | daemon CPU per request | machine busy per request |"
echo "|---|---|---|---|---|"
for ms in "$@"; do
  HEARTH_RECORD_FLUSH_MS=$ms start_hearth
  TOK=$(cat "$WORK/data/token")
  curl -sf -H "Authorization: Bearer $TOK" --data-binary @examples/wasm/hello.wat \
    "$URL/v1/functions/hello?public=true&runtime=wasm" >/dev/null
  wrk -t1 -c16 -d1s "$URL/fn/admin/hello" >/dev/null
  W=/proc/$HEARTH_PID/task/$(writer_tid)/schedstat
  w0=$(run_ns "$W") d0=$(ticks "/proc/$HEARTH_PID/stat") s0=$(busy)
  n=$(wrk -t1 -c16 -d"${DUR}s" "$URL/fn/admin/hello" | awk '/requests in/{print $1}')
  w1=$(run_ns "$W") d1=$(ticks "/proc/$HEARTH_PID/stat") s1=$(busy)
  python3 - "$ms" "$n" "$DUR" "$(getconf CLK_TCK)" "$((w1 - w0))" "$((d1 - d0))" "$((s1 - s0))" <<'PY'
import sys
ms, n, dur, hz, w, d, s = sys.argv[1:]
n, hz = int(n), int(hz)
us = lambda t: int(t) / hz / n * 1e6
print(f"| {ms} ms | {n / float(dur):.0f} | {int(w) / n / 1000:.2f} µs | {us(d):.1f} µs | {us(s):.1f} µs |")
PY
  stop_hearth
  rm -rf "$WORK/data"
done

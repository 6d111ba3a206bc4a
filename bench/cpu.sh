#!/usr/bin/env bash
# Where the CPU goes per request at one concurrency: the server under test
# (utime + stime from /proc/PID/stat), wrk (/usr/bin/time) and the whole
# machine (/proc/stat, everything but idle and iowait), for the ceiling,
# /healthz on Hearth's own HTTP stack, and the hello function.
# Usage: bench/cpu.sh [seconds-per-run] [rounds] [concurrency]   (Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-5}"
ROUNDS="${2:-2}"
C="${3:-16}"
. bench/daemon.sh
start_hearth
start_ceiling ceiling
curl -sf "$URL/fn/admin/hello" >/dev/null

# run NAME PID URL -> one table row
run() {
  local t0 t1 s0 s1
  t0=$(awk '{print $14 + $15}' "/proc/$2/stat"); s0=$(head -1 /proc/stat)
  /usr/bin/time -f "%U %S" -o "$WORK/time" wrk -t1 -c"$C" -d"${DUR}s" "$3" >"$WORK/wrk"
  t1=$(awk '{print $14 + $15}' "/proc/$2/stat"); s1=$(head -1 /proc/stat)
  python3 - "$1" "$DUR" "$(getconf CLK_TCK)" "$t0" "$t1" "$s0" "$s1" "$WORK/time" "$WORK/wrk" <<'PY'
import re, sys
name, dur, hz, t0, t1, s0, s1, tfile, wfile = sys.argv[1:]
dur, hz = float(dur), int(hz)
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", open(wfile).read()).group(1))
n = rps * dur
server = (int(t1) - int(t0)) / hz
wrk = sum(map(float, open(tfile).read().split()))
a = list(map(int, s0.split()[1:9])); b = list(map(int, s1.split()[1:9]))
d = [y - x for x, y in zip(a, b)]
busy = (sum(d) - d[3] - d[4]) / hz
us = lambda s: f"{s / n * 1e6:.1f} µs"
print(f"| {name} | {rps:.0f} | {us(server)} | {us(wrk)} | {us(busy)} | {busy / dur:.2f} |")
PY
}

echo "### CPU per request (wrk -t1 -c$C, ${DUR}s per run, $ROUNDS rounds, $(nproc) cores)"
echo
echo "| target | req/s | server | wrk | whole machine | busy cores |"
echo "|---|---|---|---|---|---|"
for _ in $(seq 1 "$ROUNDS"); do
  run "ceiling (hyper)" "$CEILING_PID" "$CEILING_URL/"
  run "/healthz on Hearth's stack" "$HEARTH_PID" "$URL/healthz"
  run "hello.wat" "$HEARTH_PID" "$URL/fn/admin/hello"
done

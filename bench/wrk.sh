# Sourced by the benchmark scripts: wrk_stats runs wrk and prints one
# line, "req/s p50 p99 non2xx", latencies in UNIT (us or ms); wrk_cpu (at
# the end) adds the CPU that given processes used meanwhile.
# Usage: wrk_stats UNIT [wrk arguments...]   (--latency is added)
wrk_stats() {
  local unit=$1; shift
  wrk --latency "$@" | python3 -c '
import re, sys
unit = sys.argv[1]
text = sys.stdin.read()
def conv(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    us = float(n) * {"us": 1, "ms": 1e3, "s": 1e6}[u]
    return f"{us:.0f}" if unit == "us" else f"{us / 1e3:.2f}"
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p50 = conv(re.search(r"\s50%\s+(\S+)", text).group(1))
p99 = conv(re.search(r"\s99%\s+(\S+)", text).group(1))
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"{rps:.0f} {p50} {p99} {errs.group(1) if errs else 0}")' "$unit"
}

# cpu_ticks PID...: the processes' utime + stime together, in clock ticks.
cpu_ticks() {
  local total=0 p
  for p in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$total"
}

# wrk_cpu URL PID... -> "req/s p99_us cpu_ticks": wrk -t1 -c$C for $DUR
# seconds, and the CPU the PIDs used meanwhile. Any non-2xx answer ends the
# script: it would skew the comparison.
wrk_cpu() {
  local url=$1 rps p50 p99 bad t0
  shift
  t0=$(cpu_ticks "$@")
  read -r rps p50 p99 bad < <(wrk_stats us -t1 -c"$C" -d"${DUR}s" "$url")
  [ "$bad" = 0 ] || { echo "non-2xx responses from $url: $bad" >&2; exit 1; }
  echo "$rps $p99 $(($(cpu_ticks "$@") - t0))"
}

# Sourced by the benchmark scripts: runs wrk and prints one line,
# "req/s p50 p99 non2xx", latencies in UNIT (us or ms).
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

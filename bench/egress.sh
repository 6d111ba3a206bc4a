#!/usr/bin/env bash
# What the egress proxy costs a function that lists hosts, side by side in
# one daemon: the first invocation of N new Python functions with an
# allowed host (network namespace, egress socket and proxy task, the
# helper's relay thread) against N without (network namespace only), with
# the generic pools off so both fork from the bare zygote (the same code,
# which imports urllib.request either way); and a call
# through the proxy to an upstream on this machine against the same call
# through `hearth.fetch`.
# Usage: bench/egress.sh [N]   (prints Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
N="${1:-10}"
. bench/daemon.sh

IP=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])')
mkdir -p "$WORK/www" && echo "from upstream" > "$WORK/www/data"
python3 -m http.server 0 --bind "$IP" --directory "$WORK/www" >"$WORK/www.log" 2>&1 &
track $!
for _ in $(seq 1 100); do grep -q "Serving HTTP" "$WORK/www.log" && break; sleep 0.05; done
UP="$IP:$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$WORK/www.log" | head -1)"

# The upstream is on this machine's private address, which start_hearth's
# daemon lets functions reach; no generic pools, so both kinds fork.
HEARTH_EXAMPLES=false HEARTH_PROC_POOL=0 start_hearth
TOKEN=$(cat "$WORK/data/token")

cat >"$WORK/proxied.py" <<PY
import urllib.request
def handler(event, context):
    if event.get("rawQueryString") == "go":
        return urllib.request.urlopen("http://$UP/data", timeout=5).read().decode()
    return "ok"
PY
cat >"$WORK/fetched.py" <<PY
import hearth
def handler(event, context):
    return hearth.fetch("http://$UP/data").text
PY
deploy() { curl -sf -o /dev/null -H "Authorization: Bearer $TOKEN" --data-binary @"$2" "$URL/v1/functions/$1?runtime=python&file_name=handler.py$3"; }
first() { curl -sf -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $TOKEN" -X POST "$URL/fn/admin/$1$2"; }
p50() { python3 -c "import statistics,sys; print(f'{statistics.median(float(x) for x in sys.argv[1:])*1000:.1f}')" "$@"; }

plain=(); proxied=()
for i in $(seq 1 "$N"); do
  # The same code: only the allowed host differs.
  deploy "plain$i" "$WORK/proxied.py" ""
  deploy "net$i" "$WORK/proxied.py" "&allow_host=$UP"
  # Alternating which goes first: the first cgroup move after a quiet
  # spell waits an RCU grace period (RESULTS §4), the next one does not.
  if [ $((i % 2)) -eq 1 ]; then
    plain+=("$(first "plain$i" "")")
    proxied+=("$(first "net$i" "")")
  else
    proxied+=("$(first "net$i" "")")
    plain+=("$(first "plain$i" "")")
  fi
done
deploy fetched "$WORK/fetched.py" "&allow_host=$UP"
first net1 "?go" >/dev/null; first fetched "" >/dev/null
via_proxy=(); via_fetch=()
for _ in $(seq 1 "$N"); do
  via_proxy+=("$(first net1 "?go")")
  via_fetch+=("$(first fetched "")")
done

echo "### Egress proxy: what a function that lists hosts pays ($N each, one daemon, pools off)"
echo
echo "| measure | p50 |"
echo "|---|---|"
echo "| first invocation, no allowed hosts | $(p50 "${plain[@]}") ms |"
echo "| first invocation, an allowed host (egress socket, proxy, relay thread) | $(p50 "${proxied[@]}") ms |"
echo "| warm call fetching the upstream through the proxy (\`urllib\`) | $(p50 "${via_proxy[@]}") ms |"
echo "| warm call fetching it through \`hearth.fetch\` | $(p50 "${via_fetch[@]}") ms |"

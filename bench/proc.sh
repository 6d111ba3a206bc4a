#!/usr/bin/env bash
# The process tier against SOCK's Figures 17 and 18, in one run.
#
# Fig. 17, cold starts of a function importing a heavy package, over HTTP
# with curl, each configuration on its own daemon (HEARTH_PROC_CACHES):
#   * no caches: every invocation installs the package (pip, no download
#     cache), forks a bare interpreter, imports it;
#   * install cache only: the package is installed once; every invocation
#     forks a bare interpreter that imports it;
#   * import cache hit: a new function's handler forks from the zygote that
#     already imported the package;
#   * handler cache hit: a paused handler resumes;
#   * baseline: a fresh `python3` process importing the package.
# Fig. 18, memory: N paused handlers forked from one zygote vs N separate
# interpreters that imported the same package (proportional set size).
# And the generic pools (Hydra §4.2): a new function's first invocation
# from a pre-started process vs without the pools (HEARTH_PROC_POOL=0),
# for Python without packages (pre-forked from the bare zygote, already in
# its cgroup) and Node.js; and starting `node` for it.
#
# And the import cache learning submodules: a function whose handler loads
# `from PIL import Image` (its zygote imports `PIL`), redeployed after its
# first call; the new version's first invocation with the zygote that
# learned `PIL.Image` vs with learning off (HEARTH_PROC_CACHES without
# `learn`).
#
# Usage: bench/proc.sh [package==version] [runs] [N] [submodule package]
#   (prints Markdown)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
PKG="${1:-numpy==1.26.4}"
RUNS="${2:-5}"
N="${3:-10}"
SUBPKG="${4:-pillow==11.0.0}"
MOD=$(python3 -c "import sys; n=sys.argv[1].split('==')[0].lower(); print({'pyyaml':'yaml','pillow':'PIL','scikit-learn':'sklearn'}.get(n, n.replace('-','_')))" "$PKG")
cargo build --release -q -p hearth
BIN="$CARGO_TARGET_DIR/release/hearth"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME CACHES [POOL]: a daemon in $WORK/NAME; sets URL and TOKEN.
# The SOCK rows run without generic pools (their processes would be
# counted as handlers in Fig. 18); the pools are measured on their own.
start() {
  HEARTH_LOG=error HEARTH_EXAMPLES=false HEARTH_PROC_CACHES="$2" HEARTH_PROC_POOL="${3:-0}" \
    "$BIN" --data-dir "$WORK/$1" up --listen 127.0.0.1:0 >"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$WORK/$1/server.json" ] && break; sleep 0.05; done
  URL=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["url"])' "$WORK/$1/server.json")
  TOKEN=$(cat "$WORK/$1/token")
}
stop_last() { kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'; }
ms() { python3 -c "import sys; print(f'{float(sys.argv[1])*1000:.1f}')" "$1"; }
p50() { python3 -c "import statistics,sys; print(f'{statistics.median(float(x) for x in sys.argv[1:]):.1f}')" "$@"; }
stats() { python3 -c "
import statistics, sys
xs = sorted(float(x) for x in sys.argv[1:])
print(f'{statistics.median(xs):.1f} ms | {xs[-1]:.1f} ms | {len(xs)}')" "$@"; }
# deploy NAME [TAR]: a Python function from $WORK/fn.tar (or TAR).
deploy() { curl -sf -o /dev/null -H "Authorization: Bearer $TOKEN" --data-binary @"${2:-$WORK/fn.tar}" "$URL/v1/functions/$1?runtime=python&file_name=fn.tar"; }
# invoke NAME [OUT]: the call's time in seconds; its body into OUT.
invoke() { curl -sf -o "${2:-/dev/null}" -w '%{time_total}' -H "Authorization: Bearer $TOKEN" "$URL/fn/admin/$1"; }
pss_kib() { # the summed Pss of the given pids, KiB
  local t=0; for p in "$@"; do
    t=$((t + $(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup"))); done; echo $t; }

mkdir -p "$WORK/fn"
printf 'import %s\ndef handler(event, context):\n    return "ok"\n' "$MOD" >"$WORK/fn/handler.py"
echo "$PKG" >"$WORK/fn/requirements.txt"
tar -C "$WORK/fn" -cf "$WORK/fn.tar" handler.py requirements.txt

# Baseline: a plain interpreter that imports the package.
pip_dir="$WORK/site"; python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$pip_dir" "$PKG"
base=(); for _ in $(seq "$RUNS"); do
  s=$(date +%s%N); PYTHONPATH="$pip_dir" /usr/bin/python3 -c "import $MOD"; e=$(date +%s%N)
  base+=("$(python3 -c "print(($e-$s)/1e6)")"); done

# No caches. Each invocation downloads and installs: a few runs suffice.
start none none
deploy f; none=(); for _ in $(seq "$(( RUNS < 3 ? RUNS : 3 ))"); do none+=("$(ms "$(invoke f)")"); done
stop_last

# Install cache only.
start install install
deploy f; invoke f >/dev/null   # the bare zygote starts on first use
install_only=(); for _ in $(seq "$RUNS"); do install_only+=("$(ms "$(invoke f)")"); done
stop_last

# All caches: first invocation (new zygote), import cache hits, resumes.
start all all
first=(); import_hit=(); resume=()
for i in $(seq "$RUNS"); do
  deploy "f$i"
  t=$(invoke "f$i"); [ "$i" = 1 ] && first+=("$(ms "$t")") || import_hit+=("$(ms "$t")")
  resume+=("$(ms "$(invoke "f$i")")")
done

# Fig. 18: N paused handlers forked from the package's zygote.
for i in $(seq "$((RUNS + 1))" "$N"); do deploy "f$i"; invoke "f$i" >/dev/null; done
INSTANCE=n$(printf %s "$(realpath "$WORK/all/proc")" | sha256sum | cut -c1-12)
CG=/sys/fs/cgroup/memory/hearth/$INSTANCE
[ -d "$CG" ] || CG=/sys/fs/cgroup/hearth/$INSTANCE   # cgroup v2
mapfile -t handler_pids < <(cat "$CG"/[0-9]*/cgroup.procs)   # not zygotes/
zygote_pid=$(curl -sf -H "Authorization: Bearer $TOKEN" "$URL/v1/status" |
  python3 -c 'import json,sys; z=json.load(sys.stdin)["tiers"]["process"]["details"]["zygotes"]; print(max(z, key=lambda r: r["packages"])["pid"])')
shared_kib=$(pss_kib "${handler_pids[@]}")
zygote_kib=$(pss_kib "$zygote_pid")

# N independent interpreters with the same import, alive at once.
solo=(); for _ in $(seq "$N"); do
  PYTHONPATH="$pip_dir" /usr/bin/python3 -c "import $MOD, time; open('$WORK/ready.' + str(__import__('os').getpid()), 'w'); time.sleep(600)" &
  solo+=($!); done
for _ in $(seq 1 600); do [ "$(ls "$WORK"/ready.* 2>/dev/null | wc -l)" -ge "$N" ] && break; sleep 0.05; done
solo_kib=$(pss_kib "${solo[@]}")
kill "${solo[@]}"; wait "${solo[@]}" 2>/dev/null || true

stop_last

# The generic pools: one daemon with them (the default), one without,
# each new function deployed on both in turn; a second between arrivals
# lets a pool refill, as it would between arrivals.
start pool all 2; POOL_URL=$URL; POOL_TOKEN=$TOKEN
start nopool all 0; NOPOOL_URL=$URL; NOPOOL_TOKEN=$TOKEN
printf 'def handler(event, context):\n    return "ok"\n' >"$WORK/plain.py"
printf 'export default { fetch() { return new Response("ok"); } };\n' >"$WORK/index.mjs"
# first_call URL TOKEN NAME RUNTIME FILE: deploy, let pools settle, one call (ms).
first_call() {
  curl -sf -o /dev/null -H "Authorization: Bearer $2" --data-binary @"$WORK/$5" "$1/v1/functions/$3?runtime=$4&file_name=$5"
  sleep 1
  ms "$(curl -sf -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $2" "$1/fn/admin/$3")"
}
for u in "$POOL_URL $POOL_TOKEN" "$NOPOOL_URL $NOPOOL_TOKEN"; do  # the zygote and pools start
  first_call $u warm0 python plain.py >/dev/null; first_call $u warmn0 node index.mjs >/dev/null; done
py_pool=(); py_nopool=(); node_first=(); node_nopool=()
for i in $(seq "$RUNS"); do
  py_pool+=("$(first_call "$POOL_URL" "$POOL_TOKEN" "p$i" python plain.py)")
  py_nopool+=("$(first_call "$NOPOOL_URL" "$NOPOOL_TOKEN" "p$i" python plain.py)")
  node_first+=("$(first_call "$POOL_URL" "$POOL_TOKEN" "n$i" node index.mjs)")
  node_nopool+=("$(first_call "$NOPOOL_URL" "$NOPOOL_TOKEN" "n$i" node index.mjs)")
done
from_pool=$(curl -sf -H "Authorization: Bearer $POOL_TOKEN" "$POOL_URL/v1/status" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tiers"]["process"]["details"]["handlers_from_pool"])')
node_start=(); for _ in $(seq "$RUNS"); do
  s=$(date +%s%N); node "$WORK/index.mjs"; e=$(date +%s%N)
  node_start+=("$(python3 -c "print(($e-$s)/1e6)")"); done

# Learning submodules: on each daemon, per round a new function whose
# first call makes the handler import PIL.Image, then a redeploy (a new
# version, same packages) whose first call is measured, end to end and as
# the time its module spent in `from PIL import Image`.
mkdir -p "$WORK/sub"
printf 'import time\n_t = time.perf_counter()\nfrom PIL import Image\nLOAD_MS = (time.perf_counter() - _t) * 1000\ndef handler(event, context):\n    return {"load_ms": LOAD_MS}\n' >"$WORK/sub/handler.py"
echo "$SUBPKG" >"$WORK/sub/requirements.txt"
tar -C "$WORK/sub" -cf "$WORK/sub.tar" handler.py requirements.txt
# redeployed_first CACHES: per round, the redeploy's first call "total load" (ms).
redeployed_first() {
  start "learn-$1" "$1"
  for i in $(seq "$RUNS"); do
    deploy "s$i" "$WORK/sub.tar"; invoke "s$i" >/dev/null
    sleep 2   # the zygote learns in the background
    deploy "s$i" "$WORK/sub.tar"; t=$(invoke "s$i" "$WORK/sub.out")
    echo "$(ms "$t") $(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["load_ms"])' "$WORK/sub.out")"
  done
  stop_last
}
mapfile -t learn_on < <(redeployed_first all)
mapfile -t learn_off < <(redeployed_first install,import,handler)
col() { local k=$1; shift; for r in "$@"; do echo "$r" | cut -d' ' -f"$k"; done; }

ratio() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.0f}')" "$1" "$2"; }
echo "### Process tier cold starts ($PKG, $(nproc) cores)"
echo
echo "| configuration | p50 | max | runs |"
echo "|---|---|---|---|"
echo "| no caches: pip install + bare interpreter + import $MOD, per invocation | $(stats "${none[@]}") |"
echo "| install cache only: bare interpreter forks, imports $MOD | $(stats "${install_only[@]}") |"
echo "| first invocation: new zygote imports $MOD, handler forks | ${first[0]} ms | | 1 |"
echo "| import cache hit: handler forked from the zygote | $(stats "${import_hit[@]}") |"
echo "| handler cache hit: paused handler resumed | $(stats "${resume[@]}") |"
echo "| baseline: plain python3 importing $MOD | $(stats "${base[@]}") |"
echo
echo "Speed-up over no caches (p50): import cache hit $(ratio "$(p50 "${none[@]}")" "$(p50 "${import_hit[@]}")")×, handler cache hit $(ratio "$(p50 "${none[@]}")" "$(p50 "${resume[@]}")")×; over install cache only: import cache hit $(python3 -c "print(f'{$(p50 "${install_only[@]}")/$(p50 "${import_hit[@]}"):.1f}')")×."
echo
echo "### Memory of $N warm handlers importing $MOD (Pss, SOCK Fig. 18)"
echo
echo "| | total | per handler |"
echo "|---|---|---|"
echo "| $N paused handlers forked from one zygote (${#handler_pids[@]} processes) | $((shared_kib / 1024)) MiB | $((shared_kib / N / 1024)) MiB |"
echo "| the same, plus the zygote itself | $(((shared_kib + zygote_kib) / 1024)) MiB | $(((shared_kib + zygote_kib) / N / 1024)) MiB |"
echo "| $N independent python3 processes | $((solo_kib / 1024)) MiB | $((solo_kib / N / 1024)) MiB |"
echo
echo "### Generic pools: a new function's first invocation"
echo
echo "| function | p50 | max | runs |"
echo "|---|---|---|---|"
echo "| Python, no packages: from the generic pool | $(stats "${py_pool[@]}") |"
echo "| Python, no packages: forked from the bare zygote (pools off) | $(stats "${py_nopool[@]}") |"
echo "| Node.js: from the generic pool | $(stats "${node_first[@]}") |"
echo "| Node.js: started for it (pools off) | $(stats "${node_nopool[@]}") |"
echo "| Node.js: starting \`node\` by hand (baseline) | $(stats "${node_start[@]}") |"
echo
echo "Handlers taken from the pools: $from_pool. Python p50 ratio (pools off / pool): $(python3 -c "print(f'{$(p50 "${py_nopool[@]}")/$(p50 "${py_pool[@]}"):.1f}')")×."
echo
echo "### After a redeploy: the first invocation of a function using PIL.Image ($SUBPKG)"
echo
echo "| zygote | end to end p50 | max | \`from PIL import Image\` in the handler, p50 | runs |"
echo "|---|---|---|---|---|"
echo "| learned PIL.Image from the first version's handler | $(stats $(col 1 "${learn_on[@]}") | cut -d'|' -f1-2) | $(p50 $(col 2 "${learn_on[@]}")) ms | ${#learn_on[@]} |"
echo "| imports only PIL (learning off) | $(stats $(col 1 "${learn_off[@]}") | cut -d'|' -f1-2) | $(p50 $(col 2 "${learn_off[@]}")) ms | ${#learn_off[@]} |"

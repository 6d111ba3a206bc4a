#!/usr/bin/env bash
# Runs the whole test suite: format check, clippy, the Kubernetes manifests
# (every overlay rendered and validated), the benchmarks' statistics
# helper's self-check, unit and end-to-end tests, the process tier under
# systemd on a cgroup v2 VM (scripts/vm/cgroup-v2.sh), then each fuzz
# target for a bounded time (scripts/fuzz.sh)
# (the latter start the real daemon and build the C examples with clang;
# the console's drive Debian's headless chromium).
set -euo pipefail
cd "$(dirname "$0")"
# The run's closing line, whichever step ends it.
trap 'rc=$?; if [ "$rc" -eq 0 ]; then echo "hearth: test run passed"; else echo "hearth: test run FAILED (exit $rc)"; fi' EXIT
. scripts/setup.sh
. scripts/component-tools.sh
. scripts/kubernetes-tools.sh
. scripts/browser-tools.sh
. scripts/prometheus-tools.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The compiled js tier's runtime as compiled modules import it: its
# exports over linear memory exist only in the wasm32 build.
cargo clippy -p hearth-jit-runtime --target wasm32-unknown-unknown --locked -- -D warnings
echo "== Kubernetes manifests: every overlay rendered and validated"
scripts/kubernetes-check.sh
echo "== the console's vendored libraries are npm's, byte for byte"
crates/hearth-api/console/vendor.sh --check
echo "== bench/paired.py self-check (the benchmarks' confidence intervals)"
python3 bench/paired.py
echo "== cargo test"
# Every test binary runs even when one fails, so the sum below is the
# whole suite's; the status is cargo's, not tee's.
# A test whose tool is missing (`require!`) fails under CI; elsewhere it
# is skipped and listed here.
skipped_list="${TMPDIR:-/tmp}/hearth-skipped.txt"
rm -f "$skipped_list"
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "${TMPDIR:-/tmp}/hearth-test.log"
status=${PIPESTATUS[0]}
set -e
if [ -s "$skipped_list" ]; then
  echo "== skipped for a missing tool (./test.sh installs them; under CI they fail):"
  cat "$skipped_list"
fi
# One closing line for the whole run, summed over every test binary:
# skipped are the ignored ones and those a missing tool skipped.
awk -v missing="$( [ -s "$skipped_list" ] && wc -l <"$skipped_list" || echo 0)" \
  '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "hearth: %d passed, %d failed, %d skipped\n", p - missing, f, i + missing }' \
  "${TMPDIR:-/tmp}/hearth-test.log"
echo "== cgroup v2: the shipped systemd unit on a Debian 12 VM (scripts/vm/cgroup-v2.sh)"
set +e
scripts/vm/cgroup-v2.sh
vm_status=$?
set -e
echo "hearth: cgroup v2 VM $([ "$vm_status" -eq 0 ] && echo passed || echo "FAILED (exit $vm_status)")"
echo "== fuzz targets (fuzz/: what parses a tenant's input), ${FUZZ_SECONDS:-30} s each"
set +e
scripts/fuzz.sh
fuzz_status=$?
set -e
[ "$status" -ne 0 ] && exit "$status"
[ "$vm_status" -ne 0 ] && exit "$vm_status"
exit "$fuzz_status"

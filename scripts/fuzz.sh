#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (cargo-fuzz, libFuzzer) for a bounded
# time: FUZZ_SECONDS each (default 30). Each starts from the seeds in
# fuzz/corpus/TARGET (hand-made inputs, and every input that once failed)
# and from the corpus kept on this machine outside the checkout, as the
# build is (HEARTH_FUZZ_CORPUS, default ~/.cache/hearth/fuzz-corpus), where
# the inputs that reach new code are added: each run goes on from where
# the last stopped. A crash fails the run and names the input that caused
# it (fuzz/artifacts/TARGET/), which `cargo fuzz run -s none TARGET FILE`
# replays; add it to the seeds with the fix.
#
# Stable Rust, no sanitizer (`-s none`): the targets are safe-Rust parsers,
# where what a fuzzer finds is a panic, a failed assertion, a hang or a
# runaway allocation, and libFuzzer reports all of those without one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
  echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
  env -u CARGO_TARGET_DIR cargo install --quiet --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

seconds="${FUZZ_SECONDS:-30}"
# Apart from the main build: these are built with coverage instrumentation.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR%/}-fuzz"
corpus="${HEARTH_FUZZ_CORPUS:-$HOME/.cache/hearth/fuzz-corpus}"
# Past this many inputs a kept corpus is merged down to the ones that
# each add coverage, so it stays bounded on disk.
max_kept="${FUZZ_MAX_KEPT:-20000}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

cd fuzz
cargo fuzz build -O -s none
for target in $(cargo fuzz list); do
  mkdir -p "$corpus/$target"
  echo "== fuzz $target (${seconds} s)"
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a runaway
  # allocation. Shown: libFuzzer's own summary, or the failure.
  log="$scratch/$target.log"
  set +e
  cargo fuzz run -O -s none "$target" "$corpus/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz: $target FAILED; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log"
  kept=$(find "$corpus/$target" -type f | wc -l)
  if [ "$kept" -gt "$max_kept" ]; then
    merged="$corpus/$target.merged"
    rm -rf "$merged" && mkdir -p "$merged"
    cargo fuzz run -O -s none "$target" -- -merge=1 "$merged" "$corpus/$target" >"$log" 2>&1
    rm -rf "$corpus/$target" && mv "$merged" "$corpus/$target"
    echo "corpus: $kept inputs merged down to $(find "$corpus/$target" -type f | wc -l)"
  fi
  echo "corpus: $(find "$corpus/$target" -type f | wc -l) inputs kept in $corpus/$target"
done
echo "fuzz: every target ran ${seconds} s without a failure"

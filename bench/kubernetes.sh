#!/usr/bin/env bash
# Figures of a cluster started from the Kubernetes manifests (issue 32):
# requests lost while a gateway and a node stop under load, how long each
# takes from SIGTERM to exit, and how soon a deploy through one gateway is
# served through another. Runs the end-to-end tests that measure them
# (kubernetes::…, cluster::any_gateway…) ROUNDS times and prints their
# `figure:` lines. Debug build, as the test command builds them; on
# loopback, so network latency is not in the figures.
# Usage: bench/kubernetes.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
. scripts/kubernetes-tools.sh
ROUNDS=${1:-5}
for r in $(seq 1 "$ROUNDS"); do
  cargo test -q -p hearth --test all -- --nocapture --test-threads 1 \
    kubernetes::the_dev_overlay cluster::any_gateway 2>&1 | grep -E '^figure:' | sed "s/^/round $r: /"
done

#!/usr/bin/env bash
# Starts Hearth with its embedded defaults: 127.0.0.1:8080, data in ./.hearth
# (SQLite registry, artifacts), example functions ready to invoke.
# Extra arguments go to `hearth up`, e.g. ./run.sh --listen 0.0.0.0:8080
set -euo pipefail
cd "$(dirname "$0")"
. scripts/setup.sh
cargo build --release -p hearth
exec "$CARGO_TARGET_DIR/release/hearth" up "$@"

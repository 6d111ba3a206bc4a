#!/usr/bin/env bash
# Installs what building and testing Hearth needs on a Debian machine, and
# only what is missing. Sourced by run.sh and test.sh.
set -euo pipefail

need_apt=()
for pkg in clang lld wasi-libc libclang-rt-14-dev-wasm32 wrk pkg-config postgresql nats-server curl ca-certificates python3-venv; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# The process tier runs /usr/bin/python3 and /usr/bin/node, and installs
# packages with pip and npm. A machine may have them from elsewhere (Node.js
# from NodeSource bundles npm): only what is missing comes from Debian.
[ -x /usr/bin/python3 ] || need_apt+=(python3)
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
[ -x /usr/bin/node ] || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: installing Rust with rustup (https://rustup.rs)" >&2
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y --profile minimal --default-toolchain stable >/dev/null
  . "$HOME/.cargo/env"
fi
for comp in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp"
done
# The compiled js tier's runtime (crates/hearth-jit-runtime) is built to
# wasm32 by hearth-jit's build script.
rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown ||
  rustup target add wasm32-unknown-unknown

# Builds are kept outside the checkout so fresh clones build incrementally.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hearth/target}"


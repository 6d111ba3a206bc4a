#!/usr/bin/env bash
# Installs what building and testing Hearth needs on a Debian machine, and
# only what is missing. Sourced by run.sh and test.sh.
set -euo pipefail

need_apt=()
for pkg in clang lld wasi-libc libclang-rt-14-dev-wasm32 wrk pkg-config postgresql curl ca-certificates python3-venv; do
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

# Builds are kept outside the checkout so fresh clones build incrementally.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hearth/target}"

# The component tests build C functions into wasi:http components with
# these two (examples/components/build.sh); pinned, built once.
install_tool() { # crate version binary
  if ! "$3" --version 2>/dev/null | grep -q " $2"; then
    echo "setup: installing $1 $2 with cargo (a few minutes, once)" >&2
    env -u CARGO_TARGET_DIR cargo install --quiet --locked "$1" --version "$2"
  fi
}
install_tool wasm-tools 1.263.0 wasm-tools
install_tool wit-bindgen-cli 0.63.0 wit-bindgen

# ...and a Python function into a component with componentize-py (PyPI),
# in a virtualenv of its own; the tests find it through this variable.
CPY_VENV="$HOME/.cache/hearth/componentize-py-0.25.1"
if [ ! -x "$CPY_VENV/bin/componentize-py" ]; then
  echo "setup: installing componentize-py 0.25.1 with pip (once)" >&2
  /usr/bin/python3 -m venv "$CPY_VENV"
  "$CPY_VENV/bin/pip" install -q --disable-pip-version-check "componentize-py==0.25.1"
fi
export HEARTH_COMPONENTIZE_PY="$CPY_VENV/bin/componentize-py"

# ...and a JavaScript function with componentize-js (npm), in a directory
# of its own; the tests find it through this variable.
CJS_DIR="$HOME/.cache/hearth/componentize-js-0.23.0"
if [ ! -f "$CJS_DIR/node_modules/@bytecodealliance/componentize-js/package.json" ]; then
  echo "setup: installing componentize-js 0.23.0 with npm (once)" >&2
  mkdir -p "$CJS_DIR"
  npm install --silent --no-audit --no-fund --prefix "$CJS_DIR" "@bytecodealliance/componentize-js@0.23.0"
fi
export COMPONENTIZE_JS="$CJS_DIR"

#!/usr/bin/env bash
# The tools that build wasi:http components from C, Python and JavaScript:
# what the tests and bench/components.sh need, and running Hearth does not.
# Sourced after scripts/setup.sh by test.sh and bench/components.sh.
set -euo pipefail

# C: wit-bindgen and wasm-tools (examples/components/build.sh); pinned,
# built once.
install_tool() { # crate version binary
  if ! "$3" --version 2>/dev/null | grep -q " $2"; then
    echo "setup: installing $1 $2 with cargo (a few minutes, once)" >&2
    env -u CARGO_TARGET_DIR cargo install --quiet --locked "$1" --version "$2"
  fi
}
install_tool wasm-tools 1.263.0 wasm-tools
install_tool wit-bindgen-cli 0.63.0 wit-bindgen

# Python: componentize-py (PyPI), in a virtualenv of its own; the tests
# find it through this variable.
CPY_VENV="$HOME/.cache/hearth/componentize-py-0.25.1"
if [ ! -x "$CPY_VENV/bin/componentize-py" ]; then
  echo "setup: installing componentize-py 0.25.1 with pip (once)" >&2
  /usr/bin/python3 -m venv "$CPY_VENV"
  "$CPY_VENV/bin/pip" install -q --disable-pip-version-check "componentize-py==0.25.1"
fi
export HEARTH_COMPONENTIZE_PY="$CPY_VENV/bin/componentize-py"

# JavaScript: componentize-js (npm), in a directory of its own; the tests
# find it through this variable.
CJS_DIR="$HOME/.cache/hearth/componentize-js-0.23.0"
if [ ! -f "$CJS_DIR/node_modules/@bytecodealliance/componentize-js/package.json" ]; then
  echo "setup: installing componentize-js 0.23.0 with npm (once)" >&2
  mkdir -p "$CJS_DIR"
  npm install --silent --no-audit --no-fund --prefix "$CJS_DIR" "@bytecodealliance/componentize-js@0.23.0"
fi
export COMPONENTIZE_JS="$CJS_DIR"

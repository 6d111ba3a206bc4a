#!/usr/bin/env bash
# Builds a C wasi:http function into a component:
#   build.sh SOURCE.c OUT.wasm ADAPTER.wasm [WORLD]
# with wit-bindgen (C bindings for a world of wit/, `function` unless WORLD
# says otherwise; the source includes "<world>.h"), clang (with $CFLAGS) for
# wasm32-wasi (a reactor: the handler is an export, there is no main) and
# wasm-tools, which wraps the core module into a component, adapting its
# WASI preview 1 imports with ADAPTER (the `proxy` preview-1 adapter of the
# wasmtime version Hearth pins; crate wasi-preview1-component-adapter-provider).
set -euo pipefail
src=$1 out=$2 adapter=$3 world=${4:-function}
base=${world//-/_}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wit-bindgen c "$here/wit" --world "hearth:examples/$world" --out-dir "$work" >/dev/null 2>&1
# shellcheck disable=SC2086 # CFLAGS is a list of flags
clang --target=wasm32-wasi -O2 -mexec-model=reactor ${CFLAGS:-} -I "$work" \
  -o "$work/core.wasm" "$src" "$work/$base.c" "$work/${base}_component_type.o"
wasm-tools component new "$work/core.wasm" \
  --adapt "wasi_snapshot_preview1=$adapter" -o "$out"

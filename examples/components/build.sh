#!/usr/bin/env bash
# Builds a C wasi:http function into a component:
#   build.sh SOURCE.c OUT.wasm ADAPTER.wasm
# with wit-bindgen (C bindings for wit/'s `function` world), clang for
# wasm32-wasi (a reactor: the handler is an export, there is no main) and
# wasm-tools, which wraps the core module into a component, adapting its
# WASI preview 1 imports with ADAPTER (the `proxy` preview-1 adapter of the
# wasmtime version Hearth pins; crate wasi-preview1-component-adapter-provider).
set -euo pipefail
src=$1 out=$2 adapter=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wit-bindgen c "$here/wit" --world hearth:examples/function --out-dir "$work" >/dev/null
clang --target=wasm32-wasi -O2 -mexec-model=reactor -I "$work" \
  -o "$work/core.wasm" "$src" "$work/function.c" "$work/function_component_type.o"
wasm-tools component new "$work/core.wasm" \
  --adapt "wasi_snapshot_preview1=$adapter" -o "$out"

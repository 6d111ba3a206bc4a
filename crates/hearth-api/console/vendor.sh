#!/usr/bin/env bash
# Fetches the console's two front-end libraries from the npm registry, at
# the versions pinned here, and checks them against the hashes below (the
# files in vendor/ are these, byte for byte; `--check` only compares).
#   htm 3.1.1 (with Preact, one ES module): the components and hooks.
#   uPlot 1.6.32: the charts.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent htm@3.1.1 uplot@1.6.32 >/dev/null
tar xzf htm-3.1.1.tgz --one-top-level=htm
tar xzf uplot-1.6.32.tgz --one-top-level=uplot
cp htm/package/preact/standalone.module.js htm-preact-3.1.1.module.js
cp uplot/package/dist/uPlot.iife.min.js uPlot-1.6.32.iife.min.js
cp uplot/package/dist/uPlot.min.css uPlot-1.6.32.min.css
sha256sum -c - <<'SUMS'
72284e8e9079c87817145df1110f74e8a2aa040b2fc384922e18dfcb46fc1fd7  htm-preact-3.1.1.module.js
19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f  uPlot-1.6.32.iife.min.js
df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04  uPlot-1.6.32.min.css
SUMS
for f in htm-preact-3.1.1.module.js uPlot-1.6.32.iife.min.js uPlot-1.6.32.min.css; do
  if [ "${1:-}" = --check ]; then
    cmp "$f" "$here/vendor/$f"
  else
    cp "$f" "$here/vendor/$f"
  fi
done
if [ "${1:-}" != --check ]; then
  cp htm/package/LICENSE "$here/vendor/htm.LICENSE"
  cp uplot/package/LICENSE "$here/vendor/uPlot.LICENSE"
fi
echo "vendor/ matches npm's htm 3.1.1 and uplot 1.6.32"

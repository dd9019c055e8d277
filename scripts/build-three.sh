#!/usr/bin/env bash
# Bundles the part of three.js that the browser player's page uses (scripts/three/entry.js) from
# npm into crates/app/src/demo/static/three.min.js, which the repository keeps, so that
# `cargo demo` needs no Node.js: run it after changing the versions in scripts/three/package.json
# or what play.js imports, and commit the result. esbuild (from npm, a binary in its package)
# tree-shakes and minifies in well under a second.
# Usage: scripts/build-three.sh [OUT.js]   (default: the committed file; --check compares)
set -euo pipefail
cd "$(dirname "$0")/.."
out=crates/app/src/demo/static/three.min.js
check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) out=$1 ;;
esac
npm ci --prefix scripts/three --no-audit --no-fund --loglevel=error >/dev/null
version=$(node -p 'require("./scripts/three/node_modules/three/package.json").version')
banner="/* three.js $version (MIT License, Copyright 2010-2025 three.js authors), the subset in scripts/three/entry.js, bundled by scripts/build-three.sh */"
bundle=$(mktemp --suffix .js)
trap 'rm -f "$bundle"' EXIT
scripts/three/node_modules/.bin/esbuild scripts/three/entry.js --bundle --minify --format=esm \
    --legal-comments=none --banner:js="$banner" --log-level=warning --outfile="$bundle"
if $check; then
    cmp -s "$bundle" "$out" || { echo "error: $out is not what scripts/build-three.sh makes: run it and commit" >&2; exit 1; }
    echo "$out is up to date"
else
    cp "$bundle" "$out"
fi
echo "three.js $version subset: $(stat -c %s "$out") bytes, $(gzip -9 -c "$out" | wc -c) gzip-compressed"

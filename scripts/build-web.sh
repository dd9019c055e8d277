#!/usr/bin/env bash
# Builds the browser player's client (crates/web-client) into target/web/pkg, which
# `rally demo --play target/web/pkg` serves: Rust to wasm32-unknown-unknown, then wasm-bindgen's
# JS glue. Fetches what it needs on first use: the wasm target (rustup) and wasm-bindgen-cli at
# exactly the version of the wasm-bindgen crate in Cargo.lock (cargo install, a few minutes
# once). Prints the bundle's size, raw and gzip-compressed.
# Usage: scripts/build-web.sh [OUT_DIR]   (default target/web/pkg)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/web/pkg}
target_dir=${CARGO_TARGET_DIR:-target}

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    echo "adding the wasm32-unknown-unknown target (once)"
    rustup target add wasm32-unknown-unknown
fi
version=$(sed -n '/^name = "wasm-bindgen"$/{n;s/^version = "\(.*\)"$/\1/p}' Cargo.lock)
[ -n "$version" ] || { echo "error: no wasm-bindgen in Cargo.lock" >&2; exit 1; }
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $version" ]; then
    echo "installing wasm-bindgen-cli $version (once; it must match the crate exactly)"
    # --locked takes the CLI's own lock file; a registry missing one of its pinned versions
    # falls back to the newest compatible ones.
    cargo install wasm-bindgen-cli --version "$version" --locked --quiet ||
        cargo install wasm-bindgen-cli --version "$version" --quiet
fi

cargo build -p rally-web-client --target wasm32-unknown-unknown --profile web --locked --quiet
wasm-bindgen --target web --no-typescript --out-dir "$out" \
    "$target_dir/wasm32-unknown-unknown/web/rally_web_client.wasm"
wasm="$out/rally_web_client_bg.wasm"
echo "web client: $out ($(stat -c %s "$wasm") bytes of wasm, $(gzip -9 -c "$wasm" | wc -c) gzip-compressed;" \
    "JS glue $(stat -c %s "$out/rally_web_client.js") bytes)"

#!/usr/bin/env bash
# Builds the browser player's wasm client (crates/web-client) on its own and prints its size,
# raw and gzip-compressed. `cargo demo` does not need it: the rally binary's build script
# builds the same module (docs/web.md); this is for measuring it, or serving it elsewhere.
# Usage: scripts/build-web.sh [OUT.wasm]   (default: only report the size)
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    rustup target add wasm32-unknown-unknown
fi
cargo build -p rally-web-client --target wasm32-unknown-unknown --profile web --locked --quiet
wasm="$target_dir/wasm32-unknown-unknown/web/rally_web_client.wasm"
[ -z "${1:-}" ] || cp "$wasm" "$1"
echo "web client: $wasm: $(stat -c %s "$wasm") bytes of wasm, $(gzip -9 -c "$wasm" | wc -c) gzip-compressed;" \
    "its JS wrapper (crates/app/src/demo/static/rally-client.js) $(stat -c %s crates/app/src/demo/static/rally-client.js) bytes"

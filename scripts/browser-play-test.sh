#!/usr/bin/env bash
# The browser player's test: starts `rally demo` (three bots: the far end is free; its build
# script built the wasm client into the binary) and plays it in headless Chromium
# (tests/browser/play.mjs): the page joins over WebTransport, then (`?transport=ws`) over the
# WebSocket gateway, then with a certificate hash it cannot trust (it must fall back and say
# so); each time it draws the table in 3D, scripted mouse moves put its hand where the server's
# state must show it, and it prints its figures and CPU per frame; a bad token is said on the
# page. The demo's last lines give each gateway's datagrams and CPU per datagram.
# WEBTRANSPORT=off: a build without the gateway (as `cargo demo`'s): the page plays over the
# WebSocket and says why.
# Usage: scripts/browser-play-test.sh [SCREENSHOT.png]   (default target/ci/play.png)
# PIPELINE=greedy runs the room on the greedy pipeline (default fast); PLAY_QUERY adds to the
# page's address (docs/web.md: `worker=0`, `present=drawn`); PLAY_SECONDS (default 2) is how
# long each visit plays before its figures are read.
# Needs what scripts/browser-test.sh needs (Node.js with npm, Chromium; it installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
screenshot=${1:-target/ci/play.png}
mkdir -p "$(dirname "$screenshot")"
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "error: no browser at $chromium: run scripts/browser-test.sh once (it installs Debian's chromium) or set CHROMIUM" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-target}
npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error >/dev/null
# PROFILE=demo plays the `cargo demo` build instead (docs/web.md compares them); with
# WEBTRANSPORT=off, exactly as `cargo demo` builds it (no default features: no WebTransport
# gateway; the page must play over the WebSocket and say why).
profile=${PROFILE:-release}
features=()
[ "${WEBTRANSPORT:-on}" = off ] && features=(--no-default-features)
cargo build --profile "$profile" --locked --quiet -p rally "${features[@]}"

log=$(mktemp)
demo=""
trap '[ -z "$demo" ] || kill "$demo" 2>/dev/null || true; wait 2>/dev/null || true; rm -f "$log"' EXIT
"$target_dir/$profile/rally" demo --port 0 --duration 120 --pipeline "${PIPELINE:-fast}" >"$log" 2>&1 &
demo=$!
url=""
for _ in $(seq 100); do
    url=$(sed -n 's/^dashboard: \(http[^ ]*\).*/\1/p' "$log")
    [ -n "$url" ] && grep -q "^play in your browser" "$log" && break
    kill -0 "$demo" 2>/dev/null || { echo "error: rally demo exited:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { echo "error: no dashboard address in 10 s:" >&2; cat "$log" >&2; exit 1; }
grep "^play in your browser\|no wasm client" "$log"
CHROMIUM=$chromium node tests/browser/play.mjs "$url" "$screenshot"
kill -INT "$demo"
wait "$demo" || { echo "error: rally demo did not exit cleanly:" >&2; tail -5 "$log" >&2; exit 1; }
demo=""
echo "the demo's last figures:"
tail -4 "$log"

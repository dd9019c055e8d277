#!/usr/bin/env bash
# The dashboard's browser test: starts `rally demo`, opens its dashboard in headless Chromium
# (Debian's chromium package, driven by playwright-core from npm), checks that the figures
# update and the table is drawn, and saves a screenshot; then the same for `rally demo --scene
# scenes/sandbox.toml` (the scene drawn from above, saved beside it as dashboard-scene.png).
# Usage: scripts/browser-test.sh [SCREENSHOT.png [SETTLE_SECONDS]]
#   (default target/ci/dashboard.png; SETTLE_SECONDS: let the demo play that long first, for a
#   screenshot whose histogram holds only steady play)
# Needs: the release build of rally (cargo builds it), Node.js with npm, and Chromium: as root
# it installs Debian's chromium when missing; otherwise it says how.
set -euo pipefail
cd "$(dirname "$0")/.."
screenshot=${1:-target/ci/dashboard.png}
settle=${2:-0}
mkdir -p "$(dirname "$screenshot")"

chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's chromium for the browser test"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }
    else
        echo "error: no browser at $chromium: install it (sudo apt-get install chromium) or set CHROMIUM=/path/to/chromium" >&2
        exit 1
    fi
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "error: npm not found: install Node.js (sudo apt-get install nodejs npm) and rerun" >&2
    exit 1
fi
npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error >/dev/null

cargo build --release --locked --quiet
log=$(mktemp)
demo=""
# The demo never outlives the test, whatever happens to it.
trap '[ -z "$demo" ] || kill "$demo" 2>/dev/null || true; wait 2>/dev/null || true; rm -f "$log"' EXIT

# Starts `rally demo ARGS...` and sets `demo` (its pid) and `url` (its dashboard), or fails
# with what the demo said.
start_demo() {
    "${CARGO_TARGET_DIR:-target}/release/rally" demo --port 0 --duration 120 "$@" >"$log" 2>&1 &
    demo=$!
    url=""
    for _ in $(seq 100); do
        url=$(sed -n 's/^dashboard: \(http[^ ]*\).*/\1/p' "$log")
        [ -n "$url" ] && break
        if ! kill -0 "$demo" 2>/dev/null; then
            echo "error: rally demo $* exited before its dashboard came up:" >&2
            cat "$log" >&2
            exit 1
        fi
        sleep 0.1
    done
    [ -n "$url" ] || { echo "error: no dashboard address in 10 s:" >&2; cat "$log" >&2; exit 1; }
    echo "dashboard at $url"
}

# Ctrl-C's path: the demo must stop cleanly on SIGINT.
stop_demo() {
    kill -INT "$demo"
    if ! wait "$demo"; then
        echo "error: rally demo did not exit cleanly on SIGINT:" >&2
        tail -5 "$log" >&2
        exit 1
    fi
    demo=""
}

start_demo
sleep "$settle"
CHROMIUM=$chromium node tests/browser/dashboard.mjs "$url" "$screenshot"
stop_demo
echo "the demo stopped cleanly on SIGINT; its last figures:"
tail -2 "$log"

# The same dashboard drawing a scene: `rally demo --scene`, its geometry from /api/scene and
# its bodies from the replicated state (a few seconds more).
scene_shot="$(dirname "$screenshot")/dashboard-scene.png"
start_demo --scene scenes/sandbox.toml
CHROMIUM=$chromium node tests/browser/scene.mjs "$url" "$scene_shot"
stop_demo

#!/usr/bin/env bash
# Times what a newcomer waits for: from a fresh clone of this checkout's HEAD, with an empty
# target directory, the README's first command (`cargo demo`) until its dashboard serves live
# figures (every player joined, the host's phases and latency samples in). Run it on a quiet
# machine; crates already in cargo's download cache are not downloaded again.
# Usage: scripts/demo-startup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
demo=""
# The demo and the clone never outlive the measurement.
trap '[ -n "$demo" ] && kill -INT "$demo" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
git clone -q . "$work/rally"
cd "$work/rally"
started=$(date +%s.%N)
CARGO_TARGET_DIR="$work/target" cargo demo --port 0 >"$work/demo.log" 2>"$work/build.log" &
demo=$!
live='import json, sys
view = json.load(sys.stdin)
joined = all(c["client"] is not None for c in view["clients"])
sys.exit(0 if joined and view["phases"] and view["latency"]["samples"] > 0 else 1)'
while true; do
    if ! kill -0 "$demo" 2>/dev/null; then
        echo "error: the demo exited before its dashboard was live:" >&2
        tail -5 "$work/build.log" "$work/demo.log" >&2
        exit 1
    fi
    url=$(sed -n 's/^dashboard: \(http[^ ]*\).*/\1/p' "$work/demo.log")
    if [ -n "$url" ] && curl -s "${url}api/live" | python3 -c "$live" 2>/dev/null; then
        break
    fi
    sleep 0.2
done
elapsed=$(echo "$(date +%s.%N) - $started" | bc)
build=$(sed -n 's/.*Finished `demo` profile.* in \(.*\)$/\1/p' "$work/build.log")
echo "fresh clone to a live dashboard: ${elapsed} s (the build: ${build})"

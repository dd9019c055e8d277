#!/usr/bin/env bash
# Counts the host's instructions per reference room-tick under callgrind, telemetry off and on,
# by phase, with the telemetry-off run's simulated L2 misses (rally-bench count;
# docs/benchmarks.md, "Host instructions per room-tick"), after the same run timed natively (CPU
# time per room-tick, and what a clock read costs here), and sealing plus opening a packet with
# each AEAD compared, timed and counted.
# Usage: [RALLY_PROFILE=dist] scripts/count.sh [--quick] [--rooms N]   (about 10 minutes; --quick about 3)
# Counts do not move with the machine's load: they can be taken beside a build.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq valgrind
    else
        echo "valgrind is needed: sudo apt-get install valgrind" >&2
        exit 1
    fi
fi
target="${CARGO_TARGET_DIR:-target}"
# RALLY_PROFILE=dist counts the build a server ships (whole-program LTO; Cargo.toml).
profile="${RALLY_PROFILE:-release}"
cargo build --profile "$profile" --locked --quiet -p rally-bench
"$target/$profile/rally-bench" count "$@"
"$target/$profile/rally-bench" count --callgrind --out "$target/count" \
    --json "$target/count/count.json" "$@"

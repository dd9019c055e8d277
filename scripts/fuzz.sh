#!/usr/bin/env bash
# Runs every cargo-fuzz target for N seconds (default 60): scripts/fuzz.sh [seconds] [target...]
# Needs a nightly toolchain; installs cargo-fuzz from crates.io if it is missing. A crash leaves
# its input in fuzz/artifacts/<target>/; turn each into a regression test in a
# tests/malformed_input.rs before fixing it.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
shift || true
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: skipped, no nightly toolchain (rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
for target in "${targets[@]}"; do
    echo "== fuzz $target for ${seconds}s"
    cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -max_len=1500 2>&1 | tail -n 3
done

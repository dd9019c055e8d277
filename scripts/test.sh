#!/usr/bin/env bash
# Rally's test command: everything CI checks, in the order that fails fastest.
# Usage: scripts/test.sh        (from anywhere in the checkout)
# Needs: a Rust toolchain with rustfmt and clippy (rustup); cargo fetches every crate.
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
    local name=$1
    shift
    printf '\n== %s: %s\n' "$name" "$*"
    local start=$SECONDS
    "$@"
    printf '== %s passed in %ss\n' "$name" $((SECONDS - start))
}

# A clean clone gains nothing from incremental compilation's caches (gigabytes in the debug
# target of a workspace this size) and CI's disk is shared: build without them.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found; install Rust with rustup (https://rustup.rs) and rerun" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        rustup component add "$component"
    fi
done

# The real-socket shootout (its bench and its test) needs the original C ENet: Debian's
# libenet7, installed here when missing and we are root (otherwise both skip ENet and say why).
if [ ! -e /usr/lib/x86_64-linux-gnu/libenet.so.7 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libenet7 >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libenet7 >/dev/null; } ||
        echo "note: libenet7 could not be installed; the shootout will skip ENet"
fi
# rally-wire's tests compile the C++ port of the snapshot decoder (ports/cpp): a C++17 compiler
# (`CXX`, else `c++`), Debian's g++ installed here when missing and we are root.
if ! command -v "${CXX:-c++}" >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++ >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++ >/dev/null; }
fi
# The conformance client (tests/conformance) is Python 3: Debian's python3 and python3-venv
# (for the `cryptography` package when the system has none) installed here when missing and we
# are root.
if ! command -v python3 >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv >/dev/null ||
        { apt-get update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv >/dev/null; }
fi
# The C# binding's test (bindings/unity) runs under Mono: Debian's mono-mcs (the C# compiler)
# and mono-runtime, installed here when missing and we are root.
if ! command -v mcs >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    mono=(mono-mcs mono-runtime)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${mono[@]}" \
        >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${mono[@]}" >/dev/null; }
fi
step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets --locked -- -D warnings
# `cargo demo` builds rally without its default `webtransport` feature (.cargo/config.toml).
step "clippy: rally as cargo demo builds it" env RALLY_WEB_CLIENT=skip \
    cargo clippy -p rally --all-targets --no-default-features --locked -- -D warnings
step tests cargo test --workspace --locked
step docs env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# Benchmarks are not tests: the smoke run proves they work end to end (table, JSON, plot) and
# leaves the report in target/ci/; it asserts no timing. They are the rally-bench binary
# (crates/bench), apart from the product.
# A short batch of deterministic simulations: every channel's invariants under faults, and
# rooms converging through them.
step "simulation" cargo run --release --locked -- sim --seeds 40
step "bench smoke: wire" cargo run --release --locked -p rally-bench -- wire --quick \
    --json target/ci/wire.json --plot target/ci
step "bench smoke: transport" cargo run --release --locked -p rally-bench -- transport --quick \
    --json target/ci/transport.json --plot target/ci
step "bench smoke: room" cargo run --release --locked -p rally-bench -- room --quick \
    --json target/ci/room.json --plot target/ci
step "bench smoke: latency" cargo run --release --locked -p rally-bench -- latency --quick \
    --json target/ci/latency.json --plot target/ci
step "bench smoke: load" cargo run --release --locked -p rally-bench -- load --quick \
    --json target/ci/load.json --plot target/ci
# The count's workload without valgrind (a second): scripts/count.sh counts it.
step "bench smoke: count" cargo run --release --locked -p rally-bench -- count --quick \
    --json target/ci/count.json
# The receive and send paths on cold connections (a second or two).
step "bench smoke: count, cold paths" cargo run --release --locked -p rally-bench -- count --cold \
    --json target/ci/count-cold.json
# Two of the five links (clean and the bursty one), every peer on each: the smoke proves the real
# libraries run end to end; the five links took over three minutes of CI's time.
step "bench smoke: transport, real sockets" cargo run --release --locked -p rally-bench -- \
    transport --mode real --quick --profiles clean,bursty-10 \
    --json target/ci/transport-real.json --plot target/ci
step "bench smoke: latency, real processes" cargo run --release --locked -p rally-bench -- \
    latency --mode real --quick --hz 120 --json target/ci/latency-real.json
# The C sample (examples/c): librally (rally-ffi, release) and sample.c built with the system's
# C compiler, run against `rally server --scene scenes/sandbox.toml` over UDP for 3 s with the
# standard XR input; it exits 0 only if the room shows its hand where it put it and the block
# it gripped held beside it.
step "C sample" bash examples/c/run.sh --release -- --input xr --grab 0.9,0.25,-1.0 --seconds 3
# The same with the library's I/O thread (RallyConfig.io_thread = RALLY_IO_THREAD_ON): the
# socket and the session on that thread, the frame's calls doing no socket work.
step "C sample, I/O thread" bash examples/c/run.sh --release -- --input xr --grab 0.9,0.25,-1.0 \
    --seconds 3 --io-thread on --calls frame
# The C# binding (bindings/unity/com.rally.client) without Unity: its plain assembly and a
# console test compiled by Mono's mcs, run under Mono against the same room for 3 s: struct
# layouts checked against the C compiler's, a malformed token refused, then join, grab, carry,
# and the room must show the hand at its target and the block held; prints the latency meter.
step "C# binding under Mono" bash bindings/unity/run-mono.sh --release
step "C# binding under Mono, I/O thread" bash bindings/unity/run-mono.sh --release -- --io-thread on \
    --calls separate
# The conformance client: Python written from docs/protocol.md, docs/wire.md and
# docs/security.md, against `rally echo server` and `rally server` through `rally-bench relay`
# (5% loss each way), with the release binaries the steps above built. It needs python3 and
# installs the `cryptography` package into target/ when the system lacks it.
target=${CARGO_TARGET_DIR:-target}
step "conformance client" bash tests/conformance/run.sh --rally "$target/release/rally" \
    --bench "$target/release/rally-bench"
# The dashboard in a real browser: headless Chromium (Debian's, installed here when missing)
# opens `rally demo`'s page, checks that its figures update and its canvas draws, saves a
# screenshot; then the demo must stop cleanly on SIGINT.
step "browser: dashboard" bash scripts/browser-test.sh target/ci/dashboard.png
# The browser player: the same release rally (its build script built the wasm client into it)
# serves /play; headless Chromium joins the room over the WebSocket gateway, draws the table
# with three.js, scripted mouse moves must put the page's hand where the server shows it, a
# bad token must be said on the page; prints the latency meter's figures and CPU per frame.
step "browser: play" bash scripts/browser-play-test.sh target/ci/play.png
# A short fuzzing smoke of every decoder and of handle_datagram on fresh and connected
# endpoints, where a nightly toolchain is present (scripts/fuzz.sh says so when it is not).
step "fuzz smoke" bash scripts/fuzz.sh 10
echo
echo "all checks passed"

#!/usr/bin/env bash
# The C# frame's CPU and the C sample's, in interleaved rounds (C# under Mono, then C, again),
# so that both see the same machine; prints one table. Each run reads 256 entities a frame for
# FRAMES frames at 90 Hz, the thread's CPU clock read only at each frame's edges, one read's
# cost taken out (the C# runs then time each call in a second pass: their lines below the
# table), then times the floor (a frame of one call that does nothing, and of none). Each
# round runs every way of calling asked for (--calls both: the six calls one by one, then one
# rally_client_frame). The runs' whole output stays in $CARGO_TARGET_DIR/bench-rounds/.
#
#   CARGO_TARGET_DIR=... bash bindings/unity/bench-rounds.sh [--rounds N] [--frames N]
#                       [--io-thread off|on|wake] [--calls separate|frame|both]
#
# Builds what it needs in release (nothing when already built); needs mono-mcs, mono-runtime
# and a C compiler, as run-mono.sh and examples/c/run.sh do.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
frames=900
mode=wake
calls="separate frame"
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift ;;
        --frames) frames=$2; shift ;;
        --io-thread) mode=$2; shift ;;
        --calls) calls=$2; [ "$calls" = both ] && calls="separate frame"; shift ;;
        *) echo "bench-rounds.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
target="${CARGO_TARGET_DIR:-target}"
out="$target/bench-rounds"
mkdir -p "$out"

# Runs one benchmark into its log, once more if it fails (on a loaded machine a room now and
# then does not accept the client within the 5 s the programs wait), or shows the log's end
# and stops.
run() {
    local log=$1
    shift
    "$@" > "$log" 2>&1 && return
    # (not the C# test's "errors:" line, which shows a refusal it asked for)
    echo "bench-rounds.sh: failed once, again ($log: $(grep -v '^errors:' "$log" |
        grep -m1 -E 'did not|failed'))" >&2
    "$@" > "$log" 2>&1 && return
    echo "bench-rounds.sh: failed, $log ends:" >&2
    tail -20 "$log" >&2
    exit 1
}

table="$out/table.txt"
printf '| round | what | this thread, mean us | p50 | p99 | max | the process, us a frame | load |\n' > "$table"
printf '|---|---|---|---|---|---|---|---|\n' >> "$table"
floors="$out/floors.txt"
: > "$floors"
for r in $(seq 1 "$rounds"); do
    for c in $calls; do
        log="$out/mono-$c-$r.txt"
        load=$(cut -d' ' -f1 /proc/loadavg)
        run "$log" bash bindings/unity/run-mono.sh --release --bench "$frames" -- \
            --io-thread "$mode" --calls "$c"
        sed -nE "s/^bench: .* CPU per frame mean ([0-9.]+) us, p50 ([0-9.]+) us, p99 ([0-9.]+) us, max ([0-9.]+) us.*/| $r | C# $mode $c | \1 | \2 | \3 | \4 | /p" \
            "$log" | tr -d '\n' >> "$table"
        sed -nE "s/^bench: the process's CPU per frame \(every thread, waits included\) ([0-9.]+) us.*/\1 | $load |/p" \
            "$log" >> "$table"
        sed -nE "s/^bench: the floor, (.*)/C# round $r ($c): \1/p" "$log" >> "$floors"
    done
    for c in $calls; do
        log="$out/c-$c-$r.txt"
        load=$(cut -d' ' -f1 /proc/loadavg)
        run "$log" bash examples/c/run.sh --release --scene "$target/mono-test/bench-256.toml" \
            -- --input xr --grab 0.9,0.25,-1.0 --seconds $((frames / 90)) --io-thread "$mode" \
            --calls "$c" --floor $((frames / 3))
        sed -nE "s/^cpu per frame: this thread mean ([0-9.]+) us, p50 ([0-9.]+), p99 ([0-9.]+), max ([0-9.]+); the process ([0-9.]+) us.*/| $r | C $mode $c | \1 | \2 | \3 | \4 | \5 | $load |/p" \
            "$log" >> "$table"
        sed -nE "s/^floor, (.*)/C round $r ($c): \1/p" "$log" >> "$floors"
    done
done
cat "$table"
echo
for r in $(seq 1 "$rounds"); do
    for c in $calls; do
        echo "C# round $r, $c:"
        grep -E '^bench: (one |mean CPU per)|managed bytes' "$out/mono-$c-$r.txt" |
            sed -E 's/^bench: /  /'
    done
done
echo
cat "$floors"

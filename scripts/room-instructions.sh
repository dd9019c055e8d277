#!/usr/bin/env bash
# Instructions per room-tick of `rally-bench room`'s cases, counted by callgrind: repeatable
# where wall time is not (a shared machine's other work moves every microsecond figure).
#
# Usage: scripts/room-instructions.sh [CASE...]   (default: reference sandbox-greedy)
#        CASE is one of rally-bench room's --case values.
# Needs: valgrind (Debian: apt-get install valgrind).
#
# Each case runs alone (`rally-bench room --quick --case CASE`) under callgrind. The engine's
# share of a tick is what `rally-bench room` times as "engine total": `Room::receive` (ingest:
# decoding and applying every input on arrival, and the fast path) plus the room's ingest,
# interact, replicate and transmit phases, all read inclusive; simulate (the game's physics) is
# left out. Divided by the ticks run, warm-up included. The first ticks are not like the rest
# (until a client acknowledges a snapshot it gets one of its own, encoded for it alone), and
# the cases run different lengths, so for steady state count a case both with and without
# --quick and divide the difference by the ticks between (docs/benchmarks.md). The clients'
# and the network's instructions are in the process but not in these functions.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p rally-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(reference sandbox-greedy)
printf '%-16s %6s %10s %9s %9s %10s %9s %13s\n' case ticks receive ingest interact replicate \
    transmit 'engine total'
for c in "${cases[@]}"; do
    valgrind --tool=callgrind --callgrind-out-file="$out/$c.cg" \
        "$target/release/rally-bench" room --quick --case "$c" >/dev/null 2>"$out/$c.log"
    # Through a file: mawk has been seen to miscount a line of this output read from a pipe.
    callgrind_annotate --inclusive=yes --tree=calling --threshold=100 "$out/$c.cg" \
        >"$out/$c.txt" 2>/dev/null
    awk -v name="$c" '
        # Under each caller ("*"), a callee line is "1,234 (0.1%)  >   file:function (Nx)
        # [binary]": the inclusive cost of its N calls from there. A function'"'"'s cost is the
        # sum over its callers: its own lines are split by the source file of the code the
        # compiler inlined into it. (The bench'"'"'s set-up calls transmit 10 times too.)
        function count(s) { gsub(/[^0-9]/, "", s); return s + 0 }
        BEGIN { split("receive ingest interact replicate transmit", phases, " ") }
        /%\) +> .*rally_engine::room::Room<S>::/ {
            for (k in phases) {
                if (index($0, "Room<S>::" phases[k] " (")) {
                    cost[phases[k]] += count($1)
                    if (phases[k] == "ingest") { ticks += count($(NF - 1)) }
                }
            }
        }
        END {
            if (ticks == 0) { print name ": no ticks found" > "/dev/stderr"; exit 1 }
            for (k in phases) total += cost[phases[k]]
            printf "%-16s %6d %10.0f %9.0f %9.0f %10.0f %9.0f %13.0f\n", name, ticks,
                cost["receive"] / ticks, cost["ingest"] / ticks, cost["interact"] / ticks,
                cost["replicate"] / ticks, cost["transmit"] / ticks, total / ticks
        }' "$out/$c.txt"
done
echo "(instructions per room-tick, warm-up included; simulate, the game's physics, is not in" \
    "the total)"

#!/usr/bin/env bash
# Instructions per room-tick of `rally-bench room`'s cases, counted by callgrind: repeatable
# where wall time is not (a shared machine's other work moves every microsecond figure).
#
# Usage: scripts/room-instructions.sh [--steady] [CASE...]   (default: reference sandbox-greedy)
#        CASE is one of rally-bench room's --case values. RALLY_BENCH=PATH counts that
#        rally-bench binary instead of building this tree's (to compare two builds).
# Needs: valgrind (Debian: apt-get install valgrind).
#
# Each case runs alone (`rally-bench room --quick --case CASE`) under callgrind. The engine's
# share of a tick is what `rally-bench room` times as "engine total": `Room::receive` (ingest:
# decoding and applying every input on arrival, and the fast path) plus the room's ingest,
# interact, replicate and transmit phases, all read inclusive; simulate (the game's physics) is
# left out. Divided by the ticks run, warm-up included. The first ticks are not like the rest
# (until a client acknowledges a snapshot it gets one of its own, encoded for it alone), and
# the cases run different lengths. --steady takes that out: it counts each case twice, with
# and without --quick, and divides the difference by the ticks between (about 4 times as long).
# The clients' and the network's instructions are in the process but not in these functions.
# The phases are `#[inline(never)]` so that each is a function of its own in the profile; a
# case whose profile lacks one gets no total (it would be short by that phase). The game's
# step (`Simulation::step`, the scene's physics) is printed apart as `simulate`, not in the
# total; `-` if the profile has it inlined.
set -euo pipefail
cd "$(dirname "$0")/.."
steady=0
if [ "${1:-}" = --steady ]; then
    steady=1
    shift
fi
bench=${RALLY_BENCH:-}
if [ -z "$bench" ]; then
    cargo build --release -q -p rally-bench
    bench=${CARGO_TARGET_DIR:-target}/release/rally-bench
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Prints a run's ticks and its phases' instructions in all: `count NAME ARGS...` runs
# `rally-bench room ARGS...` under callgrind.
count() {
    local name=$1
    shift
    valgrind --tool=callgrind --callgrind-out-file="$out/$name.cg" "$bench" room "$@" \
        >/dev/null 2>"$out/$name.log"
    # Through a file: mawk has been seen to miscount a line of this output read from a pipe.
    callgrind_annotate --inclusive=yes --tree=calling --threshold=100 "$out/$name.cg" \
        >"$out/$name.txt" 2>/dev/null
    awk -v name="$name" '
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
                    found[phases[k]] = 1
                    if (phases[k] == "ingest") { ticks += count($(NF - 1)) }
                }
            }
        }
        /%\) +> .* as rally_engine::room::Simulation>::step \(/ {
            simulate += count($1)
            stepped = 1
        }
        END {
            if (ticks == 0) { print name ": no ticks found" > "/dev/stderr"; exit 1 }
            for (k in phases) {
                if (!found[phases[k]]) {
                    print name ": phase " phases[k] " not in the profile (inlined?): no total" \
                        > "/dev/stderr"
                    exit 1
                }
            }
            printf "%d %.0f %.0f %.0f %.0f %.0f %s\n", ticks, cost["receive"], cost["ingest"],
                cost["interact"], cost["replicate"], cost["transmit"], stepped ? simulate : "-"
        }' "$out/$name.txt"
}

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(reference sandbox-greedy)
printf '%-16s %6s %10s %9s %9s %10s %9s %13s %10s\n' case ticks receive ingest interact \
    replicate transmit 'engine total' simulate
for c in "${cases[@]}"; do
    # Through a variable: a failed count (a phase missing) stops the script here.
    line=$(count "$c-quick" --quick --case "$c")
    read -r -a quick <<<"$line"
    totals=("${quick[@]}")
    if [ $steady = 1 ]; then
        line=$(count "$c-full" --case "$c")
        read -r -a full <<<"$line"
        for k in "${!full[@]}"; do
            if [ "${full[k]}" = - ] || [ "${quick[k]}" = - ]; then
                totals[k]=-
            else
                totals[k]=$((full[k] - quick[k]))
            fi
        done
    fi
    ticks=${totals[0]}
    awk -v name="$c" -v ticks="$ticks" -v phases="${totals[*]:1}" 'BEGIN {
        n = split(phases, cost, " ")
        # The last is simulate, not in the total.
        for (k = 1; k < n; k++) total += cost[k]
        simulate = cost[n] == "-" ? "-" : sprintf("%.0f", cost[n] / ticks)
        printf "%-16s %6d %10.0f %9.0f %9.0f %10.0f %9.0f %13.0f %10s\n", name, ticks,
            cost[1] / ticks, cost[2] / ticks, cost[3] / ticks, cost[4] / ticks,
            cost[5] / ticks, total / ticks, simulate
    }'
done
if [ $steady = 1 ]; then
    echo "(instructions per room-tick past --quick's ticks: warm-up and start-up left out;" \
        "simulate, the game's step, is not in the total)"
else
    echo "(instructions per room-tick, warm-up included; simulate, the game's step, is not in" \
        "the total)"
fi

#!/usr/bin/env bash
# Regenerates docs/benchmarks.md and the JSON and PNG plots in docs/plots/: every benchmark in
# one go, each one's printed table kept under the command that printed it.
# Usage: scripts/benchmarks.sh [--quick]   (--quick: each benchmark's smoke size, a few minutes)
# Run it on a quiet machine: the load benchmark pins its host and bots to separate cores, and
# every other process on them shows in its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
[ "${1:-}" = "--quick" ] && quick=(--quick)
plots=docs/plots
page=docs/benchmarks.md
mkdir -p "$plots"
cargo build --release --locked --quiet -p rally-bench
machine="$(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(uname -sr)"

section() {
    local name=$1 title=$2 about=$3
    shift 3
    local started=$SECONDS
    echo "running: rally-bench $* ${quick[*]}" >&2
    local table command="$*"
    [ ${#quick[@]} -gt 0 ] && command+=" --quick"
    table=$(./target/release/rally-bench "$@" "${quick[@]}" --json "$plots/$name.json" \
        --plot "$plots")
    {
        printf '\n## %s\n\n%s\n\n```sh\nrally-bench %s --json %s --plot %s\n```\n\n' \
            "$title" "$about" "$command" "$plots/$name.json" "$plots"
        printf '```text\n%s\n```\n\n' "$table"
        printf '(%s s.)' $((SECONDS - started))
        # The plots this run wrote, as it says.
        for png in $(sed -n 's/^wrote \(.*\.png\)$/\1/p' <<<"$table"); do
            printf '\n\n![%s](%s)' "$(basename "$png" .png)" "plots/$(basename "$png")"
        done
        printf '\n'
    } >>"$page.new"
}

cat >"$page.new" <<EOF
# Benchmarks

Every figure here was measured by the command printed above it, on $machine,
on $(date -u +%Y-%m-%d) (regenerate all of them with \`scripts/benchmarks.sh\`, or one with its
command: \`rally-bench\` is the benchmarks' own binary, \`cargo run --release -p rally-bench -- wire\`
for the first). Benchmarks are not tests: they assert nothing, and each puts Rally and its peers side by
side in one run, on the same emulated link or the same data, reporting ratios, CPU time and
distributions. Each writes the JSON and PNG plots linked below to docs/plots/.

The transport benchmark runs twice: in virtual time (every figure reproducible from its seeds)
and on real sockets against the real libraries (the shootout: TCP, ENet, KCP, kcp-go, QUIC).
EOF

section wire "Wire: snapshot serialization (W4)" \
    "Rally's snapshot codec against bitcode, postcard, MessagePack and serde_json on the same reference snapshots; bytes, time per operation and allocations. Below the table, Rally alone on a delta where one body despawned and one spawned among the updates (a shooter's tick). The delta misses its 30x-serde_json target; docs/wire.md's appendix gives the layouts measured against it." \
    wire
section transport "Transport: the reliable stream under loss (W1)" \
    "Rally's reliable-ordered channel against KCP (the original C ikcp.c, in both configurations the source used) through five emulated links in virtual time, beside the link's own round trip and, on the lossy links, the floor of any protocol that sends two copies of each payload (the most the 2.5x byte budget holds) and learns of a loss from its next payload's ack: where that floor itself misses a target, the output says so." \
    transport
section transport-real "Transport shootout on real sockets (W1)" \
    "The same workload on real sockets and the OS clock, every peer the real library (the kernel's TCP through two network namespaces, ENet from Debian's libenet, KCP's C source in both configurations, kcp-go with FEC, quinn), through one real-time link emulator per run, in rounds over every profile and peer; the baseline is a bare UDP echo through the same emulator. Needs root for TCP; a peer that cannot run is skipped with the reason." \
    transport --mode real
section latency "Total latency against the model (W2)" \
    "The naive, greedy and fast pipelines at 72 to 144 Hz, with and without jitter, in virtual time: each input from sampling to the frame that shows it, against L_best and L_worst." \
    latency
section room "Engine CPU per reference room-tick (W3)" \
    "One reference room (256 bodies, 64 moving, 10 clients) ticked without sockets: CPU per phase." \
    room
section load "Host at scale (W3)" \
    "The host on real sockets with sealed connections, bots in a separate process, reference rooms ramped until a budget breaks: CPU per room-tick by scope, tick lateness, frame time against rooms. Then the kernel's floor at the largest step: bare UDP through the same sockets and batched syscalls with the same datagrams (as many, as large) and no protocol, encryption or game, which is what any server with this tick structure pays on this machine before doing anything of its own." \
    load
mv "$page.new" "$page"
echo "wrote $page and $plots/" >&2

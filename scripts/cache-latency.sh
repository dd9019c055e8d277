#!/usr/bin/env bash
# How long a load that misses the caches waits on this machine, by how much memory is in play:
# a pointer chase through a random cycle of 64-byte lines spread over each size (one dependent
# load at a time, so no prefetcher helps), pinned to one core. Where the latency jumps from a
# few nanoseconds to a hundred or more is the third level this core really gets; on a shared
# virtual machine that is far less than the processor's nominal third level, and it moves with
# the neighbours (docs/benchmarks.md, "Round 25"). Read it beside `rally-bench load --own-share`:
# the host's own share waits on these misses.
# Usage: scripts/cache-latency.sh [CORE] [SIZE_KIB...]   (about 2 s a size; gcc or cc)
set -euo pipefail
core=${1:-0}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(512 1024 2048 4096 6144 8192 16384 65536)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/chase.c" <<'EOF'
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[1]), &set);
    sched_setaffinity(0, sizeof set, &set);
    size_t lines = (size_t)atol(argv[2]) * 1024 / 64;
    uint64_t *memory = aligned_alloc(64, lines * 64);
    size_t *order = malloc(lines * sizeof *order);
    if (!memory || !order || lines < 2) return 1;
    /* A random cycle through every line: each load's address is the one before's value. */
    for (size_t i = 0; i < lines; i++) order[i] = i;
    srand(1);
    for (size_t i = lines - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++) memory[order[i] * 8] = order[(i + 1) % lines] * 8;
    size_t at = 0;
    long loads = 4000000;
    double best = 1e30;
    for (int round = 0; round < 3; round++) {
        double start = now_ns();
        for (long i = 0; i < loads; i++) at = memory[at];
        double ns = (now_ns() - start) / loads;
        if (ns < best) best = ns;
    }
    printf("%8s KiB  %7.1f ns a load (best of 3)\n", argv[2], best);
    return at == (size_t)-1;
}
EOF
"${CC:-cc}" -O2 -o "$work/chase" "$work/chase.c"
echo "pointer chase on core $core: one dependent load at a time through a random cycle of lines"
for size in "${sizes[@]}"; do
    "$work/chase" "$core" "$size"
done

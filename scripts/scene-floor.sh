#!/usr/bin/env bash
# The scene CPU target's floor (docs/benchmarks.md, "Equal motion, and the scene target's floor
# over every design"): instructions an item of the least code for each job the sandbox scene's
# room does beyond the W3 reference room's, counted by callgrind. The code is
# scripts/scene-floor.rs, not the engine's: see its header for each kernel.
#
# Usage: scripts/scene-floor.sh
# Needs: rustc, valgrind (Debian: apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rustc --edition 2021 -C opt-level=3 -C debuginfo=1 -o "$out/scene-floor" scripts/scene-floor.rs

# Instructions inside the kernel's function, divided by the items it handled.
count() {
    local kernel=$1 function=$2
    local items
    items=$(valgrind --tool=callgrind --collect-atstart=no --toggle-collect="*$function" \
        --callgrind-out-file="$out/$kernel.cg" "$out/scene-floor" "$kernel" 2>/dev/null)
    awk -v kernel="$kernel" -v items="$items" '/^summary:|^totals:/ { ir = $2 }
        END { printf "%-12s %10d %8.1f\n", kernel, items, ir / items }' "$out/$kernel.cg"
}

printf '%-12s %10s %8s\n' kernel items 'Ir/item'
count forward encode_forwarded
count bitmap encode_bitmap
count quantize quantize
count pose-input apply_pose_inputs
count xr-input apply_xr_inputs
count pose-code "apply_code_inputs*"
count xr-code "apply_code_inputs*"

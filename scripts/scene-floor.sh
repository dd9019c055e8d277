#!/usr/bin/env bash
# The scene CPU target's floor (docs/benchmarks.md, "Equal motion, and the scene target's floor
# over every design"): instructions an item of the least code for each job the sandbox scene's
# room does beyond the W3 reference room's, counted by callgrind. The code is
# scripts/scene-floor.rs, not the engine's: see its header for each kernel.
#
# Usage: scripts/scene-floor.sh [STILL]
#        STILL: instructions a still entity costs the engine (default 21.4, as measured by
#        scripts/room-instructions.sh: reference-94 less reference-110, over 146). With it, the
#        script also prints, for each class of design, the sandbox's least extra work a tick
#        against what the reference room's 176 more still entities cost at STILL each.
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

still=${1:-21.4}
declare -A per
# `kernel NAME FUNCTION`: counts, prints the line, keeps instructions an item in per[NAME].
kernel() {
    local line
    line=$(count "$1" "$2")
    echo "$line"
    per[$1]=$(awk '{ print $3 }' <<<"$line")
}

printf '%-12s %10s %8s\n' kernel items 'Ir/item'
kernel forward encode_forwarded
kernel bitmap encode_bitmap
kernel quantize quantize
kernel quantize-simd quantize_simd
kernel pose-input apply_pose_inputs
kernel xr-input apply_xr_inputs
kernel pose-code "apply_code_inputs*"
kernel xr-code "apply_code_inputs*"

# The sandbox moves 94 entities a tick (64 balls, 10 players' heads and hands), the reference
# room 64 (54 bodies its game moves, 10 controllers); both take 10 inputs a tick; the reference
# room holds 176 more still entities (192 against 16). Who quantizes what the inputs drive
# (the client, if inputs carry codes; else the engine, on input) and what the game moves (the
# engine's walk, or the game's own step, outside the engine's count) sets the class.
# A quantize costs the lesser of the two quantizers' counts (the scalar and the vector one).
awk -v w="${per[bitmap]}" -v qs="${per[quantize]}" -v qv="${per[quantize-simd]}" \
    -v pf="${per[pose-input]}" -v xf="${per[xr-input]}" -v pc="${per[pose-code]}" \
    -v xc="${per[xr-code]}" -v still="$still" 'BEGIN {
    side = 176 * still
    q = qv < qs ? qv : qs
    printf "\nthe reference room'"'"'s 176 more still entities at %.1f each: %.0f a tick\n",
        still, side
    printf "a quantize: %.1f\n", q
    printf "%-44s %8s %8s %11s\n", "design class: inputs, bodies quantized by", "extra",
        "margin", "still even"
    line("floats, the engine (today'"'"'s wire format)", 30 * w + 30 * q + 10 * (xf - pf))
    line("floats, the game'"'"'s step (bodies)", 30 * w + 20 * q + 10 * (xf - pf))
    line("codes, the engine", 30 * w + 10 * q + 10 * (xc - pc))
    line("codes, the game'"'"'s step", 30 * w + 10 * (xc - pc))
}
# extra: the sandbox'"'"'s least extra work a tick; margin: extra less the still side (positive:
# no design of the class meets the target); still even: the still cost that would make it 0.
function line(name, extra) {
    printf "%-44s %8.0f %8.0f %11.1f\n", name, extra, extra - side, extra / 176
}'

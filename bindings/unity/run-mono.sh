#!/usr/bin/env bash
# Builds librally and the C# binding's plain assembly (Runtime/ without the MonoBehaviour),
# compiles the console test with Mono's C# compiler and runs it against a real
# `rally server --scene scenes/sandbox.toml` over UDP: join, grab, carry, check the room, print
# the latency meter (Tests~/ConsoleTest.cs says what it asserts).
#
#   bash bindings/unity/run-mono.sh [--release] [--bench FRAMES] [--scene TOML] [-- TEST ARGS...]
#
# --scene hosts another scene than the sandbox (one with the sandbox's block at the grab point,
# such as a copy with another `pipeline`).
# --bench FRAMES also times FRAMES steady-state frames in a room of 256 entities (the sandbox
# with kinematic crates added), reporting CPU per frame and managed bytes allocated
# (`-- --interpolate 0` measures it without the library's interpolation buffers). Needs
# mono-mcs and mono-runtime (Debian's packages; scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=debug
bench=0
scene=scenes/sandbox.toml
while [ $# -gt 0 ]; do
    case "$1" in
        --release) profile=release ;;
        --bench) bench=$2; shift ;;
        --scene) scene=$2; shift ;;
        --) shift; break ;;
        *) echo "run-mono.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
source scripts/scene-server.sh
build_rally "$profile"
out="${CARGO_TARGET_DIR:-target}/mono-test"
package=bindings/unity/com.rally.client
mkdir -p "$out"
mcs -nologo -warnaserror -unsafe -target:library -out:"$out/Rally.Runtime.dll" \
    "$package/Runtime/Native.cs" "$package/Runtime/RallyConnection.cs"
mcs -nologo -warnaserror -unsafe -r:"$out/Rally.Runtime.dll" -out:"$out/ConsoleTest.exe" \
    "$package/Tests~/ConsoleTest.cs"
cc -std=c11 -Wall -Wextra -Werror -Iinclude "$package/Tests~/layout.c" -o "$out/layout"
"$out/layout" > "$out/layout.txt"

if [ "$bench" -gt 0 ]; then
    # The sandbox's 19 bodies and a player's 3 avatar entities, plus 234 crates: 256.
    cp "$scene" "$out/bench-256.toml"
    scene="$out/bench-256.toml"
    for i in $(seq 0 233); do
        printf '\n[[bodies]]\nname = "crate-%d"\nclass = "crate"\nkind = "kinematic"\n' "$i"
        printf 'box = [0.1, 0.1, 0.1]\nposition = [%d.0, 0.05, %d.0]\n' \
            $((i % 16 - 8)) $((i / 16 + 2))
    done >> "$scene"
fi

start_scene_server "$lib/rally" "$scene" "$out"
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" mono "$out/ConsoleTest.exe" \
    --rally "$lib/rally" --key "$key" --server "$address" --layout "$out/layout.txt" \
    --grab 0.9,0.25,-1.0 --seconds 3 --bench "$bench" "$@"

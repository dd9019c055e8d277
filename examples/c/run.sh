#!/usr/bin/env bash
# Builds the C sample against librally and runs it against a real `rally server` over UDP.
#
#   bash examples/c/run.sh [--release] [--valgrind | --callgrind FILE] [--scene TOML]
#                          [-- SAMPLE ARGS...]
#
# It builds rally-ffi and the rally binary (debug, or release with --release), compiles
# examples/c/sample.c with the system's C compiler (cc -std=c11 -Wall -Wextra -Werror), starts
# `rally server` on a free port with an explicit shared key, runs the sample (which issues its
# own token with `rally token issue --key`), and stops the server. Exits with the sample's code.
# The server hosts scenes/sandbox.toml (`rally server --scene`): pass `-- --input xr` for the
# standard XR input, and `--grab 0.9,0.25,-1.0` to take the block under that point; --scene
# hosts another. --callgrind FILE counts the instructions of the library's calls (and only
# theirs: collection is on inside `rally_client_*`; the kernel's side of a syscall is never
# counted) into FILE, for `callgrind_annotate --inclusive=yes FILE`.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=debug
wrapper=()
scene=scenes/sandbox.toml
while [ $# -gt 0 ]; do
    case "$1" in
        --release) profile=release ;;
        --valgrind) wrapper=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite) ;;
        --callgrind)
            wrapper=(valgrind --tool=callgrind --collect-atstart=no
                     "--toggle-collect=rally_client_*" "--callgrind-out-file=$2")
            shift ;;
        --scene) scene=$2; shift ;;
        --) shift; break ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
source scripts/scene-server.sh
build_rally "$profile"
out="${CARGO_TARGET_DIR:-target}/c-sample"
mkdir -p "$out"
# The kernel-floor programs (docs/ffi.md) are built too, so that they keep compiling; not run
# here.
cc -std=c11 -Wall -Wextra -Werror -O2 -pthread examples/c/floor.c -o "$out/floor"
cc -std=c11 -Wall -Wextra -Werror -O2 -pthread examples/c/handoff.c -o "$out/handoff"
cc -std=c11 -Wall -Wextra -Werror -O1 -g -Iinclude examples/c/sample.c -o "$out/sample" \
    -L"$lib" -lrally -Wl,-rpath,"$(cd "$lib" && pwd)" -lm

start_scene_server "$lib/rally" "$scene" "$out"
"${wrapper[@]}" "$out/sample" --rally "$lib/rally" --key "$key" --server "$address" "$@"

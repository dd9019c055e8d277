# Sourced by examples/c/run.sh and bindings/unity/run-mono.sh, which run a client of librally
# against a real scene room.
#
#   build_rally debug|release                # builds rally and librally; sets $lib
#   start_scene_server RALLY SCENE OUT_DIR   # sets $key and $address

# Builds the `rally` binary and librally (rally-ffi) into $lib, the profile's target folder.
build_rally() {
    local profile=$1 flags=()
    [ "$profile" = release ] && flags=(--release)
    # One package at a time: built together, cargo would unify their features and rebuild both
    # from scratch rather than reuse what `cargo build -p rally` and the tests built.
    cargo build --locked "${flags[@]}" -p rally
    cargo build --locked "${flags[@]}" -p rally-ffi
    lib="${CARGO_TARGET_DIR:-target}/$profile"
}

# Starts `rally server --scene` on a free loopback port with an explicit shared key (a client's
# token must be sealed with it), and stops it when the sourcing script exits.
start_scene_server() {
    local rally=$1 scene=$2 out=$3
    key=$("$rally" token keygen)
    local config="$out/server.toml" log="$out/server.log"
    cat > "$config" <<TOML
[host]
workers = 1
port = 0
[security]
key = "$key"
[telemetry]
listen = ""
TOML
    "$rally" server --config "$config" --scene "$scene" > "$log" 2>&1 &
    server_pid=$!
    trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true' EXIT
    address=""
    for _ in $(seq 100); do
        address=$(sed -n 's/.*worker listening worker=0 address=\([0-9.:]*\).*/\1/p' "$log")
        [ -n "$address" ] && break
        if ! kill -0 "$server_pid" 2>/dev/null; then cat "$log" >&2; return 1; fi
        sleep 0.1
    done
    if [ -z "$address" ]; then
        echo "the server did not say its address in 10 s:" >&2
        cat "$log" >&2
        return 1
    fi
    echo "rally server on $address ($scene)"
}

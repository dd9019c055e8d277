//! A game backend on Agones: allocates a Rally game server for a room from a fleet, preferring
//! servers with a `rooms` slot left (the high-density pattern), then issues the connect token
//! that names the room and the worker hosting it, at the address and host port Agones gave.
//!
//! Against a cluster, through `kubectl proxy` (plain HTTP on localhost):
//!
//! ```text
//! kubectl proxy --port 8001 &
//! ALLOCATIONS=apis/allocation.agones.dev/v1/namespaces/default/gameserverallocations
//! cargo run --example backend -- http://127.0.0.1:8001/$ALLOCATIONS \
//!     --fleet rally --room 42 --client 7 --key-file rally.key
//! ```
//!
//! It prints the token in hex (give it to the client: `rally token open` shows what it holds).
//! The key is the fleet's `security.key` (docs/operating.md, "Running on Agones").

#[path = "allocate.rs"]
mod allocate;

use std::process::ExitCode;

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let usage = "usage: backend URL --fleet NAME --room ID --client ID --key-file PATH \
                 [--protocol ID] [--scene NAME]";
    let url = args.first().filter(|a| !a.starts_with("--")).ok_or(usage)?;
    let option = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        args.get(at + 1).cloned()
    };
    let number = |name: &str, default: Option<u64>| -> Result<u64, String> {
        match option(name) {
            Some(text) => text.parse().map_err(|_| format!("{name} {text:?}: not a number")),
            None => default.ok_or_else(|| format!("{name} is needed; {usage}")),
        }
    };
    let fleet = option("--fleet").ok_or(usage)?;
    let (room, client) = (number("--room", None)?, number("--client", None)?);
    let protocol = number("--protocol", Some(1))?;
    let key_file = option("--key-file").ok_or(usage)?;
    let key_text = std::fs::read_to_string(&key_file).map_err(|e| format!("{key_file}: {e}"))?;
    let key = rally_app::token::key_from_hex(key_text.trim()).map_err(|e| e.to_string())?;
    let body = allocate::allocation(&fleet, room, option("--scene").as_deref());
    let allocated = allocate::allocate(url, &body, room)?;
    eprintln!("room {room}: {} at {}", allocated.game_server, allocated.address);
    let token = allocate::token(&key, protocol, client, room, &allocated, 60)?;
    println!("{}", rally_app::token::token_to_hex(&token));
    Ok(())
}

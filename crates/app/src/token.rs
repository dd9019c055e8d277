//! `rally token`: the backend's side of connect tokens (`rally_proto::token`), for trying them
//! by hand and for scripts: make a shared key, issue a token, open one as a server would.

use rally_proto::token::{self, ConnectToken, Grant, TokenKey, TokenRandomness, USER_DATA_LEN};
use rally_wire::hex;
use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `rally token` commands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Print a new random 32-byte key (hex) for the backend and its servers to share.
    Keygen,
    /// Issue a token (hex on standard output) letting one client into one room.
    Issue {
        /// The shared key and the protocol id.
        #[command(flatten)]
        key: KeyArgs,
        /// The client's id.
        #[arg(long)]
        client: u64,
        /// The room it may join.
        #[arg(long)]
        room: u64,
        /// A server it may connect to (repeatable, up to 8).
        #[arg(long = "server", required = true)]
        servers: Vec<SocketAddr>,
        /// Seconds until the token expires.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
        /// Seconds of silence before a connection times out.
        #[arg(long, default_value_t = 5)]
        timeout: u32,
        /// Up to 256 bytes the server reads from the token (a display name, say).
        #[arg(long, default_value = "")]
        user_data: String,
    },
    /// Open a token as the server at `--server` would, and print what it grants (JSON).
    Open {
        /// The shared key and the protocol id.
        #[command(flatten)]
        key: KeyArgs,
        /// The token, hex.
        token: String,
        /// The server checking it.
        #[arg(long)]
        server: SocketAddr,
    },
}

/// The shared key and the protocol id.
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// The shared key, 64 hex digits (or use --key-file).
    #[arg(long, conflicts_with = "key_file")]
    key: Option<String>,
    /// A file holding the shared key in hex.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The game's protocol id: tokens of another id are refused.
    #[arg(long, default_value_t = DEFAULT_PROTOCOL_ID)]
    protocol_id: u64,
}

/// The protocol id `rally token` uses when given none: `rally server`'s default
/// (`[security] protocol_id`), so that a token issued with the defaults gets into a server run
/// with them. (It was 0, and such a token was refused as forged.)
pub const DEFAULT_PROTOCOL_ID: u64 = 1;

impl KeyArgs {
    fn key(&self) -> Result<TokenKey, Box<dyn Error>> {
        let text = match (&self.key, &self.key_file) {
            (Some(key), _) => key.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| format!("--key-file {}: {e}", path.display()))?,
            (None, None) => return Err("give the shared key: --key HEX or --key-file PATH".into()),
        };
        let bytes =
            hex::decode(text.trim()).map_err(|e| format!("the key must be 64 hex digits ({e})"))?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| "the key must be 64 hex digits")?;
        Ok(TokenKey(key))
    }
}

/// Runs a `rally token` command.
pub fn run(command: &TokenCommand) -> Result<(), Box<dyn Error>> {
    match command {
        TokenCommand::Keygen => println!("{}", hex::encode(&random::<32>()?)),
        TokenCommand::Issue { key, client, room, servers, ttl, timeout, user_data } => {
            let bytes = user_data.as_bytes();
            if bytes.len() > USER_DATA_LEN {
                return Err(format!("--user-data: at most {USER_DATA_LEN} bytes").into());
            }
            let mut data = [0u8; USER_DATA_LEN];
            data[..bytes.len()].copy_from_slice(bytes);
            let grant = Grant {
                client_id: *client,
                room_id: *room,
                user_data: data,
                server_addresses: servers.clone(),
                timeout_s: *timeout,
            };
            let randomness = TokenRandomness {
                nonce: random()?,
                client_to_server_key: random()?,
                server_to_client_key: random()?,
            };
            let issued =
                token::issue(&key.key()?, key.protocol_id, &grant, unix_now()?, *ttl, &randomness)
                    .map_err(|e| format!("--server: {e} (give 1 to 8)"))?;
            println!("{}", hex::encode(&issued.encode()));
        }
        TokenCommand::Open { key, token: text, server } => {
            let bytes =
                hex::decode(text.trim()).map_err(|e| format!("the token must be hex ({e})"))?;
            let token = ConnectToken::decode(&bytes)?;
            if token.protocol_id != key.protocol_id {
                return Err(rally_proto::TokenError::WrongProtocol.into());
            }
            let private = token::open(
                &key.key()?,
                key.protocol_id,
                token.expires_at,
                &token.nonce,
                &token.sealed,
                unix_now()?,
                *server,
            )?;
            let grant = &private.grant;
            let end = grant.user_data.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
            let json = serde_json::json!({
                "client_id": grant.client_id,
                "room_id": grant.room_id,
                "user_data": String::from_utf8_lossy(&grant.user_data[..end]),
                "server_addresses": grant.server_addresses,
                "timeout_s": grant.timeout_s,
                "created_at": token.created_at,
                "expires_at": token.expires_at,
            });
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
    }
    Ok(())
}

/// The protocol id of the demo's and the benchmarks' tokens.
pub const LOCAL_PROTOCOL_ID: u64 = 0x5241_4c4c_5944_454d;

/// A fresh random key, for a backend that lives as long as this process.
pub fn random_key() -> Result<TokenKey, Box<dyn Error>> {
    Ok(rally_driver::backend::random_key()?)
}

/// Issues a token letting `client` in at `servers` (tried in order; the server checks that it
/// is named) for an hour, as a backend would.
pub fn issue_local(
    key: &TokenKey,
    client: u64,
    servers: Vec<SocketAddr>,
) -> Result<ConnectToken, Box<dyn Error>> {
    Ok(rally_driver::backend::issue(key, LOCAL_PROTOCOL_ID, client, 0, servers, 3600)?)
}

/// A token as hex, for a command line.
pub fn token_to_hex(token: &ConnectToken) -> String {
    hex::encode(&token.encode())
}

/// A token from hex.
pub fn token_from_hex(text: &str) -> Result<ConnectToken, Box<dyn Error>> {
    let bytes = hex::decode(text.trim()).map_err(|e| format!("the token must be hex ({e})"))?;
    Ok(ConnectToken::decode(&bytes)?)
}

/// A key as hex.
pub fn key_to_hex(key: &TokenKey) -> String {
    hex::encode(&key.0)
}

/// A key from hex: 64 digits.
pub fn key_from_hex(text: &str) -> Result<TokenKey, Box<dyn Error>> {
    let bytes =
        hex::decode(text.trim()).map_err(|e| format!("the key must be 64 hex digits ({e})"))?;
    Ok(TokenKey(bytes.try_into().map_err(|_| "the key must be 64 hex digits")?))
}

fn random<const N: usize>() -> Result<[u8; N], Box<dyn Error>> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| format!("the OS gave no randomness: {e}"))?;
    Ok(bytes)
}

#[allow(clippy::disallowed_methods)] // tokens expire on the wall clock
fn unix_now() -> Result<u64, Box<dyn Error>> {
    Ok(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::ServerConfig;

    #[test]
    fn a_token_issued_with_the_defaults_is_for_the_default_servers_game() {
        let server = ServerConfig::parse("", "defaults").expect("the defaults are valid");
        assert_eq!(server.security.protocol_id, DEFAULT_PROTOCOL_ID);
    }
}

//! Connect tokens for the harness: one fixed key, a fresh token for every connection attempt,
//! so that simulated rooms and benchmarks run with tokens and encryption on, as a deployment
//! would.

use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::{ConnectToken, EndpointConfig, Security, TokenKey};
use std::net::SocketAddr;

/// The protocol id of harness tokens.
pub const PROTOCOL_ID: u64 = 0x5349_4d00;
/// Unix seconds at the start of virtual time.
pub const UNIX_AT_ZERO: u64 = 1_800_000_000;

/// The key the harness's "backend" and server share.
pub fn key() -> TokenKey {
    TokenKey(*b"rally-sim harness key, not safe!")
}

/// `config` for a server at `server` that requires harness tokens.
pub fn server_config(config: EndpointConfig, server: SocketAddr) -> EndpointConfig {
    let security = Security::Tokens {
        key: key(),
        protocol_id: PROTOCOL_ID,
        address: server,
        unix_at_zero: UNIX_AT_ZERO,
    };
    EndpointConfig { security, ..config }
}

/// A token for connection attempt `attempt` (unique per run) of client `client`, valid for a
/// day of virtual time.
pub fn token(client: u64, attempt: u64, server: SocketAddr) -> ConnectToken {
    room_token(client, attempt, 0, server)
}

/// [`token()`] for room `room` (a host routes the connection to the room its token names).
pub fn room_token(client: u64, attempt: u64, room: u64, server: SocketAddr) -> ConnectToken {
    let grant = Grant {
        client_id: client,
        room_id: room,
        user_data: [0; USER_DATA_LEN],
        server_addresses: vec![server],
        timeout_s: 5,
    };
    let nonce = nonce(client, attempt);
    let mut server_to_client_key = client_key(client, attempt);
    server_to_client_key[31] = 1;
    let random = TokenRandomness {
        nonce,
        client_to_server_key: client_key(client, attempt),
        server_to_client_key,
    };
    // Issuing cannot fail: the grant names one server.
    token::issue(&key(), PROTOCOL_ID, &grant, UNIX_AT_ZERO, 86_400, &random)
        .expect("a harness token")
}

/// The key that client `client`'s packets to the server are sealed with on connection attempt
/// `attempt` ([`token()`]'s): a test that plays a misbehaving peer seals its own packets with it.
pub fn client_key(client: u64, attempt: u64) -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..24].copy_from_slice(&nonce(client, attempt));
    key
}

fn nonce(client: u64, attempt: u64) -> [u8; 24] {
    let mut nonce = [0u8; 24];
    nonce[..8].copy_from_slice(&client.to_le_bytes());
    nonce[8..16].copy_from_slice(&attempt.to_le_bytes());
    nonce
}

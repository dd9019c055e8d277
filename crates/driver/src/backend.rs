//! A game backend's side of connect tokens, on the OS's randomness and wall clock: what a
//! matchmaker calls to let a player into a room.

use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::{ConnectToken, TokenError, TokenKey};
use std::net::SocketAddr;

/// Why a token could not be issued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IssueError {
    /// The OS gave no randomness for the token's keys and nonce.
    #[error("the OS gave no randomness: {0}")]
    Randomness(getrandom::Error),
    /// The grant does not make a valid token (no server address, too many).
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// A fresh random key, shared by the backend and its servers.
pub fn random_key() -> Result<TokenKey, IssueError> {
    Ok(TokenKey(random()?))
}

/// Issues a token letting `client_id` into `room_id` at `servers` (tried in order; each server
/// checks that it is named) for `ttl_s` seconds from now.
pub fn issue(
    key: &TokenKey,
    protocol_id: u64,
    client_id: u64,
    room_id: u64,
    servers: Vec<SocketAddr>,
    ttl_s: u64,
) -> Result<ConnectToken, IssueError> {
    let grant = Grant {
        client_id,
        room_id,
        user_data: [0; USER_DATA_LEN],
        server_addresses: servers,
        timeout_s: 5,
    };
    let randomness = TokenRandomness {
        nonce: random()?,
        client_to_server_key: random()?,
        server_to_client_key: random()?,
    };
    let now = crate::udp::unix_nanos() / 1_000_000_000;
    Ok(token::issue(key, protocol_id, &grant, now, ttl_s, &randomness)?)
}

fn random<const N: usize>() -> Result<[u8; N], IssueError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(IssueError::Randomness)?;
    Ok(bytes)
}

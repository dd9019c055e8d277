//! Connect tokens, in the style of netcode.io: a game's backend lets a client into a server
//! without the server asking anyone.
//!
//! The backend and the servers share a 32-byte [`TokenKey`]. For each client it allows in, the
//! backend issues a [`ConnectToken`]: who the client is (client id, room id, 256 bytes of user
//! data), which servers it may connect to, until when, and a fresh key for each direction of
//! the connection. That private part is sealed with XChaCha20-Poly1305 under the shared key, so
//! the client can carry it but neither read nor change it; the client gets the two keys in the
//! clear beside it (the backend hands the whole token over a channel it trusts, such as
//! HTTPS). A server opens the private part with the same key: no database, no call home.
//! Anything forged, truncated, expired, meant for another protocol or another server is
//! refused with a [`TokenError`] saying which.
//!
//! Sans-IO: the caller gives the time (Unix seconds) and the randomness (the nonce and the two
//! keys).
//!
//! ## Layout
//!
//! All integers little-endian. The private part, [`PRIVATE_LEN`] bytes before sealing:
//!
//! ```text
//! client_id u64 | room_id u64 | timeout_s u32 | addresses | client_to_server_key [32]
//! | server_to_client_key [32] | user_data [256] | zero padding
//! ```
//!
//! `addresses` is a count u8 (1 to [`ADDRESSES_MAX`]) and, for each, a kind u8 (4 or 6), the
//! IP address (4 or 16 bytes) and the port u16. Sealed, it is `PRIVATE_LEN + 16` bytes, the
//! last 16 the Poly1305 tag; the associated data is `VERSION || protocol_id || expires_at`, so
//! none of those can be changed either. The whole token as [`ConnectToken::encode`] writes it:
//!
//! ```text
//! VERSION [8] | protocol_id u64 | created_at u64 | expires_at u64 | timeout_s u32
//! | nonce [24] | sealed [PRIVATE_LEN + 16] | addresses | client_to_server_key [32]
//! | server_to_client_key [32]
//! ```

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Key, KeyInit, Tag, XChaCha20Poly1305, XNonce};
use std::net::{IpAddr, SocketAddr};

/// The token format's version, the first bytes of every token.
pub const VERSION: [u8; 8] = *b"RALLY01\0";
/// Bytes of the private part before sealing.
pub const PRIVATE_LEN: usize = 512;
/// Bytes of the sealed private part: the private part and its tag.
pub const SEALED_LEN: usize = PRIVATE_LEN + 16;
/// Server addresses a token names at most.
pub const ADDRESSES_MAX: usize = 8;
/// Bytes of user data a token carries.
pub const USER_DATA_LEN: usize = 256;

/// The key the backend and the servers share. Keep it secret: whoever has it can let anyone
/// in.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenKey(pub [u8; 32]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The bytes end before the token does.
    #[error("the token is truncated")]
    Truncated,
    /// Not a token of this format version.
    #[error("not a Rally connect token of this version")]
    BadVersion,
    /// Issued for another game (protocol id).
    #[error("the token is for another protocol id")]
    WrongProtocol,
    /// Its time is up.
    #[error("the token expired")]
    Expired,
    /// The private part does not open with this key: forged, altered, or another key's.
    #[error("the token does not authenticate (forged, altered, or sealed with another key)")]
    Forged,
    /// It does not name the server checking it.
    #[error("the token does not name this server")]
    WrongServer,
    /// No address, more than [`ADDRESSES_MAX`], or an address kind other than 4 or 6.
    #[error("bad server address list")]
    BadAddresses,
}

/// What the backend grants one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The client's id, the backend's to choose.
    pub client_id: u64,
    /// The room it may join.
    pub room_id: u64,
    /// Anything else the server should know (an account's display name, a team), sealed too.
    pub user_data: [u8; USER_DATA_LEN],
    /// The servers it may connect to, 1 to [`ADDRESSES_MAX`].
    pub server_addresses: Vec<SocketAddr>,
    /// Seconds of silence after which the connection times out.
    pub timeout_s: u32,
}

/// The private part of a token, as a server reads it after opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateToken {
    /// The grant it carries.
    pub grant: Grant,
    /// The key of packets from the client.
    pub client_to_server_key: [u8; 32],
    /// The key of packets to the client.
    pub server_to_client_key: [u8; 32],
}

/// A token as the client holds it: the sealed private part and what the client needs to use
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectToken {
    /// The game's protocol id; servers of another id refuse it.
    pub protocol_id: u64,
    /// When it was issued, Unix seconds.
    pub created_at: u64,
    /// When it stops being accepted, Unix seconds.
    pub expires_at: u64,
    /// Seconds of silence after which the connection times out.
    pub timeout_s: u32,
    /// The sealing nonce.
    pub nonce: [u8; 24],
    /// The private part, sealed: the client passes it on unread.
    pub sealed: Box<[u8; SEALED_LEN]>,
    /// The servers to try, in order.
    pub server_addresses: Vec<SocketAddr>,
    /// The key of packets from the client.
    pub client_to_server_key: [u8; 32],
    /// The key of packets to the client.
    pub server_to_client_key: [u8; 32],
}

/// The randomness one token needs: its nonce and the two connection keys.
#[derive(Debug, Clone, Copy)]
pub struct TokenRandomness {
    /// Must never repeat under one key: 24 random bytes make that safe.
    pub nonce: [u8; 24],
    /// Fresh random key for packets from the client.
    pub client_to_server_key: [u8; 32],
    /// Fresh random key for packets to the client.
    pub server_to_client_key: [u8; 32],
}

/// Issues a token granting `grant` for `ttl_s` seconds from `now` (Unix seconds).
pub fn issue(
    key: &TokenKey,
    protocol_id: u64,
    grant: &Grant,
    now: u64,
    ttl_s: u64,
    random: &TokenRandomness,
) -> Result<ConnectToken, TokenError> {
    let expires_at = now.saturating_add(ttl_s);
    let mut private = [0u8; PRIVATE_LEN];
    let mut w = Cursor { bytes: &mut private, at: 0 };
    w.put(&grant.client_id.to_le_bytes());
    w.put(&grant.room_id.to_le_bytes());
    w.put(&grant.timeout_s.to_le_bytes());
    write_addresses(&mut w, &grant.server_addresses)?;
    w.put(&random.client_to_server_key);
    w.put(&random.server_to_client_key);
    w.put(&grant.user_data);
    let cipher = XChaCha20Poly1305::new(Key::from_slice(&key.0));
    let aad = associated_data(protocol_id, expires_at);
    let tag = cipher
        .encrypt_in_place_detached(XNonce::from_slice(&random.nonce), &aad, &mut private)
        .map_err(|_| TokenError::Forged)?;
    let mut sealed = Box::new([0u8; SEALED_LEN]);
    sealed[..PRIVATE_LEN].copy_from_slice(&private);
    sealed[PRIVATE_LEN..].copy_from_slice(&tag);
    Ok(ConnectToken {
        protocol_id,
        created_at: now,
        expires_at,
        timeout_s: grant.timeout_s,
        nonce: random.nonce,
        sealed,
        server_addresses: grant.server_addresses.clone(),
        client_to_server_key: random.client_to_server_key,
        server_to_client_key: random.server_to_client_key,
    })
}

/// Opens a sealed private part on the server `server` at `now` (Unix seconds): the checks
/// every connection request gets, cheapest first.
pub fn open(
    key: &TokenKey,
    protocol_id: u64,
    expires_at: u64,
    nonce: &[u8; 24],
    sealed: &[u8; SEALED_LEN],
    now: u64,
    server: SocketAddr,
) -> Result<PrivateToken, TokenError> {
    if now >= expires_at {
        return Err(TokenError::Expired);
    }
    let cipher = XChaCha20Poly1305::new(Key::from_slice(&key.0));
    let aad = associated_data(protocol_id, expires_at);
    let mut private = [0u8; PRIVATE_LEN];
    private.copy_from_slice(&sealed[..PRIVATE_LEN]);
    let tag = Tag::from_slice(&sealed[PRIVATE_LEN..]);
    cipher
        .decrypt_in_place_detached(XNonce::from_slice(nonce), &aad, &mut private, tag)
        .map_err(|_| TokenError::Forged)?;
    let mut r = Reader { bytes: &private };
    let client_id = r.u64()?;
    let room_id = r.u64()?;
    let timeout_s = r.u32()?;
    let server_addresses = read_addresses(&mut r)?;
    let client_to_server_key = r.array()?;
    let server_to_client_key = r.array()?;
    let user_data = r.array()?;
    if !server_addresses.contains(&server) {
        return Err(TokenError::WrongServer);
    }
    let grant = Grant { client_id, room_id, user_data, server_addresses, timeout_s };
    Ok(PrivateToken { grant, client_to_server_key, server_to_client_key })
}

impl ConnectToken {
    /// The token as bytes, to hand to the client.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; 8 + 8 + 8 + 8 + 4 + 24 + SEALED_LEN + 1 + ADDRESSES_MAX * 19 + 64];
        let mut w = Cursor { bytes: &mut out, at: 0 };
        w.put(&VERSION);
        w.put(&self.protocol_id.to_le_bytes());
        w.put(&self.created_at.to_le_bytes());
        w.put(&self.expires_at.to_le_bytes());
        w.put(&self.timeout_s.to_le_bytes());
        w.put(&self.nonce);
        w.put(&self.sealed[..]);
        // Issued tokens hold 1 to ADDRESSES_MAX addresses; others are written as none.
        let _ = write_addresses(&mut w, &self.server_addresses);
        w.put(&self.client_to_server_key);
        w.put(&self.server_to_client_key);
        let len = w.at;
        out.truncate(len);
        out
    }

    /// Reads a token; only its format is checked here (the client cannot open the private
    /// part, and the server checks it with [`open`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, TokenError> {
        let mut r = Reader { bytes };
        if r.array::<8>()? != VERSION {
            return Err(TokenError::BadVersion);
        }
        let protocol_id = r.u64()?;
        let created_at = r.u64()?;
        let expires_at = r.u64()?;
        let timeout_s = r.u32()?;
        let nonce = r.array()?;
        let sealed = Box::new(r.array()?);
        let server_addresses = read_addresses(&mut r)?;
        let client_to_server_key = r.array()?;
        let server_to_client_key = r.array()?;
        Ok(Self {
            protocol_id,
            created_at,
            expires_at,
            timeout_s,
            nonce,
            sealed,
            server_addresses,
            client_to_server_key,
            server_to_client_key,
        })
    }
}

fn associated_data(protocol_id: u64, expires_at: u64) -> [u8; 24] {
    let mut aad = [0u8; 24];
    aad[..8].copy_from_slice(&VERSION);
    aad[8..16].copy_from_slice(&protocol_id.to_le_bytes());
    aad[16..].copy_from_slice(&expires_at.to_le_bytes());
    aad
}

fn write_addresses(w: &mut Cursor<'_>, addresses: &[SocketAddr]) -> Result<(), TokenError> {
    if addresses.is_empty() || addresses.len() > ADDRESSES_MAX {
        return Err(TokenError::BadAddresses);
    }
    w.put(&[addresses.len() as u8]);
    for address in addresses {
        match address.ip() {
            IpAddr::V4(ip) => {
                w.put(&[4]);
                w.put(&ip.octets());
            }
            IpAddr::V6(ip) => {
                w.put(&[6]);
                w.put(&ip.octets());
            }
        }
        w.put(&address.port().to_le_bytes());
    }
    Ok(())
}

fn read_addresses(r: &mut Reader<'_>) -> Result<Vec<SocketAddr>, TokenError> {
    let count = usize::from(r.array::<1>()?[0]);
    if count == 0 || count > ADDRESSES_MAX {
        return Err(TokenError::BadAddresses);
    }
    let mut addresses = Vec::with_capacity(count);
    for _ in 0..count {
        let ip = match r.array::<1>()?[0] {
            4 => IpAddr::from(r.array::<4>()?),
            6 => IpAddr::from(r.array::<16>()?),
            _ => return Err(TokenError::BadAddresses),
        };
        let port = u16::from_le_bytes(r.array()?);
        addresses.push(SocketAddr::new(ip, port));
    }
    Ok(addresses)
}

/// Writes into a buffer sized for the largest thing written, so a write never runs out.
struct Cursor<'a> {
    bytes: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, data: &[u8]) {
        let end = (self.at + data.len()).min(self.bytes.len());
        self.bytes[self.at..end].copy_from_slice(&data[..end - self.at]);
        self.at = end;
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], TokenError> {
        let (head, rest) = self.bytes.split_at_checked(N).ok_or(TokenError::Truncated)?;
        self.bytes = rest;
        Ok(head.try_into().expect("split_at_checked returned N bytes"))
    }

    fn u64(&mut self) -> Result<u64, TokenError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, TokenError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTOCOL: u64 = 0x5241_4c4c_5900_0001;
    const NOW: u64 = 1_800_000_000;

    fn server() -> SocketAddr {
        "127.0.0.1:7777".parse().unwrap()
    }

    fn grant() -> Grant {
        let mut user_data = [0u8; USER_DATA_LEN];
        user_data[..5].copy_from_slice(b"alice");
        Grant {
            client_id: 42,
            room_id: 7,
            user_data,
            server_addresses: vec![server(), "[::1]:7778".parse().unwrap()],
            timeout_s: 5,
        }
    }

    fn random(seed: u8) -> TokenRandomness {
        TokenRandomness {
            nonce: [seed; 24],
            client_to_server_key: [seed.wrapping_add(1); 32],
            server_to_client_key: [seed.wrapping_add(2); 32],
        }
    }

    fn token() -> ConnectToken {
        issue(&TokenKey([9; 32]), PROTOCOL, &grant(), NOW, 30, &random(3)).unwrap()
    }

    fn open_token(token: &ConnectToken, now: u64) -> Result<PrivateToken, TokenError> {
        let key = TokenKey([9; 32]);
        open(&key, token.protocol_id, token.expires_at, &token.nonce, &token.sealed, now, server())
    }

    #[test]
    fn a_server_opens_what_the_backend_issued() {
        let token = ConnectToken::decode(&token().encode()).unwrap();
        assert_eq!(token, self::token());
        let private = open_token(&token, NOW + 29).unwrap();
        assert_eq!(private.grant, grant());
        assert_eq!(private.client_to_server_key, token.client_to_server_key);
        assert_eq!(private.server_to_client_key, token.server_to_client_key);
        // The private part is not readable in the clear.
        let sealed = &token.sealed[..];
        assert!(!sealed.windows(5).any(|w| w == b"alice"));
    }

    #[test]
    fn expired_forged_and_misdirected_tokens_are_refused_with_their_reason() {
        let token = token();
        assert_eq!(open_token(&token, NOW + 30), Err(TokenError::Expired));
        for byte in [0, 100, PRIVATE_LEN + 3] {
            let mut forged = token.clone();
            forged.sealed[byte] ^= 1;
            assert_eq!(open_token(&forged, NOW), Err(TokenError::Forged), "byte {byte}");
        }
        // The clear fields the server trusts are bound to the seal.
        let mut extended = token.clone();
        extended.expires_at += 3600;
        assert_eq!(open_token(&extended, NOW + 40), Err(TokenError::Forged));
        let mut other_game = token.clone();
        other_game.protocol_id += 1;
        assert_eq!(open_token(&other_game, NOW), Err(TokenError::Forged));
        let other_key = TokenKey([8; 32]);
        let opened = open(
            &other_key,
            PROTOCOL,
            token.expires_at,
            &token.nonce,
            &token.sealed,
            NOW,
            server(),
        );
        assert_eq!(opened, Err(TokenError::Forged));
        let elsewhere: SocketAddr = "127.0.0.1:9999".parse().unwrap();
        let key = TokenKey([9; 32]);
        let opened =
            open(&key, PROTOCOL, token.expires_at, &token.nonce, &token.sealed, NOW, elsewhere);
        assert_eq!(opened, Err(TokenError::WrongServer));
    }

    #[test]
    fn truncated_or_garbled_bytes_are_errors_not_panics() {
        let bytes = token().encode();
        for len in 0..bytes.len() {
            assert!(ConnectToken::decode(&bytes[..len]).is_err(), "{len} bytes");
        }
        let mut version = bytes.clone();
        version[0] = b'X';
        assert_eq!(ConnectToken::decode(&version), Err(TokenError::BadVersion));
        let mut grant = grant();
        grant.server_addresses.clear();
        let none = issue(&TokenKey([9; 32]), PROTOCOL, &grant, NOW, 30, &random(1));
        assert_eq!(none, Err(TokenError::BadAddresses));
    }
}

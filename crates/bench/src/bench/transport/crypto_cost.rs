//! What sealing costs Rally per packet: the same stream of W1 payloads through two endpoints
//! joined by a perfect, instant network, once sealed (connect token, AES-256-GCM) and
//! once in plaintext, on this machine's clock. The difference is the CPU of sealing on one
//! side and opening on the other; the bytes are the 16-byte tag. Timed a third time with short
//! tags (12 bytes, `rally-coded`'s configuration), whose opening is RustCrypto's, not ring's.

use super::PAYLOAD_BYTES;
use rally_proto::packet::{TAG_SIZE, TAG_SIZE_SHORT};
use rally_proto::{Endpoint, EndpointConfig, EndpointRandomness, Event, Instant, Security};
use rally_sim::secure;
use serde::Serialize;
use std::net::SocketAddr;

/// Packets each timing sends.
const PACKETS: usize = 20_000;

/// The measured cost.
#[derive(Debug, Clone, Serialize)]
pub struct CryptoCost {
    /// Microseconds per packet, sent and received, sealed and plaintext.
    pub sealed_us_per_packet: f64,
    pub plaintext_us_per_packet: f64,
    /// Their difference: sealing plus opening one packet.
    pub cost_us_per_packet: f64,
    /// Bytes the tag adds to each packet.
    pub tag_bytes: usize,
    /// The same with short tags: microseconds per packet sealed, and the cost over plaintext.
    pub short_tag_sealed_us_per_packet: f64,
    pub short_tag_cost_us_per_packet: f64,
    pub short_tag_bytes: usize,
    pub packets: usize,
}

/// How the timed packets travel.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sealing {
    Plaintext,
    /// Sealed, with 16-byte tags or (`short`) 12-byte ones.
    Sealed {
        short: bool,
    },
}

/// Times both, best of three each, so that a noisy moment does not decide.
pub fn measure() -> Result<CryptoCost, String> {
    let best = |how| (0..3).map(|_| time(how)).try_fold(f64::MAX, |b, t| t.map(|t| b.min(t)));
    let sealed = best(Sealing::Sealed { short: false })?;
    let short = best(Sealing::Sealed { short: true })?;
    let plaintext = best(Sealing::Plaintext)?;
    Ok(CryptoCost {
        sealed_us_per_packet: sealed,
        plaintext_us_per_packet: plaintext,
        cost_us_per_packet: sealed - plaintext,
        tag_bytes: TAG_SIZE,
        short_tag_sealed_us_per_packet: short,
        short_tag_cost_us_per_packet: short - plaintext,
        short_tag_bytes: TAG_SIZE_SHORT,
        packets: PACKETS,
    })
}

/// Microseconds per packet for `PACKETS` payloads from a client to a server.
#[allow(clippy::disallowed_methods)] // a benchmark times itself
fn time(how: Sealing) -> Result<f64, String> {
    let client_addr: SocketAddr = "10.0.0.1:4000".parse().expect("an address");
    let server_addr: SocketAddr = "10.0.0.2:7777".parse().expect("an address");
    let mut base =
        EndpointConfig { security: Security::DangerPlaintext, ..EndpointConfig::default() };
    let sealed = how != Sealing::Plaintext;
    base.connection.short_tag = how == Sealing::Sealed { short: true };
    let server_config =
        if sealed { secure::server_config(base.clone(), server_addr) } else { base.clone() };
    let seeded = EndpointRandomness::danger_from_seed;
    let mut server = Endpoint::new(server_config, seeded(2)).expect("the default limits are valid");
    let mut client = Endpoint::new(base, seeded(1)).expect("the default limits are valid");
    let handle = if sealed {
        client
            .connect_with_token(Instant::ZERO, secure::token(1, 1, server_addr))
            .map_err(|e| e.to_string())?
    } else {
        client.connect(Instant::ZERO, server_addr)
    };
    let mut buf = vec![0u8; 1500];
    let mut now = Instant::ZERO;
    let mut exchange = |client: &mut Endpoint, server: &mut Endpoint, now: Instant| {
        let mut delivered = 0;
        while let Some(t) = client.poll_transmit(now, &mut buf) {
            server.handle_datagram(now, client_addr, &buf[..t.len]);
        }
        while let Some(t) = server.poll_transmit(now, &mut buf) {
            client.handle_datagram(now, server_addr, &buf[..t.len]);
        }
        while let Some((_, event)) = server.poll_event() {
            delivered += usize::from(matches!(event, Event::Message { .. }));
        }
        while client.poll_event().is_some() {}
        delivered
    };
    for _ in 0..10 {
        exchange(&mut client, &mut server, now);
        now += std::time::Duration::from_millis(1);
    }
    if client.connection(handle).is_none() {
        return Err("the timing's client did not connect".into());
    }
    let payload = vec![7u8; PAYLOAD_BYTES];
    let started = std::time::Instant::now();
    let mut delivered = 0;
    for _ in 0..PACKETS {
        // One payload per packet, as W1 sends them, and the ack back.
        client.send(handle, 0, &payload).map_err(|e| e.to_string())?;
        delivered += exchange(&mut client, &mut server, now);
        // W1's interval: every ack is due by the next payload.
        now += std::time::Duration::from_micros(16_667);
    }
    let elapsed = started.elapsed();
    if delivered < PACKETS * 9 / 10 {
        return Err(format!("only {delivered} of {PACKETS} timing payloads arrived"));
    }
    Ok(elapsed.as_secs_f64() * 1e6 / PACKETS as f64)
}

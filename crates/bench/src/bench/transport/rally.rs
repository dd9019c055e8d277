//! Rally on the W1 workload, in virtual time: a client and a server endpoint over the
//! emulated links of `rally-sim`.

use super::{send_time, Run, PAYLOAD_BYTES};
use rally_netem::LinkConfig;
use rally_proto::{EndpointConfig, Event, Repair, SendError};
use rally_sim::{Pair, VirtualClock};
use std::error::Error;
use std::time::Duration;

/// Rally with its default configuration, or with streaming repair and short tags on (`coded`).
pub fn run(
    link: &LinkConfig,
    seed: u64,
    duration: Duration,
    coded: bool,
) -> Result<Run, Box<dyn Error>> {
    let mut config = EndpointConfig::default();
    if coded {
        config.connection.repair = Repair::adaptive();
        // The configuration recommended for lossy links: 4 bytes off every packet.
        config.connection.short_tag = true;
    }
    // Sealed, as deployed: a connect token and an AEAD tag on every packet.
    let mut pair = Pair::secure(config, *link, seed);
    let (client, server) = pair
        .connect(Duration::from_secs(10))
        .ok_or("rally: the handshake did not finish within 10 s of virtual time")?;
    let (bytes_up, bytes_down) = (pair.client_wire_bytes(), pair.server_wire_bytes());
    let start = pair.now();
    let end = start + duration;
    let mut sent_at = Vec::new();
    let mut run = Run::default();
    let (mut seen_client, mut seen_server) =
        (pair.client_events().len(), pair.server_events().len());
    let mut payload = vec![0u8; PAYLOAD_BYTES];
    while pair.now() < end {
        let next = send_time(start, sent_at.len() as u64);
        if pair.now() >= next {
            let index = sent_at.len() as u32;
            payload[..4].copy_from_slice(&index.to_le_bytes());
            match pair.client().send(client, 0, &payload) {
                Ok(()) => run.payload_bytes += PAYLOAD_BYTES as u64,
                Err(SendError::QueueFull(_)) => run.refused += 1,
                Err(e) => return Err(format!("rally: send failed: {e}").into()),
            }
            let now = pair.now();
            sent_at.push(now);
            pair.drive();
        }
        // The server echoes at once; the client records each echo's round trip.
        while seen_server < pair.server_events().len() {
            if let (_, Event::Message { payload, .. }) = &pair.server_events()[seen_server] {
                let payload = payload.clone();
                if pair.server().send(server, 0, &payload).is_ok() {
                    run.payload_bytes += payload.len() as u64;
                }
            }
            seen_server += 1;
            pair.drive();
        }
        while seen_client < pair.client_events().len() {
            if let (_, Event::Message { payload, .. }) = &pair.client_events()[seen_client] {
                let index = u32::from_le_bytes(payload[..4].try_into()?) as usize;
                run.rtts_ms.push((pair.now() - sent_at[index]).as_secs_f64() * 1e3);
            }
            seen_client += 1;
        }
        pair.step_until(send_time(start, sent_at.len() as u64).min(end));
    }
    run.wire_bytes =
        (pair.client_wire_bytes() - bytes_up) + (pair.server_wire_bytes() - bytes_down);
    run.missing = (sent_at.len() - run.rtts_ms.len()) as u64 - run.refused;
    Ok(run)
}

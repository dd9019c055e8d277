//! Seeded scenarios and their checkers (TigerBeetle's VOPR is the model).
//!
//! A seed decides everything: the link's faults (loss up to 30%, random or in bursts,
//! duplication, reordering, a rate limit, blackouts), the traffic (both directions, every
//! channel, sizes from empty to many fragments). The scenario runs in virtual time in three
//! acts: connect on a healed link, exchange messages under faults, then heal the link and let
//! it settle. Checkers run after every step of the clock:
//!
//! - reliable ordered: every message arrives exactly once, in sending order;
//! - reliable unordered: every message arrives exactly once;
//! - unreliable sequenced: never a message older than one already delivered;
//! - unreliable: never a message twice;
//! - every send queue stays within `send_queue_max`;
//! - within [`HEAL_BOUND`] of the heal, every reliable message accepted for sending has
//!   arrived.
//!
//! A failure names the seed; [`run`] with the same seed replays it exactly, which the trace
//! hash (every event, in order, with its time) proves.

use crate::Pair;
use rally_netem::{LinkConfig, LossModel};
use rally_proto::{
    ChannelConfig, ChannelKind, ConnectionConfig, ConnectionHandle, Endpoint, EndpointConfig,
    Event, Instant, SendError,
};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::time::Duration;

/// Time after the heal within which every reliable message must have arrived: the longest
/// resend interval (250 ms) several times over, plus draining a full queue on a clean link.
pub const HEAL_BOUND: Duration = Duration::from_secs(3);

const CHANNELS: [ChannelKind; 4] = [
    ChannelKind::ReliableOrdered,
    ChannelKind::ReliableUnordered,
    ChannelKind::UnreliableSequenced,
    ChannelKind::Unreliable,
];

/// What a seed chose, printed with a failure.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The seed.
    pub seed: u64,
    /// The link during the faulty act.
    pub faulty: LinkConfig,
    /// Blackouts (all packets lost) during the faulty act: start offset and length.
    pub blackouts: Vec<(Duration, Duration)>,
    /// Length of the faulty act.
    pub fault_time: Duration,
    /// Mean gap between sends on each side.
    pub send_gap: Duration,
    /// Largest message, bytes.
    pub size_max: usize,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario.
    pub scenario: Scenario,
    /// A hash of every event, in order, with its time: the same seed gives the same hash.
    pub trace_hash: u64,
    /// Messages delivered, both sides, all channels.
    pub delivered: u64,
    /// Sends refused with a full queue (allowed: the sender sheds load).
    pub refused: u64,
    /// The first broken invariant, if any.
    pub failure: Option<String>,
    /// Both connections' statistics at the end (client, server), for failure reports.
    pub stats: [Option<rally_proto::ConnectionStats>; 2],
    /// Per sending side (client, server) and channel: messages accepted and messages arrived.
    pub counts: [[(u32, u32); 4]; 2],
}

impl Scenario {
    /// The scenario of `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let loss = match rng.next_u32() % 3 {
            0 => LossModel::Bernoulli { probability: unit(&mut rng) * 0.3 },
            1 => LossModel::bursts(unit(&mut rng) * 0.3, 1.0 + unit(&mut rng) * 6.0),
            _ => LossModel::None,
        };
        let faulty = LinkConfig {
            delay: Duration::from_micros(1_000 + rng.next_u64() % 80_000),
            jitter: Duration::from_micros(rng.next_u64() % 20_000),
            reorder: rng.next_u32() % 2 == 0,
            loss,
            duplicate: unit(&mut rng) * 0.05,
            rate_bits_per_sec: (rng.next_u32() % 3 == 0)
                .then(|| 200_000 + rng.next_u64() % 5_000_000),
            queue_bytes_max: 20_000 + (rng.next_u64() % 200_000) as usize,
            ..LinkConfig::default()
        };
        let fault_time = Duration::from_millis(2_000 + rng.next_u64() % 4_000);
        let blackouts = (0..rng.next_u32() % 3)
            .map(|_| {
                let start = Duration::from_millis(rng.next_u64() % fault_time.as_millis() as u64);
                (start, Duration::from_millis(100 + rng.next_u64() % 1_900))
            })
            .collect();
        let send_gap = Duration::from_micros(2_000 + rng.next_u64() % 30_000);
        let size_max = [8, 400, 1_500, 20_000][(rng.next_u32() % 4) as usize];
        Scenario { seed, faulty, blackouts, fault_time, send_gap, size_max }
    }
}

fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn endpoint_config() -> EndpointConfig {
    let channels = CHANNELS.iter().map(|kind| ChannelConfig { kind: *kind, priority: 1 }).collect();
    let connection =
        ConnectionConfig { channels, send_queue_max: 256, ..ConnectionConfig::default() };
    EndpointConfig { connection, ..EndpointConfig::default() }
}

/// What one side has sent and received, for the checkers.
#[derive(Debug, Default)]
struct Ledger {
    /// Per channel: messages accepted for sending.
    sent: [u32; 4],
    /// Per channel: the next index expected (ordered) or the last delivered (sequenced).
    cursor: [Option<u32>; 4],
    /// Per channel: which indices arrived (unordered, unreliable, and a count for ordered).
    seen: [Vec<bool>; 4],
    delivered: u64,
}

/// Runs the scenario of `seed` to the end, checking after every step.
pub fn run(seed: u64) -> Outcome {
    run_scenario(Scenario::from_seed(seed))
}

/// Runs a scenario (from a seed, possibly edited to narrow down a failure).
pub fn run_scenario(scenario: Scenario) -> Outcome {
    let seed = scenario.seed;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5EED);
    let healed = LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() };
    let mut pair = Pair::new(endpoint_config(), healed, seed);
    let mut outcome = Outcome {
        scenario: scenario.clone(),
        trace_hash: 0,
        delivered: 0,
        refused: 0,
        failure: None,
        stats: [None, None],
        counts: [[(0, 0); 4]; 2],
    };
    let Some((client, server)) = pair.connect(Duration::from_secs(5)) else {
        outcome.failure = Some("the handshake did not finish on a healed link".into());
        return outcome;
    };
    let mut ledgers = [Ledger::default(), Ledger::default()];
    let mut seen_events = [pair.client_events.len(), pair.server_events.len()];
    let mut trace = SipHasher13::new_with_keys(seed, 0);
    pair.to_server.set_config(scenario.faulty);
    pair.to_client.set_config(scenario.faulty);
    let fault_start = pair.now;
    let heal_at = fault_start + scenario.fault_time;
    let mut end = heal_at + HEAL_BOUND;
    let mut healed_yet = false;
    let mut next_send = [fault_start, fault_start];
    while pair.now < end {
        apply_blackouts(&mut pair, &scenario, fault_start, heal_at, healed);
        if !healed_yet && pair.now >= heal_at {
            // Packets already queued at a bottleneck keep the old rate; the bound starts when
            // they are out.
            healed_yet = true;
            let drained = pair.to_server.drained_at().max(pair.to_client.drained_at());
            end = end.max(drained + HEAL_BOUND);
        }
        for side in 0..2 {
            if pair.now >= next_send[side] && pair.now < heal_at {
                let (endpoint, handle) =
                    if side == 0 { (&mut pair.client, client) } else { (&mut pair.server, server) };
                outcome.refused +=
                    send_random(endpoint, handle, &mut ledgers[side], &mut rng, scenario.size_max);
                let gap = scenario.send_gap.mul_f64(0.5 + unit(&mut rng));
                next_send[side] = pair.now + gap;
            }
        }
        pair.drive();
        if let Err(failure) = check(&mut pair, &mut ledgers, &mut seen_events, &mut trace) {
            outcome.failure = Some(format!("at {}: {failure}", pair.now));
            break;
        }
        let wake = [next_send[0], next_send[1], end]
            .into_iter()
            .filter(|t| *t > pair.now)
            .min()
            .unwrap_or(end);
        pair.step_until(wake);
    }
    if outcome.failure.is_none() {
        outcome.failure = check_complete(&ledgers);
    }
    outcome.delivered = ledgers[0].delivered + ledgers[1].delivered;
    for (side, ledger) in ledgers.iter().enumerate() {
        for c in 0..4 {
            let arrived = ledger.seen[c].iter().filter(|s| **s).count() as u32;
            outcome.counts[side][c] = (ledger.sent[c], arrived);
        }
    }
    outcome.stats = [
        pair.client.connection(client).map(|c| c.stats()),
        pair.server.connection(server).map(|c| c.stats()),
    ];
    trace.write_u64(outcome.delivered);
    outcome.trace_hash = trace.finish();
    outcome
}

fn apply_blackouts(
    pair: &mut Pair,
    scenario: &Scenario,
    start: Instant,
    heal_at: Instant,
    healed: LinkConfig,
) {
    let dark = scenario.blackouts.iter().any(|(from, len)| {
        let from = start + *from;
        pair.now >= from && pair.now < from + *len
    });
    let config = if pair.now >= heal_at {
        healed
    } else if dark {
        LinkConfig { loss: LossModel::Bernoulli { probability: 1.0 }, ..scenario.faulty }
    } else {
        scenario.faulty
    };
    if *pair.to_server.config() != config {
        pair.to_server.set_config(config);
        pair.to_client.set_config(config);
    }
}

/// Sends one message of random size on a random channel; returns 1 if the queue refused it.
fn send_random(
    endpoint: &mut Endpoint,
    handle: ConnectionHandle,
    ledger: &mut Ledger,
    rng: &mut impl RngCore,
    size_max: usize,
) -> u64 {
    let channel = (rng.next_u32() % 4) as usize;
    let size = 4 + (rng.next_u64() % size_max as u64) as usize;
    let index = ledger.sent[channel];
    let mut payload = vec![(index % 251) as u8; size];
    payload[..4].copy_from_slice(&index.to_le_bytes());
    match endpoint.send(handle, channel as u8, &payload) {
        Ok(()) => {
            ledger.sent[channel] += 1;
            0
        }
        Err(SendError::QueueFull(_)) => 1,
        Err(other) => panic!("send failed unexpectedly: {other}"),
    }
}

/// Checks every new event of both sides against the invariants and the queue limits.
fn check(
    pair: &mut Pair,
    ledgers: &mut [Ledger; 2],
    seen_events: &mut [usize; 2],
    trace: &mut SipHasher13,
) -> Result<(), String> {
    // The server receives what the client sent (ledger 0) and the other way round.
    for (receiver, sender) in [(1usize, 0usize), (0, 1)] {
        let events = if receiver == 1 { &pair.server_events } else { &pair.client_events };
        while seen_events[receiver] < events.len() {
            let (_, event) = &events[seen_events[receiver]];
            seen_events[receiver] += 1;
            trace.write_u64(pair.now.as_nanos());
            trace.write_usize(receiver);
            match event {
                Event::Message { channel, payload } => {
                    trace.write(payload);
                    let ledger = &mut ledgers[sender];
                    check_message(ledger, *channel, payload)?;
                    ledger.delivered += 1;
                }
                Event::Disconnected { reason } => {
                    return Err(format!("side {receiver} disconnected: {reason:?}"))
                }
                Event::Connected => {}
            }
        }
    }
    for (name, endpoint) in [("client", &pair.client), ("server", &pair.server)] {
        for handle in (0..4).map(ConnectionHandle) {
            if let Some(connection) = endpoint.connection(handle) {
                let queued = connection.stats().send_queue.iter().copied().max().unwrap_or(0);
                if queued > 256 {
                    return Err(format!(
                        "{name} send queue holds {queued} units, over its limit of 256"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_message(ledger: &mut Ledger, channel: u8, payload: &[u8]) -> Result<(), String> {
    let c = usize::from(channel);
    let index = u32::from_le_bytes(
        payload.get(..4).ok_or("a message shorter than its index")?.try_into().expect("four bytes"),
    );
    if index >= ledger.sent[c] {
        return Err(format!("channel {c} delivered message {index}, which was never sent"));
    }
    if payload[4..].iter().any(|b| *b != (index % 251) as u8) {
        return Err(format!("channel {c} message {index} arrived corrupted"));
    }
    let seen = &mut ledger.seen[c];
    if seen.len() <= index as usize {
        seen.resize(index as usize + 1, false);
    }
    let duplicate = std::mem::replace(&mut seen[index as usize], true);
    match CHANNELS[c] {
        ChannelKind::ReliableOrdered => {
            let expected = ledger.cursor[c].unwrap_or(0);
            if index != expected {
                return Err(format!("ordered channel delivered {index} when {expected} was next"));
            }
            ledger.cursor[c] = Some(index + 1);
        }
        ChannelKind::UnreliableSequenced => {
            if ledger.cursor[c].is_some_and(|last| index <= last) {
                return Err(format!("sequenced channel went back to {index}"));
            }
            ledger.cursor[c] = Some(index);
        }
        ChannelKind::ReliableUnordered | ChannelKind::Unreliable if duplicate => {
            return Err(format!("channel {c} delivered message {index} twice"));
        }
        _ => {}
    }
    Ok(())
}

/// After the heal bound: every reliable message accepted for sending has arrived.
fn check_complete(ledgers: &[Ledger; 2]) -> Option<String> {
    for (side, ledger) in ledgers.iter().enumerate() {
        for c in [0usize, 1] {
            let arrived = ledger.seen[c].iter().filter(|s| **s).count() as u32;
            if arrived != ledger.sent[c] {
                let sent = ledger.sent[c];
                let bound = HEAL_BOUND;
                return Some(format!(
                    "side {side} channel {c}: {arrived} of {sent} reliable messages arrived \
                     within {bound:?} of the heal"
                ));
            }
        }
    }
    None
}

//! Seeded scenarios and their checkers (TigerBeetle's VOPR is the model).
//!
//! A seed decides everything: how many clients (one to three), the links' faults (loss up to
//! 30%, random or in bursts, duplication, reordering, a rate limit, blackouts), the traffic
//! (both directions of every connection, every channel, sizes from tiny to many fragments).
//! The scenario runs in virtual time in three acts: connect on healed links, exchange messages
//! under faults, then heal the links and let them settle. Checkers run after every step of the
//! clock:
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

use crate::net::Net;
use crate::VirtualClock;
use rally_netem::{LinkConfig, LossModel};
use rally_proto::{
    ChannelConfig, ChannelKind, ConnectionConfig, ConnectionHandle, Endpoint, EndpointConfig,
    Event, Instant, Repair, SendError,
};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::net::SocketAddr;
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
    /// Clients connected to the one server.
    pub clients: usize,
    /// Whether the reliable-ordered channel sends repairs (`Repair::adaptive`): every odd
    /// seed, so that the checkers cover coded delivery and the copies alike.
    pub coded: bool,
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
    /// Each client's connection statistics at the end, for failure reports.
    pub stats: Vec<Option<rally_proto::ConnectionStats>>,
    /// Per client, per direction (client to server, server to client) and channel: messages
    /// accepted for sending and messages arrived.
    pub counts: Vec<[[(u32, u32); 4]; 2]>,
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
        let clients = 1 + (rng.next_u32() % 3) as usize;
        // From the seed itself, not the generator: the other choices stay what they were.
        let coded = seed % 2 == 1;
        Scenario { seed, faulty, blackouts, fault_time, send_gap, size_max, clients, coded }
    }
}

fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn endpoint_config(coded: bool) -> EndpointConfig {
    let channels = CHANNELS.iter().map(|kind| ChannelConfig { kind: *kind, priority: 1 }).collect();
    let repair = if coded { Repair::adaptive() } else { Repair::Off };
    let connection =
        ConnectionConfig { channels, send_queue_max: 256, repair, ..ConnectionConfig::default() };
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
    let mut net = Net::new(endpoint_config(scenario.coded), healed, scenario.clients, seed);
    let mut outcome = Outcome {
        scenario: scenario.clone(),
        trace_hash: 0,
        delivered: 0,
        refused: 0,
        failure: None,
        stats: Vec::new(),
        counts: Vec::new(),
    };
    if !net.connect_all(Duration::from_secs(5)) {
        outcome.failure = Some("the handshakes did not finish on healed links".into());
        return outcome;
    }
    let Some(server_handles) = server_handles(&net) else {
        outcome.failure = Some("a server connection has no client".into());
        return outcome;
    };
    // Per client: [client to server, server to client].
    let mut ledgers: Vec<[Ledger; 2]> = (0..scenario.clients).map(|_| Default::default()).collect();
    let mut seen = Seen { server: net.server_events.len(), clients: vec![0; scenario.clients] };
    let mut trace = SipHasher13::new_with_keys(seed, 0);
    let fault_start = net.now;
    let heal_at = fault_start + scenario.fault_time;
    let mut end = heal_at + HEAL_BOUND;
    let mut healed_yet = false;
    // Per client: the next send of the client and of the server to it.
    let mut next_send = vec![[fault_start; 2]; scenario.clients];
    net.set_links(scenario.faulty);
    while net.now < end {
        apply_blackouts(&mut net, &scenario, fault_start, heal_at, healed);
        if !healed_yet && net.now >= heal_at {
            // Packets already queued at a bottleneck keep the old rate; the bound starts when
            // they are out.
            healed_yet = true;
            end = end.max(net.drained_at() + HEAL_BOUND);
        }
        for c in 0..scenario.clients {
            for side in 0..2 {
                if net.now < next_send[c][side] || net.now >= heal_at {
                    continue;
                }
                let (endpoint, handle) = if side == 0 {
                    let client = &mut net.clients[c];
                    (&mut client.endpoint, client.handle.expect("connected"))
                } else {
                    (&mut net.server, server_handles[c])
                };
                let ledger = &mut ledgers[c][side];
                outcome.refused +=
                    send_random(endpoint, handle, ledger, &mut rng, scenario.size_max);
                next_send[c][side] = net.now + scenario.send_gap.mul_f64(0.5 + unit(&mut rng));
            }
        }
        net.drive();
        if let Err(failure) = check(&net, &server_handles, &mut ledgers, &mut seen, &mut trace) {
            outcome.failure = Some(format!("at {}: {failure}", net.now));
            break;
        }
        let sends = next_send.iter().flatten().copied();
        let wake = sends.chain([end]).filter(|t| *t > net.now).min().unwrap_or(end);
        net.step_until(wake);
    }
    if outcome.failure.is_none() {
        outcome.failure = check_complete(&ledgers);
    }
    finish(&mut outcome, &net, &ledgers, trace);
    outcome
}

/// Fills the outcome's totals, counts, stats and trace hash.
fn finish(outcome: &mut Outcome, net: &Net, ledgers: &[[Ledger; 2]], mut trace: SipHasher13) {
    outcome.delivered = ledgers.iter().flatten().map(|l| l.delivered).sum();
    outcome.counts = ledgers
        .iter()
        .map(|pair| {
            [0, 1].map(|side| {
                let ledger = &pair[side];
                [0, 1, 2, 3].map(|c| {
                    let arrived = ledger.seen[c].iter().filter(|s| **s).count() as u32;
                    (ledger.sent[c], arrived)
                })
            })
        })
        .collect();
    outcome.stats = net
        .clients
        .iter()
        .map(|client| client.handle.and_then(|h| client.endpoint.connection(h)).map(|c| c.stats()))
        .collect();
    trace.write_u64(outcome.delivered);
    outcome.trace_hash = trace.finish();
}

/// The server's handle for each client, in client order.
fn server_handles(net: &Net) -> Option<Vec<ConnectionHandle>> {
    let connected = net.server_events.iter().filter(|(_, e)| *e == Event::Connected);
    let pairs: Vec<(SocketAddr, ConnectionHandle)> =
        connected.filter_map(|(h, _)| net.server.peer(*h).map(|addr| (addr, *h))).collect();
    net.clients
        .iter()
        .map(|c| pairs.iter().find(|(addr, _)| *addr == c.addr).map(|(_, h)| *h))
        .collect()
}

fn apply_blackouts(
    net: &mut Net,
    scenario: &Scenario,
    start: Instant,
    heal_at: Instant,
    healed: LinkConfig,
) {
    let dark = scenario.blackouts.iter().any(|(from, len)| {
        let from = start + *from;
        net.now >= from && net.now < from + *len
    });
    let config = if net.now >= heal_at {
        healed
    } else if dark {
        LinkConfig { loss: LossModel::Bernoulli { probability: 1.0 }, ..scenario.faulty }
    } else {
        scenario.faulty
    };
    if net.clients.first().is_some_and(|c| *c.up.config() != config) {
        net.set_links(config);
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

/// How many events of each endpoint the checkers have seen.
struct Seen {
    server: usize,
    clients: Vec<usize>,
}

/// Checks every new event of every endpoint against the invariants and the queue limits.
fn check(
    net: &Net,
    server_handles: &[ConnectionHandle],
    ledgers: &mut [[Ledger; 2]],
    seen: &mut Seen,
    trace: &mut SipHasher13,
) -> Result<(), String> {
    // What the server received came from client `c` (direction 0).
    while seen.server < net.server_events.len() {
        let (handle, event) = &net.server_events[seen.server];
        seen.server += 1;
        let c = server_handles.iter().position(|h| h == handle).ok_or("an unknown connection")?;
        record(event, &mut ledgers[c][0], (net.now, c, 0), trace)?;
    }
    // What client `c` received came from the server (direction 1).
    for (c, client) in net.clients.iter().enumerate() {
        while seen.clients[c] < client.events.len() {
            let (_, event) = &client.events[seen.clients[c]];
            seen.clients[c] += 1;
            record(event, &mut ledgers[c][1], (net.now, c, 1), trace)?;
        }
    }
    let mut connections =
        server_handles.iter().filter_map(|h| net.server.connection(*h)).collect::<Vec<_>>();
    connections
        .extend(net.clients.iter().filter_map(|c| c.handle.and_then(|h| c.endpoint.connection(h))));
    for connection in connections {
        let queued = connection.stats().send_queue.iter().copied().max().unwrap_or(0);
        if queued > 256 {
            return Err(format!("a send queue holds {queued} units, over its limit of 256"));
        }
    }
    Ok(())
}

/// Hashes an event into the trace and checks a message against the sender's ledger.
fn record(
    event: &Event,
    ledger: &mut Ledger,
    (now, client, direction): (Instant, usize, usize),
    trace: &mut SipHasher13,
) -> Result<(), String> {
    trace.write_u64(now.as_nanos());
    trace.write_usize(client * 2 + direction);
    match event {
        Event::Message { channel, payload } => {
            trace.write(payload);
            check_message(ledger, *channel, payload)
                .map_err(|e| format!("client {client} direction {direction}: {e}"))?;
            ledger.delivered += 1;
            Ok(())
        }
        Event::Disconnected { reason } => {
            Err(format!("client {client} direction {direction}: disconnected: {reason:?}"))
        }
        Event::Connected => Ok(()),
    }
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
fn check_complete(ledgers: &[[Ledger; 2]]) -> Option<String> {
    for (client, pair) in ledgers.iter().enumerate() {
        for (direction, ledger) in pair.iter().enumerate() {
            for c in [0usize, 1] {
                let arrived = ledger.seen[c].iter().filter(|s| **s).count() as u32;
                let sent = ledger.sent[c];
                if arrived != sent {
                    let bound = HEAL_BOUND;
                    return Some(format!(
                        "client {client} direction {direction} channel {c}: {arrived} of {sent} \
                         reliable messages arrived within {bound:?} of the heal"
                    ));
                }
            }
        }
    }
    None
}

//! Seeded room scenarios: the sandbox game with up to ten clients through the faults of a
//! transport scenario, checked end to end.
//!
//! A seed decides the clients (one to ten), the bodies (up to 128), a grab chain (depth up to
//! three) on the first client's controller, the input rate (30 to 144 Hz), whether a client
//! joins late and whether one drops its connection and resumes, and the faulty link (as
//! [`Scenario::from_seed`]: loss, bursts, jitter, reordering, duplication, a rate limit,
//! blackouts). The world keeps moving throughout; then the links heal, the world and the
//! inputs stop, and the checkers run:
//!
//! - every client joined, and its snapshot equals the room's, entity for entity, bit for bit
//!   after quantization;
//! - the room applied every client's last input, and each input once;
//! - reliable RPCs, both ways, arrived in order and never twice, and all of them did when no
//!   send was refused along the way and no connection dropped;
//! - the room counted no bad message from these honest clients.

use crate::room::RoomNet;
use crate::sandbox::{HandInput, Sandbox, SandboxMessage};
use crate::scenario::Scenario;
use rally_engine::{ClientEvent, Delivery, Room, RoomConfig, RoomEvent, Target};
use rally_netem::{LinkConfig, LossModel};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::time::Duration;

/// Time after the heal for everything to settle before the checks.
pub const SETTLE: Duration = Duration::from_secs(3);

/// What a seed chose.
#[derive(Debug, Clone)]
pub struct RoomScenario {
    /// The seed.
    pub seed: u64,
    /// The faults, as a transport scenario of the same seed has them.
    pub faults: Scenario,
    /// Clients.
    pub clients: usize,
    /// Free bodies.
    pub bodies: usize,
    /// Depth of the grab chain on client 0's controller.
    pub chain_depth: usize,
    /// Inputs per second per client.
    pub input_hz: u32,
    /// Whether the last client joins a third of the way into the faults.
    pub late_join: bool,
    /// Whether client 0 drops its connection half way and resumes.
    pub resume: bool,
}

impl RoomScenario {
    /// The room scenario of `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x0000_0000_0000_5200);
        let clients = 1 + (rng.next_u32() % 10) as usize;
        Self {
            seed,
            faults: Scenario::from_seed(seed),
            clients,
            bodies: (rng.next_u32() % 129) as usize,
            chain_depth: (rng.next_u32() % 4) as usize,
            input_hz: 30 + rng.next_u32() % 115,
            late_join: clients > 1 && rng.next_u32() % 3 == 0,
            resume: rng.next_u32() % 3 == 0,
        }
    }
}

/// What a room run produced.
#[derive(Debug, Clone)]
pub struct RoomOutcome {
    /// The scenario.
    pub scenario: RoomScenario,
    /// Inputs the room applied.
    pub inputs: u64,
    /// Reliable RPCs delivered, both ways.
    pub rpcs: u64,
    /// Snapshots clients applied.
    pub snapshots: u64,
    /// The first broken invariant, if any.
    pub failure: Option<String>,
}

/// Runs the room scenario of `seed`.
pub fn run(seed: u64) -> RoomOutcome {
    run_keeping_net(seed).0
}

/// Runs the room scenario of `seed` and returns the network too, for a closer look at a
/// failure (the `debug_room` example prints its connection events).
pub fn run_keeping_net(seed: u64) -> (RoomOutcome, RoomNet<Sandbox>) {
    let scenario = RoomScenario::from_seed(seed);
    let mut net = setup(&scenario);
    let mut outcome = RoomOutcome { scenario, inputs: 0, rpcs: 0, snapshots: 0, failure: None };
    let sent = act(&mut net, &outcome.scenario);
    outcome.failure = check(&net, &sent).err();
    outcome.inputs = net.room.stats().inputs_applied;
    outcome.snapshots = net.sessions.iter().map(|s| s.stats().snapshots).sum();
    outcome.rpcs = count_rpcs(&net);
    (outcome, net)
}

fn healed(faulty: &LinkConfig) -> LinkConfig {
    LinkConfig { delay: faulty.delay, ..LinkConfig::default() }
}

fn setup(scenario: &RoomScenario) -> RoomNet<Sandbox> {
    let room = Room::new(RoomConfig::default(), Sandbox::default(), scenario.seed);
    let mut room = room.expect("the default config is valid");
    Sandbox::populate(room.world_mut(), scenario.bodies, scenario.seed);
    let link = healed(&scenario.faults.faulty);
    let mut net = RoomNet::new(room, scenario.clients, link, scenario.seed);
    let joining = scenario.clients - usize::from(scenario.late_join);
    for i in 0..joining {
        net.connect(i);
    }
    net.run_for(Duration::from_secs(1));
    if scenario.chain_depth > 0 {
        if let Some(&root) = net.room.simulation().controllers.values().next() {
            Sandbox::chain(net.room.world_mut(), root, scenario.chain_depth);
        }
    }
    net
}

/// Reliable RPCs accepted for sending: (room to client i, client i to room).
#[derive(Debug, Default)]
struct Sent {
    down: Vec<u32>,
    up: Vec<u32>,
}

/// The faulty act: inputs, RPCs both ways, blackouts, a late join and a resume.
fn act(net: &mut RoomNet<Sandbox>, scenario: &RoomScenario) -> Vec<Sent> {
    let faults = &scenario.faults;
    let blackout = LinkConfig { loss: LossModel::Bernoulli { probability: 1.0 }, ..faults.faulty };
    net.net.set_links(faults.faulty);
    let mut sent: Vec<Sent> = (0..scenario.clients).map(|_| Sent::default()).collect();
    let start = net.net.now;
    let frame = Duration::from_secs(1) / scenario.input_hz;
    let (mut joined_late, mut resumed) = (false, false);
    let mut counter = 0u32;
    while net.net.now < start + faults.fault_time {
        let elapsed = net.net.now - start;
        let dark = faults.blackouts.iter().any(|(at, len)| elapsed >= *at && elapsed < *at + *len);
        net.net.set_links(if dark { blackout } else { faults.faulty });
        if scenario.late_join && !joined_late && elapsed >= faults.fault_time / 3 {
            joined_late = true;
            net.connect(scenario.clients - 1);
        }
        if scenario.resume && !resumed && elapsed >= faults.fault_time / 2 {
            resumed = true;
            net.disconnect(0);
            net.run_for(Duration::from_millis(50));
            net.connect(0);
        }
        let t = net.net.now.as_secs_f64();
        for i in 0..scenario.clients {
            if net.sessions[i].client_id().is_some() {
                net.input(i, HandInput::on_circle(i, t));
            }
        }
        counter += 1;
        if counter % 4 == 0 {
            send_rpcs(net, &mut sent, counter);
        }
        net.run_for(frame);
    }
    settle(net);
    sent
}

fn send_rpcs(net: &mut RoomNet<Sandbox>, sent: &mut [Sent], n: u32) {
    for (i, ledger) in sent.iter_mut().enumerate() {
        let Some(client) = net.sessions[i].client_id() else { continue };
        let message = SandboxMessage::Count(n);
        if net.room.send(Target::One(client), Delivery::Reliable, &message).is_ok() {
            ledger.down.push(n);
        }
        if net.sessions[i].send(Delivery::Reliable, &message).is_ok() {
            ledger.up.push(n);
        }
    }
    net.flush();
}

fn settle(net: &mut RoomNet<Sandbox>) {
    net.room.simulation_mut().frozen = true;
    let link = healed(net.net.clients[0].up.config());
    net.net.set_links(link);
    net.run_for(SETTLE);
}

fn check(net: &RoomNet<Sandbox>, sent: &[Sent]) -> Result<(), String> {
    let room_view = net.room.snapshot().entities();
    let dropped_any = net.room.stats().sends_failed > 0
        || net.sessions.iter().any(|s| s.stats().sends_failed > 0);
    for (i, session) in net.sessions.iter().enumerate() {
        let client = session.client_id().ok_or(format!("client {i} never joined"))?;
        let view = session.snapshot().ok_or_else(|| {
            let ended = &net.client_disconnects[i];
            format!(
                "client {i} has no snapshot; its connections ended {ended:?}; {:?}",
                session.stats()
            )
        })?;
        if view.entities() != room_view {
            let mut why = describe_difference(i, view, net.room.snapshot(), session.stats());
            why += &format!("; its connection ended {:?}", net.client_disconnects[i]);
            return Err(why);
        }
        if session.last_applied_input() != net.room.last_input(client) {
            return Err(format!("client {i}: last input not applied"));
        }
        let reconnected = !net.client_disconnects[i].is_empty()
            || net.room_events.contains(&RoomEvent::Resumed(client));
        let complete = !dropped_any && !reconnected;
        let down = received_down(net, i);
        check_sequence(&format!("room to client {i}"), &sent[i].down, &down, complete)?;
        let up = received_up(net, client);
        check_sequence(&format!("client {i} to room"), &sent[i].up, &up, complete)?;
    }
    if net.room.stats().messages_dropped > 0 {
        return Err(format!("the room dropped honest messages: {:?}", net.room.stats()));
    }
    Ok(())
}

/// `got` must be `sent` in order without repeats; all of it when `complete`.
fn check_sequence(what: &str, sent: &[u32], got: &[u32], complete: bool) -> Result<(), String> {
    let mut rest = sent.iter();
    for n in got {
        if !rest.by_ref().any(|s| s == n) {
            return Err(format!("{what}: {n} arrived out of order, twice, or was never sent"));
        }
    }
    if complete && got.len() != sent.len() {
        return Err(format!("{what}: {} of {} reliable messages arrived", got.len(), sent.len()));
    }
    Ok(())
}

fn received_down(net: &RoomNet<Sandbox>, i: usize) -> Vec<u32> {
    net.client_events[i]
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Message(SandboxMessage::Count(n)) => Some(*n),
            _ => None,
        })
        .collect()
}

fn received_up(net: &RoomNet<Sandbox>, client: u32) -> Vec<u32> {
    net.room_events
        .iter()
        .filter_map(|e| match e {
            RoomEvent::Message { client: c, message: SandboxMessage::Count(n) } if *c == client => {
                Some(*n)
            }
            _ => None,
        })
        .collect()
}

fn count_rpcs(net: &RoomNet<Sandbox>) -> u64 {
    let down: usize = (0..net.sessions.len()).map(|i| received_down(net, i).len()).sum();
    let up = net.room_events.iter().filter(|e| matches!(e, RoomEvent::Message { .. })).count();
    (down + up) as u64
}

fn describe_difference(
    i: usize,
    view: &rally_wire::Snapshot,
    room: &rally_wire::Snapshot,
    stats: &rally_engine::ClientStats,
) -> String {
    let differing = room.entities().iter().find(|e| view.get(e.id) != Some(*e));
    let extra = view.entities().iter().find(|e| room.get(e.id).is_none());
    format!(
        "client {i}'s state differs from the room's after the heal: its snapshot of tick {} has \
         {} entities, the room's of tick {} has {}; first differing {:?} (client has {:?}), \
         first extra {:?}; {stats:?}",
        view.tick(),
        view.len(),
        room.tick(),
        room.len(),
        differing.map(|e| e.id),
        differing.and_then(|e| view.get(e.id)),
        extra.map(|e| e.id),
    )
}

//! The latency workload's two sides on real sockets, each on its own OS clock: a room of
//! paddles ticking at a rate ([`serve`]) and a player whose hand moves every frame ([`play`]).
//! `rally-bench peer server` and `rally-bench peer player` run them in their own processes for
//! `rally-bench latency --mode real`.

use crate::game::Paddles;
use rally_driver::UdpDriver;
use rally_engine::{ClientConfig, ClientSession, LatencySample};
use rally_engine::{Pipeline, Room, RoomConfig};
use rally_proto::{EndpointConfig, Instant};
use rally_sim::sandbox::HandInput;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How long before each tick or frame a thread stops sleeping and polls.
const SPIN: Duration = Duration::from_millis(1);

/// What a player tells its printer each second: its latency samples since its last report,
/// and its connection's RTT.
pub(crate) struct Report {
    pub samples: Vec<LatencySample>,
    pub rtt: Duration,
}

pub(crate) type Outcome = Result<(), Box<dyn Error + Send + Sync>>;

/// The server: routes datagrams to the room on arrival, ticks it at `hz`.
pub(crate) fn serve(
    mut driver: UdpDriver,
    hz: u32,
    pipeline: Pipeline,
    chain_depth: usize,
    stop: &AtomicBool,
) -> Outcome {
    let config = RoomConfig { tick_rate: hz, pipeline, ..RoomConfig::default() };
    let mut room = Room::new(config, Paddles::new(chain_depth), 1).map_err(|e| e.to_string())?;
    let mut game = std::mem::replace(room.simulation_mut(), Paddles::new(chain_depth));
    game.set_table(room.world_mut()).map_err(|e| e.to_string())?;
    *room.simulation_mut() = game;
    let clock = driver.clock();
    let dt = room.config().dt();
    // Ticks start on time: sleep, then poll the last millisecond.
    driver.set_spin(SPIN);
    let mut next_tick = driver.now();
    while !stop.load(Ordering::Relaxed) {
        let wait = next_tick.saturating_duration_since(driver.now());
        driver.run_for(wait, |endpoint, connection, event| {
            room.handle_event(clock.now(), connection, event);
            // What the room answered (the fast path's poses, say) goes now, not at the tick.
            room.transmit(endpoint);
        })?;
        room.tick(driver.now(), driver.endpoint());
        next_tick += dt;
    }
    Ok(())
}

/// A bot: joins, then each frame presents what arrived and sends a new hand pose.
pub(crate) fn play(
    bot: usize,
    token: rally_proto::ConnectToken,
    config: EndpointConfig,
    hz: u32,
    defer_inputs: bool,
    stop: &AtomicBool,
    reports: &mpsc::Sender<Report>,
) -> Outcome {
    let mut driver = UdpDriver::bind("127.0.0.1:0", config)?;
    // Frames start on time: sleep, then poll the last millisecond.
    driver.set_spin(SPIN);
    driver.connect_with_token(token)?;
    let clock = driver.clock();
    let client = ClientConfig { defer_inputs, ..ClientConfig::default() };
    let mut session: ClientSession<HandInput, ()> = ClientSession::new(client)?;
    let frame = Duration::from_secs(1) / hz;
    let mut next_frame = driver.now();
    let mut last_report = driver.now();
    while !stop.load(Ordering::Relaxed) {
        let wait = next_frame.saturating_duration_since(driver.now());
        driver.run_for(wait, |_, connection, event| {
            session.handle_event(clock.now(), connection, event);
        })?;
        // The wall time: a frame this thread reaches late samples and presents late, as a
        // game's would, so lateness shows in the figures (either way).
        let now: Instant = driver.now();
        session.present(now);
        session.send_input(now, HandInput::on_circle(bot, now.as_secs_f64()));
        session.transmit(driver.endpoint());
        next_frame += frame;
        if now - last_report >= Duration::from_secs(1) {
            last_report = now;
            report(&mut session, &mut driver, reports);
        }
    }
    // What was measured since the last report counts too.
    report(&mut session, &mut driver, reports);
    Ok(())
}

/// Sends the bot's samples since its last report, and its RTT.
fn report(
    session: &mut ClientSession<HandInput, ()>,
    driver: &mut UdpDriver,
    reports: &mpsc::Sender<Report>,
) {
    let samples = session.latency_mut().take_samples();
    let rtt = session.connection_stats(driver.endpoint()).map(|s| s.rtt).unwrap_or_default();
    let _ = reports.send(Report { samples, rtt });
}

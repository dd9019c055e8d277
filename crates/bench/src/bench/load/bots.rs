//! `rally-bench peer bots`: the W3 load's clients, in their own process. Each bot is a real client
//! session on its own UDP socket with its own sealed connection; one thread serves many of
//! them, each on its own frame schedule spread over the frame, so the host sees inputs arrive
//! evenly rather than in one burst per frame.

use crate::game::Reference;
use rally_driver::UdpDriver;
use rally_engine::{connection_config, ClientConfig, ClientSession, Simulation};
use rally_proto::{EndpointConfig, Event, TokenKey};
use rally_sim::sandbox::HandInput;
use serde::{Deserialize, Serialize};
use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

/// What the bots process was asked to do.
#[derive(Debug, Clone, clap::Args)]
pub struct BotsArgs {
    /// The key the host's tokens are sealed with, hex (the bots are their own backend).
    #[arg(long)]
    pub key: String,
    /// The game's protocol id.
    #[arg(long)]
    pub protocol: u64,
    /// The host's workers' addresses, comma-separated; room r is at address r % count.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<SocketAddr>,
    /// Rooms to fill, ids 0 to rooms - 1.
    #[arg(long)]
    pub rooms: u64,
    /// Clients per room.
    #[arg(long, default_value_t = 10)]
    pub clients: u64,
    /// Inputs per second per client (its frame rate).
    #[arg(long, default_value_t = 128)]
    pub hz: u32,
    /// Threads serving the bots.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Cores to run on (comma-separated); empty: wherever the OS puts the threads.
    #[arg(long, value_delimiter = ',')]
    pub cores: Vec<usize>,
    /// How long to play.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Bare UDP instead of Rally clients: each bot sends a datagram of this many bytes per
    /// frame and counts what comes back (the kernel's floor; see `bench load`).
    #[arg(long, value_name = "BYTES")]
    pub bare: Option<usize>,
}

/// What the bots process prints when it is done, as one JSON line.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct BotsReport {
    /// Bots started.
    pub clients: u64,
    /// Bots the room welcomed.
    pub joined: u64,
    /// Inputs sent, over all bots.
    pub inputs: u64,
    /// Snapshots applied, over all bots.
    pub snapshots: u64,
    /// Bots whose connection ended before the run did.
    pub disconnected: u64,
    /// Frames that started more than a frame late (the bots' thread could not keep up).
    pub frames_late: u64,
    /// Frames in all.
    pub frames: u64,
    /// The bots' threads' CPU time, microseconds.
    pub cpu_us: u64,
    /// Datagrams the bots sent, over all bots.
    pub datagrams_sent: u64,
    /// Bytes of those datagrams.
    pub bytes_sent: u64,
    /// Datagrams the bots received, over all bots.
    pub datagrams_received: u64,
    /// Bytes of those datagrams.
    pub bytes_received: u64,
}

impl BotsReport {
    /// Adds a thread's figures.
    fn add(&mut self, part: &BotsReport) {
        self.joined += part.joined;
        self.inputs += part.inputs;
        self.snapshots += part.snapshots;
        self.disconnected += part.disconnected;
        self.frames_late += part.frames_late;
        self.frames += part.frames;
        self.cpu_us += part.cpu_us;
        self.datagrams_sent += part.datagrams_sent;
        self.bytes_sent += part.bytes_sent;
        self.datagrams_received += part.datagrams_received;
        self.bytes_received += part.bytes_received;
    }

    /// The bots' CPU per frame, microseconds (what one client's frame costs the load
    /// generator: a bot core carries `1e6 / (hz * this)` clients).
    pub fn cpu_us_per_frame(&self) -> f64 {
        self.cpu_us as f64 / self.frames.max(1) as f64
    }

    /// Mean bytes of a datagram the bots sent and of one they received.
    pub fn datagram_bytes(&self) -> (f64, f64) {
        let sent = self.bytes_sent as f64 / self.datagrams_sent.max(1) as f64;
        (sent, self.bytes_received as f64 / self.datagrams_received.max(1) as f64)
    }
}

/// Frames due within this of the frame just run run at once, in the same wake-up; for a later
/// one the thread sleeps until it is due (a frame never runs earlier than this).
pub(super) const SAME_WAKE: Duration = Duration::from_micros(50);

/// How long a bots thread sleeps before a frame due `due` from now: none if it is due within
/// [`SAME_WAKE`], else until it is due (to the frame, not before it).
pub(super) fn sleep_before(due: Duration) -> Option<Duration> {
    (due > SAME_WAKE).then_some(due)
}

/// One bot.
struct Bot {
    index: u64,
    driver: UdpDriver,
    session: ClientSession<HandInput, <Reference as Simulation>::Message>,
    /// On the thread's clock (each driver keeps its own).
    next_frame: rally_proto::Instant,
    inputs: u64,
    ended: bool,
}

/// Runs the bots and prints their report.
pub fn run(args: &BotsArgs) -> Result<(), Box<dyn Error>> {
    let report = play(args)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Runs the bots on the calling thread's process (pinned to `args.cores`, threads of their
/// own) and returns their report; their CPU is their own threads' (`getrusage` per thread),
/// whether they run in a process of their own or beside the host (`rally-bench load
/// --bots-beside`).
pub fn play(args: &BotsArgs) -> Result<BotsReport, Box<dyn Error>> {
    if args.servers.is_empty() || args.threads == 0 || args.hz == 0 {
        return Err("bots need --servers, at least one thread, and a frame rate".into());
    }
    let cores = args.cores.clone();
    // Bare bots have no tokens to seal.
    let key = match args.bare {
        Some(_) => TokenKey([0; 32]),
        None => crate::token::key_from_hex(&args.key)?,
    };
    let total = args.rooms * args.clients;
    let mut threads = Vec::new();
    for thread in 0..args.threads as u64 {
        let mine: Vec<u64> = (0..total).filter(|c| c % args.threads as u64 == thread).collect();
        let (args, key, cores) = (args.clone(), key.clone(), cores.clone());
        threads.push(std::thread::spawn(move || -> Outcome {
            if !cores.is_empty() {
                rally_driver::cpu::pin_current_thread(&cores)?;
            }
            let mut part = match args.bare {
                Some(bytes) => super::bare::serve_bots(&args, bytes, &mine),
                None => serve(&args, &key, &mine),
            }?;
            part.cpu_us = rally_driver::cpu::thread_cpu_us();
            Ok(part)
        }));
    }
    let mut report = BotsReport { clients: total, ..BotsReport::default() };
    for thread in threads {
        let part =
            thread.join().map_err(|_| "a bots thread panicked")?.map_err(|e| e.to_string())?;
        report.add(&part);
    }
    Ok(report)
}

type Outcome = Result<BotsReport, Box<dyn Error + Send + Sync>>;

/// One thread's bots: connect, then play each bot's frames on its schedule.
fn serve(args: &BotsArgs, key: &TokenKey, clients: &[u64]) -> Outcome {
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    let frame = Duration::from_secs(1) / args.hz;
    let clock = rally_driver::Clock::start();
    let mut bots = Vec::with_capacity(clients.len());
    for (k, &client) in clients.iter().enumerate() {
        let room = client / args.clients;
        let server = args.servers[(room % args.servers.len() as u64) as usize];
        let token =
            rally_driver::backend::issue(key, args.protocol, client, room, vec![server], 600)?;
        let mut driver = UdpDriver::bind("127.0.0.1:0", config.clone())?;
        driver.connect_with_token(token)?;
        // Frames spread evenly over the frame time.
        let offset = frame.mul_f64(k as f64 / clients.len().max(1) as f64);
        let next_frame = clock.now() + offset;
        // Bots show nothing: interpolation would cost them more than everything else.
        let config = ClientConfig { interpolate: false, ..Default::default() };
        let session = ClientSession::new(config).expect("a valid client config");
        bots.push(Bot { index: client, driver, session, next_frame, inputs: 0, ended: false });
    }
    let mut report = BotsReport::default();
    let end = clock.now() + Duration::from_secs_f64(args.seconds);
    rally_driver::precise_timers();
    // Bots' frames are spread evenly and share one period, so they come due in index order:
    // the loop serves them in turn, never scanning them all.
    let mut turn = 0;
    while clock.now() < end && !bots.is_empty() {
        let bot = &mut bots[turn];
        let now = clock.now();
        // The thread sleeps to the next frame; frames due within `SAME_WAKE` of it run in the
        // same wake-up (a sleep per frame would cost more than the frame).
        if let Some(sleep) = sleep_before(bot.next_frame.saturating_duration_since(now)) {
            std::thread::sleep(sleep);
            continue;
        }
        if now.saturating_duration_since(bot.next_frame) > frame {
            report.frames_late += 1;
            bot.next_frame = now;
        }
        bot.frame()?;
        report.frames += 1;
        bot.next_frame += frame;
        turn = (turn + 1) % bots.len();
    }
    for bot in &mut bots {
        report.joined += u64::from(bot.session.client_id().is_some());
        report.snapshots += bot.session.stats().snapshots;
        report.inputs += bot.inputs;
        report.disconnected += u64::from(bot.ended);
        if let Some(stats) = bot
            .session
            .connection()
            .and_then(|c| bot.driver.endpoint().connection(c))
            .map(|c| c.stats())
        {
            report.datagrams_sent += stats.packets_sent;
            report.bytes_sent += stats.bytes_sent;
            report.datagrams_received += stats.packets_received;
            report.bytes_received += stats.bytes_received;
        }
    }
    Ok(report)
}

impl Bot {
    /// A frame: an input on its circle, sent, and whatever arrived taken in.
    fn frame(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
        if self.ended {
            return Ok(());
        }
        if self.session.client_id().is_some() {
            let now = self.driver.now();
            // The frame shows what arrived (its latency meter counts the inputs it reflects).
            self.session.present(now);
            let input = HandInput::on_circle(self.index as usize, now.as_secs_f64());
            self.session.send_input(now, input);
            self.session.transmit(self.driver.endpoint());
            self.inputs += 1;
        }
        let clock = self.driver.clock();
        let (session, ended) = (&mut self.session, &mut self.ended);
        self.driver.pump(|endpoint, connection, event| match event {
            Event::Connected => {
                session.connected(connection);
                session.transmit(endpoint);
            }
            Event::Message { channel, payload } => session.receive(clock.now(), channel, &payload),
            Event::Disconnected { .. } => {
                *ended = true;
                session.disconnected();
            }
        })?;
        // The events are counted in the session's stats; nothing else reads them.
        while self.session.poll_event().is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{sleep_before, SAME_WAKE};
    use std::time::Duration;

    #[test]
    fn a_bots_thread_sleeps_to_the_next_frame_and_runs_the_frames_due_at_once() {
        // Goal: the thread never wakes before a frame (no early frames beyond the same-wake
        // slack), and frames already due run without a sleep.
        let us = Duration::from_micros;
        assert_eq!(sleep_before(us(780)), Some(us(780)), "to the frame, not before it");
        assert_eq!(sleep_before(SAME_WAKE + us(1)), Some(SAME_WAKE + us(1)));
        assert_eq!(sleep_before(SAME_WAKE), None, "due within the slack: run now");
        assert_eq!(sleep_before(Duration::ZERO), None);
    }
}

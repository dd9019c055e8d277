//! `rally demo`: a room on this machine with bot players swinging paddles, over real UDP on
//! loopback, printing live what a player would feel: total latency against the latency model,
//! RTT, and the server's tick time. The web dashboard comes later; today the demo is headless.

use crate::game::Paddles;
use rally_driver::UdpDriver;
use rally_engine::{connection_config, ClientConfig, ClientSession, LatencyModel, LatencySample};
use rally_engine::{Pipeline, Room, RoomConfig};
use rally_proto::{EndpointConfig, Event, Instant};
use rally_sim::sandbox::HandInput;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Options of `rally demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Print the figures to the terminal (the only mode until the dashboard lands).
    #[arg(long)]
    pub headless: bool,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Bot players.
    #[arg(long, default_value_t = 4)]
    pub bots: usize,
    /// Server ticks and client frames per second.
    #[arg(long, default_value_t = 120)]
    pub hz: u32,
    /// `fast`, `greedy` or `naive`.
    #[arg(long, default_value = "fast")]
    pub pipeline: String,
}

/// How long before each tick or frame a thread stops sleeping and polls.
const SPIN: Duration = Duration::from_millis(1);

/// What the threads tell the printer.
pub(crate) enum Report {
    /// A bot's latency samples and its connection's RTT since its last report.
    Bot { samples: Vec<LatencySample>, rtt: Duration },
    /// The server's tick times (us) since its last report.
    Server { ticks_us: Vec<f64>, clients: usize },
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<(), Box<dyn Error>> {
    let pipeline = match args.pipeline.as_str() {
        "fast" => Pipeline::Fast,
        "greedy" => Pipeline::Greedy,
        "naive" => Pipeline::Naive,
        other => return Err(format!("--pipeline {other}: use fast, greedy or naive").into()),
    };
    if !(10..=1000).contains(&args.hz) || args.bots == 0 || args.bots > 64 {
        return Err("--hz must be 10 to 1000 and --bots 1 to 64, such as --hz 120 --bots 4".into());
    }
    if !args.headless {
        println!("the web dashboard is not built yet: running headless");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (reports, received) = mpsc::channel();
    let config = EndpointConfig { connection: connection_config(), ..Default::default() };
    // The demo is its own backend: a key for this run, a token for each bot.
    let key = crate::token::random_key()?;
    let protocol = crate::token::LOCAL_PROTOCOL_ID;
    let server = UdpDriver::bind_secure("127.0.0.1:0", config.clone(), key.clone(), protocol)?;
    let address = server.local_addr()?;
    println!("room on {address}: {} bots at {} Hz, {} pipeline", args.bots, args.hz, args.pipeline);
    let mut threads = Vec::new();
    let (hz, stopped, to) = (args.hz, stop.clone(), reports.clone());
    threads.push(std::thread::spawn(move || serve(server, hz, pipeline, 1, &stopped, &to)));
    for bot in 0..args.bots {
        let (stopped, to, config) = (stop.clone(), reports.clone(), config.clone());
        let defer = pipeline == Pipeline::Naive;
        let token = crate::token::issue_local(&key, bot as u64, vec![address])?;
        threads
            .push(std::thread::spawn(move || play(bot, token, config, hz, defer, &stopped, &to)));
    }
    drop(reports);
    print_live(&received, args.duration, hz);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let outcome = thread.join().map_err(|_| "a demo thread panicked")?;
        outcome.map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(crate) type Outcome = Result<(), Box<dyn Error + Send + Sync>>;

/// The server: routes datagrams to the room on arrival, ticks it at `hz`, times each tick.
pub(crate) fn serve(
    mut driver: UdpDriver,
    hz: u32,
    pipeline: Pipeline,
    chain_depth: usize,
    stop: &AtomicBool,
    reports: &mpsc::Sender<Report>,
) -> Outcome {
    let config = RoomConfig { tick_rate: hz, pipeline, ..RoomConfig::default() };
    let mut room = Room::new(config, Paddles::new(chain_depth), 1);
    let mut game = std::mem::replace(room.simulation_mut(), Paddles::new(chain_depth));
    game.set_table(room.world_mut()).map_err(|e| e.to_string())?;
    *room.simulation_mut() = game;
    let clock = driver.clock();
    let dt = room.config().dt();
    // Ticks start on time: sleep, then poll the last millisecond.
    driver.set_spin(SPIN);
    let mut next_tick = driver.now();
    let mut ticks_us = Vec::new();
    let mut last_report = driver.now();
    while !stop.load(Ordering::Relaxed) {
        let wait = next_tick.saturating_duration_since(driver.now());
        driver.run_for(wait, |endpoint, connection, event| {
            match event {
                Event::Connected => room.accept(connection),
                Event::Message { channel, payload } => {
                    room.receive(clock.now(), connection, channel, &payload)
                }
                Event::Disconnected { reason } => {
                    room.disconnected(clock.now(), connection, reason)
                }
            }
            // What the room answered (the fast path's poses, say) goes now, not at the tick.
            room.transmit(endpoint);
        })?;
        let started = driver.now();
        room.tick(started, driver.endpoint());
        ticks_us.push((driver.now() - started).as_secs_f64() * 1e6);
        next_tick += dt;
        if driver.now() - last_report >= Duration::from_secs(1) {
            last_report = driver.now();
            let clients = room.clients().count();
            let _ =
                reports.send(Report::Server { ticks_us: std::mem::take(&mut ticks_us), clients });
        }
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
    let mut session: ClientSession<HandInput, ()> = ClientSession::new(client);
    let frame = Duration::from_secs(1) / hz;
    let mut next_frame = driver.now();
    let mut last_report = driver.now();
    while !stop.load(Ordering::Relaxed) {
        let wait = next_frame.saturating_duration_since(driver.now());
        driver.run_for(wait, |_, connection, event| match event {
            Event::Connected => session.connected(connection),
            Event::Message { channel, payload } => session.receive(clock.now(), channel, &payload),
            Event::Disconnected { .. } => session.disconnected(),
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
    let _ = reports.send(Report::Bot { samples, rtt });
}

/// Prints one line a second until `duration` passes (or forever).
#[allow(clippy::disallowed_methods)] // the demo runs on the OS clock
fn print_live(received: &mpsc::Receiver<Report>, duration: Option<f64>, hz: u32) {
    let started = std::time::Instant::now();
    let (mut latencies, mut ticks, mut rtts, mut clients) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut last_ticks = crate::bench::stats::Summary::default();
    let mut printed = 0u64;
    loop {
        let elapsed = started.elapsed().as_secs_f64();
        if duration.is_some_and(|d| elapsed >= d) {
            return;
        }
        match received.recv_timeout(Duration::from_millis(100)) {
            Ok(Report::Bot { samples, rtt }) => {
                latencies.extend(samples);
                rtts.push(rtt.as_secs_f64() * 1e3);
            }
            Ok(Report::Server { ticks_us, clients: c }) => {
                ticks.extend(ticks_us);
                clients = c;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if elapsed as u64 > printed {
            printed = elapsed as u64;
            let (latencies, rtts) = (&mut latencies, &mut rtts);
            print_line(printed, clients, latencies, rtts, &mut ticks, &mut last_ticks, hz);
        }
    }
}

fn print_line(
    second: u64,
    clients: usize,
    samples: &mut Vec<LatencySample>,
    rtts: &mut Vec<f64>,
    ticks: &mut Vec<f64>,
    last_ticks: &mut crate::bench::stats::Summary,
    hz: u32,
) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let totals: Vec<f64> = samples.iter().map(|s| ms(s.total)).collect();
    let l = crate::bench::stats::summary(&totals);
    let t = crate::bench::stats::summary(ticks);
    let t = if ticks.is_empty() { *last_ticks } else { t };
    *last_ticks = t;
    let rtt = rtts.iter().sum::<f64>() / rtts.len().max(1) as f64;
    let dt = Duration::from_secs(1) / hz;
    // Each input against the model of the round trip it saw, as the meter split it.
    let fallback = Duration::from_secs_f64(rtt / 1000.0);
    let models: Vec<LatencyModel> = samples
        .iter()
        .map(|s| LatencyModel::new(s.round_trip.unwrap_or(fallback), dt, dt))
        .collect();
    let within = samples
        .iter()
        .zip(&models)
        .filter(|(s, m)| m.contains(s.total, Duration::from_millis(1)))
        .count();
    let n = samples.len().max(1) as f64;
    let mean =
        |f: &dyn Fn(&LatencyModel) -> Duration| models.iter().map(|m| ms(f(m))).sum::<f64>() / n;
    let hold = samples.iter().map(|s| ms(s.server_hold.unwrap_or_default())).sum::<f64>() / n;
    println!(
        "{second:>4} s  {clients} clients  total latency mean {:.1} p99 {:.1} max {:.1} ms, \
         {:.0}% within model ({:.1} to {:.1})  RTT {rtt:.2} ms  server hold {hold:.2} ms  \
         tick {:.0} us mean, {:.0} max",
        l.mean,
        l.p99,
        l.max,
        within as f64 / n * 100.0,
        mean(&|m| m.best),
        mean(&|m| m.worst),
        t.mean,
        t.max
    );
    samples.clear();
    rtts.clear();
    ticks.clear();
}

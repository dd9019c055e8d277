//! The kernel's floor under the W3 load: the same datagrams, as many and as large, through the
//! same loopback sockets and the same batched syscalls, with no protocol, no encryption and no
//! game. A host thread on the worker's core takes in every bot's inputs and, at each room's
//! tick (spread over the tick as the host spreads them, and ticked up to the host's tick window
//! early to share a wake-up, as the host does), sends each of the room's clients one
//! datagram of a snapshot's size; bots (`rally-bench peer bots --bare`) send an input's worth per
//! frame and count what comes back. Its CPU per room-tick is what any UDP server with this tick
//! structure pays on this machine before doing anything of its own. On loopback the sender's
//! syscall also delivers each datagram into the receiving socket, work a network card would
//! leave to the receiving machine: the floor counts it as the host's measure does.

use super::bots::{BotsArgs, BotsReport};
use super::{bot_args, Bots, Plan, CLIENTS, TICK_HZ};
use rally_driver::batch::Batch;
use rally_driver::cpu::{pin_current_thread, thread_cpu_us};
use rally_driver::Clock;
use rally_proto::Instant;
use serde::Serialize;
use std::collections::HashMap;
use std::error::Error;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Datagrams per batched syscall at most (the host's are 32; a floor may batch more).
const BATCH: usize = 64;
/// The window's phases, as the measuring thread tells the host thread.
const WARMUP: u8 = 0;
const WINDOW: u8 = 1;
const STOP: u8 = 2;

/// What the floor measured.
#[derive(Debug, Clone, Serialize)]
pub struct BareStep {
    pub rooms: u64,
    /// The host thread's CPU (getrusage) per room-tick over the window, microseconds.
    pub cpu_us_per_room_tick: f64,
    /// Of it, the time in receive syscalls and in send syscalls, timed on the clock around
    /// each call as the host's worker times its `receive` and `send` scopes; microseconds a
    /// room-tick. The rest of the CPU is the loop and its wake-ups.
    pub receive_us_per_room_tick: f64,
    pub send_us_per_room_tick: f64,
    /// Bytes of each datagram in (an input) and out (a snapshot): the Rally step's means.
    pub input_bytes: usize,
    pub snapshot_bytes: usize,
    /// Datagrams the host thread took in and sent per room-tick.
    pub datagrams_in_per_room_tick: f64,
    pub datagrams_out_per_room_tick: f64,
    /// The host thread's sleeps (each ends in a wake-up) per tick period: the worker's
    /// `wakeups_per_worker_tick` for the same rooms.
    pub wakeups_per_tick_period: f64,
    /// What the bare bots saw.
    pub bots: BotsReport,
}

/// The host thread's counts over the window.
#[derive(Debug, Default)]
struct Counts {
    cpu_us: u64,
    room_ticks: u64,
    datagrams_in: u64,
    datagrams_out: u64,
    sleeps: u64,
    /// The window's length on the thread's clock, microseconds.
    wall_us: u64,
    /// Nanoseconds in receive syscalls and in send syscalls.
    receive_ns: u64,
    send_ns: u64,
}

/// Runs the floor for `rooms` rooms with datagrams of `sizes` (input, snapshot) bytes; the host
/// thread on `core` (if any), ticking a room up to `window` early as the host does
/// (`HostConfig::tick_window`), the bots on `bot_cores` with `bot_threads` threads.
pub fn measure(
    rooms: u64,
    sizes: (usize, usize),
    plan: &Plan,
    (core, window): (Option<usize>, Duration),
    (bot_threads, bot_cores): (usize, &[usize]),
    beside: bool,
) -> Result<BareStep, Box<dyn Error>> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_nonblocking(true)?;
    let address = socket.local_addr()?;
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let host = {
        let phase = phase.clone();
        std::thread::Builder::new()
            .name("rally-bare-host".into())
            .spawn(move || serve_host(&socket, (rooms, window), sizes.1, core, &phase))?
    };
    let seconds = (plan.warmup + plan.window).as_secs_f64() + 1.0;
    // Bare bots need no key or protocol; the command line asks for both.
    let args = BotsArgs {
        key: "00".into(),
        servers: vec![address],
        bare: Some(sizes.0),
        ..bot_args(rooms, bot_threads, bot_cores, seconds)
    };
    let bots = Bots::start(args, beside)?;
    std::thread::sleep(plan.warmup);
    phase.store(WINDOW, Ordering::Release);
    std::thread::sleep(plan.window);
    phase.store(STOP, Ordering::Release);
    let counts = host.join().map_err(|_| "the bare host thread panicked")??;
    let bots = bots.finish()?;
    let ticks = counts.room_ticks.max(1) as f64;
    Ok(BareStep {
        rooms,
        cpu_us_per_room_tick: counts.cpu_us as f64 / ticks,
        receive_us_per_room_tick: counts.receive_ns as f64 / 1e3 / ticks,
        send_us_per_room_tick: counts.send_ns as f64 / 1e3 / ticks,
        input_bytes: sizes.0,
        snapshot_bytes: sizes.1,
        datagrams_in_per_room_tick: counts.datagrams_in as f64 / ticks,
        datagrams_out_per_room_tick: counts.datagrams_out as f64 / ticks,
        wakeups_per_tick_period: counts.sleeps as f64
            / (counts.wall_us.max(1) as f64 / 1e6 * f64::from(TICK_HZ)),
        bots,
    })
}

/// The host thread: rooms' ticks on their deadlines, everything that arrived read in batches at
/// each wake (as the host's batched loop does), until told to stop; counts over the window.
fn serve_host(
    socket: &UdpSocket,
    (rooms, window): (u64, Duration),
    snapshot_bytes: usize,
    core: Option<usize>,
    phase: &AtomicU8,
) -> io::Result<Counts> {
    if let Some(core) = core {
        pin_current_thread(&[core])?;
    }
    rally_driver::precise_timers();
    let clock = Clock::start();
    let tick = Duration::from_secs(1) / TICK_HZ;
    // As the host's worker bounds it: at most a quarter of a tick early.
    let window = window.min(tick / 4);
    let start = clock.now();
    // Ticks spread over the tick by the golden ratio, as the host opens rooms.
    let mut next: Vec<Instant> =
        (0..rooms).map(|k| start + tick.mul_f64((k as f64 * 0.618_033_988_75).fract())).collect();
    // A batch slot holds at most this much (far above Rally's MTU).
    let snapshot_bytes = snapshot_bytes.min(rally_driver::batch::SLOT_BYTES);
    let mut clients = Clients::new(rooms as usize * CLIENTS);
    let (mut inbound, mut outbound) = (Batch::new(BATCH), Batch::new(BATCH));
    let mut counts = Counts::default();
    let mut measuring = false;
    loop {
        match phase.load(Ordering::Acquire) {
            WINDOW if !measuring => {
                measuring = true;
                let wall_us = clock.now().as_nanos() / 1000;
                counts = Counts { cpu_us: thread_cpu_us(), wall_us, ..Counts::default() };
            }
            STOP => {
                counts.cpu_us = thread_cpu_us().saturating_sub(counts.cpu_us);
                counts.wall_us = (clock.now().as_nanos() / 1000).saturating_sub(counts.wall_us);
                return Ok(counts);
            }
            _ => {}
        }
        let due = next.iter().copied().min().unwrap_or(start);
        let wait = due.saturating_duration_since(clock.now());
        if !wait.is_zero() {
            std::thread::sleep(wait.min(Duration::from_millis(20)));
            counts.sleeps += 1;
        }
        let started = clock.now();
        counts.datagrams_in += receive_all(socket, &mut inbound, &mut clients)?;
        let now = clock.now();
        counts.receive_ns += (now - started).as_nanos() as u64;
        for (room, at) in next.iter_mut().enumerate() {
            // Due, or due within the window: ticked in this wake-up, as the host's worker does.
            if *at > now + window {
                continue;
            }
            *at += tick;
            counts.room_ticks += 1;
            let members = clients.of_room(room);
            for (k, to) in members.iter().enumerate() {
                outbound.slot_mut(k)[..snapshot_bytes].fill(0);
                outbound.set(k, snapshot_bytes, *to);
            }
            let started = clock.now();
            counts.datagrams_out += send_all(socket, &mut outbound, members.len())?;
            counts.send_ns += (clock.now() - started).as_nanos() as u64;
        }
    }
}

/// Reads every datagram waiting, a batch per syscall; learns new clients' addresses.
fn receive_all(socket: &UdpSocket, batch: &mut Batch, clients: &mut Clients) -> io::Result<u64> {
    let mut read = 0;
    loop {
        let count = match batch.receive(socket) {
            Ok(count) => count,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        for k in 0..count {
            if let (Some(from), _) = batch.datagram(k) {
                clients.learn(from);
            }
        }
        read += count as u64;
        if count < batch.slots() {
            return Ok(read);
        }
    }
}

/// Sends the batch's first `count` datagrams; a full socket buffer drops the rest, as it
/// would a game's.
fn send_all(socket: &UdpSocket, batch: &mut Batch, count: usize) -> io::Result<u64> {
    let mut from = 0;
    while from < count {
        match batch.send(socket, from, count) {
            Ok(0) => from += 1,
            Ok(sent) => from += sent,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(from as u64),
            Err(e) => return Err(e),
        }
    }
    Ok(count as u64)
}

/// Clients in the order they first wrote: the first `CLIENTS` are room 0, and so on, up to a
/// bound (datagrams from anyone past it are read and dropped).
struct Clients {
    index: HashMap<SocketAddr, usize>,
    addresses: Vec<SocketAddr>,
    max: usize,
}

impl Clients {
    fn new(max: usize) -> Self {
        Self { index: HashMap::new(), addresses: Vec::new(), max }
    }

    fn learn(&mut self, from: SocketAddr) {
        if self.addresses.len() < self.max && !self.index.contains_key(&from) {
            self.index.insert(from, self.addresses.len());
            self.addresses.push(from);
        }
    }

    fn of_room(&self, room: usize) -> &[SocketAddr] {
        let first = (room * CLIENTS).min(self.addresses.len());
        let last = (first + CLIENTS).min(self.addresses.len());
        &self.addresses[first..last]
    }
}

/// The bare bots of one thread: each a UDP socket connected to the host, sending `bytes` per
/// frame on its own schedule (spread over the frame) and counting what comes back.
pub fn serve_bots(
    args: &BotsArgs,
    bytes: usize,
    clients: &[u64],
) -> Result<BotsReport, Box<dyn Error + Send + Sync>> {
    let server = *args.servers.first().ok_or("bare bots need --servers")?;
    let frame = Duration::from_secs(1) / args.hz;
    let clock = Clock::start();
    let mut sockets = Vec::with_capacity(clients.len());
    for _ in clients {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.connect(server)?;
        socket.set_nonblocking(true)?;
        sockets.push(socket);
    }
    let input = vec![0u8; bytes];
    let mut buf = vec![0u8; 2048];
    let mut report = BotsReport::default();
    let mut heard = vec![false; sockets.len()];
    let start = clock.now();
    let end = start + Duration::from_secs_f64(args.seconds);
    let mut frames: u64 = 0;
    rally_driver::precise_timers();
    // One frame per bot per period, in turn, each at its offset in the period.
    while clock.now() < end && !sockets.is_empty() {
        let turn = (frames % sockets.len() as u64) as usize;
        let period = frames / sockets.len() as u64;
        let offset = frame.mul_f64(turn as f64 / sockets.len() as f64);
        let at = start + frame * period as u32 + offset;
        let now = clock.now();
        if let Some(sleep) = super::bots::sleep_before(at.saturating_duration_since(now)) {
            std::thread::sleep(sleep);
            continue;
        }
        report.frames_late += u64::from(now.saturating_duration_since(at) > frame);
        let socket = &sockets[turn];
        if socket.send(&input).is_ok() {
            report.inputs += 1;
            report.datagrams_sent += 1;
            report.bytes_sent += bytes as u64;
        }
        while let Ok(len) = socket.recv(&mut buf) {
            report.datagrams_received += 1;
            report.bytes_received += len as u64;
            heard[turn] = true;
        }
        frames += 1;
    }
    report.frames = frames;
    report.snapshots = report.datagrams_received;
    report.joined = heard.iter().filter(|h| **h).count() as u64;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bare_bot_is_answered_by_its_rooms_ticks() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        socket.set_nonblocking(true).expect("non-blocking");
        let server = socket.local_addr().expect("bound");
        // The window opens at once: everything the host does is counted.
        let phase = Arc::new(AtomicU8::new(WINDOW));
        let host = {
            let phase = phase.clone();
            let rooms = (2, rally_driver::host::TICK_WINDOW_DEFAULT);
            std::thread::spawn(move || serve_host(&socket, rooms, 300, None, &phase))
        };
        let args = BotsArgs {
            key: String::new(),
            protocol: 0,
            servers: vec![server],
            rooms: 2,
            clients: CLIENTS as u64,
            hz: TICK_HZ,
            threads: 1,
            cores: Vec::new(),
            seconds: 0.5,
            bare: Some(80),
        };
        let clients: Vec<u64> = (0..2 * CLIENTS as u64).collect();
        let bots = serve_bots(&args, 80, &clients).expect("the bots ran");
        phase.store(STOP, Ordering::Release);
        let counts = host.join().expect("the host thread").expect("the host ran");
        assert_eq!(bots.joined, 2 * CLIENTS as u64, "every bot heard from its room");
        assert_eq!(bots.bytes_received, 300 * bots.datagrams_received, "snapshot-sized replies");
        assert!(counts.room_ticks > 0 && counts.datagrams_in > 0);
        // Between its rooms' ticks the host sleeps: each sleep is a wake-up the report counts.
        assert!(counts.sleeps > 0 && counts.wall_us > 0);
        // The syscalls are timed, and within the window's wall time.
        assert!(counts.receive_ns > 0 && counts.send_ns > 0);
        assert!(counts.receive_ns + counts.send_ns < counts.wall_us * 1000);
        // Each tick answers at most the room's clients.
        assert!(counts.datagrams_out <= counts.room_ticks * CLIENTS as u64);
    }
}

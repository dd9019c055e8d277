//! `rally-bench count --cold`: what the server endpoint's receive and send paths cost when
//! their connections are out of the core's caches, as at 32 rooms a worker; the receive path
//! both with and without each batch's connections asked for first ([`Endpoint::prefetch`]).
//!
//! The count's callgrind model cannot say this: it has no prefetcher, ignores the hints, and
//! counts a line the core fetched ahead as missed all the same. Nor can `rally-bench load`: a
//! few microseconds a room-tick are inside its run-to-run spread on this machine. So this
//! times the two paths alone, many times over, each both ways alternated round by round on
//! the same endpoint.
//!
//! The workload is the reference room's traffic on the protocol layer alone (no rooms): 320
//! sealed connections, each client sending a 60-byte message a tick (an input's size) and the
//! server 500 bytes to each (a snapshot's), which the clients ack in their next datagrams.
//! Each round:
//! - **receive**: a batch of 32 datagrams from clients picked at random (a worker's
//!   `recvmmsg` read at 32 rooms brings about 27) goes to the endpoint, prefetched first or
//!   not; the rest of the tick's datagrams went in untimed before it;
//! - **send**: one room's 10 clients (picked at random) get their 500 bytes, queued and
//!   sealed as a room's transmit and the worker's loop do; in alternate rounds with a room's
//!   two hints: the connections' lines asked for 5 us ahead, untimed, as a room asks before
//!   it builds its snapshots, and the lines behind them just before the messages are queued.
//!
//! Before each, a buffer larger than the core's second-level cache is swept (`swept`), so
//! that the connections' lines are where a worker's other rooms leave them: in the shared
//! third level, or (on a machine whose third level other tenants share) further. The warm
//! rows skip the sweep. The driver's clock is read around the timed part only; the figures
//! are nanoseconds a datagram.

use super::count::{client_addr, harness_client, harness_server};
use rally_engine::{STATE, UNRELIABLE};
use rally_proto::{ConnectionHandle, Endpoint, Event, Instant};
use serde::Serialize;
use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

/// Clients (10 per room at 32 rooms).
const CLIENTS: u64 = 320;
/// Datagrams a measured batch hands over.
const BATCH: usize = 32;
/// Measured batches each way.
const BATCHES: usize = 400;
/// How long before a hinted send its lines are asked for: less than a reference room's
/// snapshot building, which a room's request precedes (8-10 us a room-tick in round 23's
/// load runs).
const HINT_LEAD: Duration = Duration::from_micros(5);

/// One way of handling a batch, timed.
#[derive(Debug, Clone, Serialize)]
pub struct PathCost {
    /// The path, and whether its connections were prefetched.
    pub how: &'static str,
    /// Whether the caches were swept before each batch.
    pub cold: bool,
    pub batches: usize,
    /// Nanoseconds a datagram, over each batch.
    pub min_ns: f64,
    pub p50_ns: f64,
    pub mean_ns: f64,
    pub p90_ns: f64,
}

/// The server's endpoint and its clients, connected, each having heard from the server.
struct Traffic {
    server: Endpoint,
    server_addr: SocketAddr,
    clients: Vec<(Endpoint, ConnectionHandle, SocketAddr)>,
    /// The server's handle of each client, by client.
    to_client: Vec<Option<ConnectionHandle>>,
    now: Instant,
    buf: Vec<u8>,
    /// The server's datagrams of a measured send, copied out.
    out: Vec<(SocketAddr, Vec<u8>)>,
}

impl Traffic {
    fn new() -> Result<Self, Box<dyn Error>> {
        let server_addr: SocketAddr = "10.0.0.2:7777".parse()?;
        let (_, server) = harness_server(server_addr, CLIENTS);
        let clients = (0..CLIENTS)
            .map(|index| {
                let (endpoint, handle) = harness_client(index, index / 10, server_addr);
                (endpoint, handle, client_addr(index))
            })
            .collect();
        let mut traffic = Self {
            server,
            server_addr,
            clients,
            to_client: vec![None; CLIENTS as usize],
            now: Instant::ZERO,
            buf: vec![0; 2048],
            out: Vec::new(),
        };
        // Handshakes, then enough ticks for every connection's acks and timers to settle.
        for _ in 0..64 {
            let sent = traffic.clients_send(false);
            for (from, bytes) in &sent {
                traffic.server.handle_datagram(traffic.now, *from, bytes);
            }
            traffic.server_turn();
        }
        let connected = traffic.to_client.iter().filter(|h| h.is_some()).count();
        if connected < CLIENTS as usize {
            return Err(format!("{connected} of {CLIENTS} clients connected").into());
        }
        Ok(traffic)
    }

    /// The next tick: every client's datagrams (a 60-byte message each, once `with_message`).
    fn clients_send(&mut self, with_message: bool) -> Vec<(SocketAddr, Vec<u8>)> {
        self.now += Duration::from_secs(1) / 128;
        let (now, mut out) = (self.now, Vec::new());
        for (endpoint, handle, addr) in &mut self.clients {
            if with_message {
                // A full send queue only drops the message; the datagram still carries acks.
                let _ = endpoint.send(*handle, UNRELIABLE, &[7; 60]);
            }
            endpoint.handle_timeout(now);
            while let Some(t) = endpoint.poll_transmit(now, &mut self.buf) {
                out.push((*addr, self.buf[..t.len].to_vec()));
            }
        }
        out
    }

    /// The server's events drained, 500 bytes queued to each client, everything it sends
    /// handed to the clients.
    fn server_turn(&mut self) {
        let now = self.now;
        while let Some((handle, event)) = self.server.poll_event() {
            if let (Event::Connected, Some(index)) =
                (&event, self.server.peer(handle).map(client_of))
            {
                self.to_client[index] = Some(handle);
            }
        }
        for handle in self.to_client.iter().flatten() {
            let _ = self.server.send(*handle, STATE, &[9; 500]);
        }
        self.server.handle_timeout(now);
        while let Some(t) = self.server.poll_transmit(now, &mut self.buf) {
            if let Some((client, ..)) = self.clients.get_mut(client_of(t.destination)) {
                client.handle_datagram(now, self.server_addr, &self.buf[..t.len]);
                while client.poll_event().is_some() {}
            }
        }
    }
}

impl Traffic {
    /// Room `room`'s 500 bytes to each of its 10 clients, as a room's transmit hands them over
    /// and the worker seals them: ns a datagram. What it sent goes to the clients after. When
    /// `hinted`, the room's two hints come first, as a room asks for them: the connections'
    /// lines (`Endpoint::prefetch_connection`, untimed) `HINT_LEAD` ahead, as the room's
    /// snapshot building gives them, then the lines behind those ([`Endpoint::prefetch_queue`],
    /// timed) before the first message is queued.
    fn send_room(&mut self, room: usize, clock: &rally_driver::Clock, hinted: bool) -> f64 {
        let handles: Vec<ConnectionHandle> =
            self.to_client[room * 10..room * 10 + 10].iter().flatten().copied().collect();
        if hinted {
            for handle in &handles {
                self.server.prefetch_connection(*handle);
            }
            let asked = clock.now();
            while clock.now() - asked < HINT_LEAD {
                std::hint::spin_loop();
            }
        }
        let (now, started) = (self.now, clock.now());
        if hinted {
            for handle in &handles {
                self.server.prefetch_queue(*handle, STATE);
            }
        }
        for handle in &handles {
            let _ = self.server.send(*handle, STATE, &[9; 500]);
        }
        // Copied out into kept buffers (a socket's send batch), handed to the clients untimed.
        let mut sent = 0;
        while let Some(t) = self.server.poll_transmit(now, &mut self.buf) {
            if sent == self.out.len() {
                self.out.push((t.destination, Vec::with_capacity(2048)));
            }
            let (to, bytes) = &mut self.out[sent];
            *to = t.destination;
            bytes.clear();
            bytes.extend_from_slice(&self.buf[..t.len]);
            sent += 1;
        }
        let elapsed = clock.now() - started;
        for (to, bytes) in &self.out[..sent] {
            if let Some((client, ..)) = self.clients.get_mut(client_of(*to)) {
                client.handle_datagram(now, self.server_addr, bytes);
                while client.poll_event().is_some() {}
            }
        }
        elapsed.as_nanos() as f64 / sent.max(1) as f64
    }
}

/// The client at `addr`: the inverse of [`client_addr`].
fn client_of(addr: SocketAddr) -> usize {
    match addr.ip() {
        std::net::IpAddr::V4(ip) => usize::from(ip.octets()[2]) << 8 | usize::from(ip.octets()[3]),
        std::net::IpAddr::V6(_) => usize::MAX,
    }
}

/// Times `BATCHES` rounds each way, alternated, cold (`sweep` bytes swept before each) or warm:
/// a batch received, then one room's datagrams sent.
pub fn measure(cold: bool, sweep: usize) -> Result<[PathCost; 4], Box<dyn Error>> {
    let mut traffic = Traffic::new()?;
    let mut sweep = vec![0u8; sweep];
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % below as u64) as usize
    };
    // Received one by one, received prefetched, sent, sent with its lines asked for ahead.
    let mut times: [Vec<f64>; 4] = Default::default();
    let clock = rally_driver::Clock::start();
    let sweep_if_cold = |sweep: &mut Vec<u8>| {
        if cold {
            for (i, byte) in sweep.iter_mut().enumerate().step_by(64) {
                *byte = byte.wrapping_add(i as u8);
            }
        }
    };
    for round in 0..BATCHES * 2 {
        let hinted = round % 2 == 1;
        let mut sent = traffic.clients_send(true);
        // A random batch of the tick's datagrams is measured; the rest go in untimed.
        for i in (1..sent.len()).rev() {
            sent.swap(i, next(i + 1));
        }
        let (batch, rest) = sent.split_at(BATCH.min(sent.len()));
        let now = traffic.now;
        for (from, bytes) in rest {
            traffic.server.handle_datagram(now, *from, bytes);
        }
        sweep_if_cold(&mut sweep);
        let started = clock.now();
        if hinted {
            for (from, _) in batch {
                traffic.server.prefetch(*from);
            }
        }
        for (from, bytes) in batch {
            traffic.server.handle_datagram(now, *from, bytes);
        }
        let elapsed = (clock.now() - started).as_nanos() as f64 / batch.len() as f64;
        times[usize::from(hinted)].push(elapsed);
        traffic.server_turn();
        sweep_if_cold(&mut sweep);
        let room = next(CLIENTS as usize / 10);
        times[2 + usize::from(hinted)].push(traffic.send_room(room, &clock, hinted));
    }
    std::hint::black_box(&sweep);
    let cost = |how, mut ns: Vec<f64>| {
        ns.sort_by(f64::total_cmp);
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
        PathCost {
            how,
            cold,
            batches: ns.len(),
            min_ns: ns[0],
            p50_ns: at(0.5),
            mean_ns: ns.iter().sum::<f64>() / ns.len() as f64,
            p90_ns: at(0.9),
        }
    };
    let [plain, hinted, sent, sent_hinted] = times;
    Ok([
        cost("received one by one", plain),
        cost("received prefetched", hinted),
        cost("sent", sent),
        cost("sent, asked ahead", sent_hinted),
    ])
}

/// Both paths, cold (`sweep` bytes swept before each batch) and warm, as a table.
pub fn run(sweep: usize) -> Result<Vec<PathCost>, Box<dyn Error>> {
    let mut costs = Vec::new();
    for cold in [true, false] {
        costs.extend(measure(cold, sweep)?);
    }
    println!(
        "the server endpoint's receive path ({BATCH} datagrams a batch, {BATCHES} each way \
         alternated) and send path (a room's 10) over {CLIENTS} sealed connections, swept: \
         {} MiB swept before each; ns a datagram",
        sweep >> 20
    );
    println!("{:<19} {:<6} {:>8} {:>8} {:>8} {:>8}", "how", "caches", "min", "p50", "mean", "p90");
    for c in &costs {
        let caches = if c.cold { "swept" } else { "warm" };
        println!(
            "{:<19} {:<6} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            c.how, caches, c.min_ns, c.p50_ns, c.mean_ns, c.p90_ns
        );
    }
    Ok(costs)
}

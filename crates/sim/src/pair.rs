//! Two endpoints, a link each way, one virtual clock.

use rally_netem::{Link, LinkConfig};
use rally_proto::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};
use std::net::SocketAddr;
use std::time::Duration;

/// Rounds of I/O one [`Pair::drive`] may take before the harness calls it a livelock.
pub const DRIVE_STEPS_MAX: usize = 100_000;

/// A client and a server endpoint joined by two emulated links.
#[derive(Debug)]
pub struct Pair {
    /// The virtual clock.
    pub now: Instant,
    /// The connecting side.
    pub client: Endpoint,
    /// The accepting side.
    pub server: Endpoint,
    /// The client's address as the server sees it.
    pub client_addr: SocketAddr,
    /// The server's address.
    pub server_addr: SocketAddr,
    /// Client to server.
    pub to_server: Link<Vec<u8>>,
    /// Server to client.
    pub to_client: Link<Vec<u8>>,
    /// Events the client's endpoint produced, in order.
    pub client_events: Vec<(ConnectionHandle, Event)>,
    /// Events the server's endpoint produced, in order.
    pub server_events: Vec<(ConnectionHandle, Event)>,
    client_wire_bytes: u64,
    server_wire_bytes: u64,
    buf: Vec<u8>,
}

impl Pair {
    /// A pair with the same endpoint configuration on both sides and `link` both ways; all
    /// randomness derives from `seed`.
    pub fn new(config: EndpointConfig, link: LinkConfig, seed: u64) -> Self {
        Self {
            now: Instant::ZERO,
            client: Endpoint::new(config.clone(), seed.wrapping_mul(3).wrapping_add(1)),
            server: Endpoint::new(config, seed.wrapping_mul(5).wrapping_add(2)),
            client_addr: "10.0.0.1:40000".parse().expect("a valid address"),
            server_addr: "10.0.0.2:7777".parse().expect("a valid address"),
            to_server: Link::new(link, seed.wrapping_mul(7).wrapping_add(3)),
            to_client: Link::new(link, seed.wrapping_mul(11).wrapping_add(4)),
            client_events: Vec::new(),
            server_events: Vec::new(),
            client_wire_bytes: 0,
            server_wire_bytes: 0,
            buf: vec![0; 65_536],
        }
    }

    /// Connects the client and steps until both sides report `Connected` or `timeout` passes;
    /// returns the two handles, or `None` if the handshake did not finish.
    pub fn connect(&mut self, timeout: Duration) -> Option<(ConnectionHandle, ConnectionHandle)> {
        let client = self.client.connect(self.now, self.server_addr);
        let deadline = self.now + timeout;
        loop {
            self.drive();
            let connected = |events: &[(ConnectionHandle, Event)]| {
                events.iter().find(|(_, e)| *e == Event::Connected).map(|(h, _)| *h)
            };
            if let (Some(_), Some(server)) =
                (connected(&self.client_events), connected(&self.server_events))
            {
                return Some((client, server));
            }
            if self.now >= deadline || !self.step_until(deadline) {
                return None;
            }
        }
    }

    /// Handles everything due at `now`: deliveries, timers, transmissions and events, until
    /// nothing more happens at this instant. Panics on a livelock.
    pub fn drive(&mut self) {
        for _ in 0..DRIVE_STEPS_MAX {
            let mut busy = false;
            while let Some(packet) = self.to_server.poll_deliver(self.now) {
                self.server.handle_datagram(self.now, self.client_addr, &packet);
                busy = true;
            }
            while let Some(packet) = self.to_client.poll_deliver(self.now) {
                self.client.handle_datagram(self.now, self.server_addr, &packet);
                busy = true;
            }
            self.client.handle_timeout(self.now);
            self.server.handle_timeout(self.now);
            while let Some(t) = self.client.poll_transmit(self.now, &mut self.buf) {
                self.to_server.send(self.now, self.buf[..t.len].to_vec(), t.len);
                self.client_wire_bytes += t.len as u64;
                busy = true;
            }
            while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf) {
                self.to_client.send(self.now, self.buf[..t.len].to_vec(), t.len);
                self.server_wire_bytes += t.len as u64;
                busy = true;
            }
            while let Some(event) = self.client.poll_event() {
                self.client_events.push(event);
                busy = true;
            }
            while let Some(event) = self.server.poll_event() {
                self.server_events.push(event);
                busy = true;
            }
            if !busy {
                return;
            }
        }
        panic!("livelock: still busy after {DRIVE_STEPS_MAX} rounds at {}", self.now);
    }

    /// The next time anything is scheduled: an endpoint timer or a delivery.
    pub fn next_event_time(&self) -> Option<Instant> {
        [
            self.client.poll_timeout(),
            self.server.poll_timeout(),
            self.to_server.poll_timeout(),
            self.to_client.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Jumps the clock to the next scheduled time (never past `deadline`) and drives; false if
    /// nothing is scheduled before it.
    pub fn step_until(&mut self, deadline: Instant) -> bool {
        let Some(next) = self.next_event_time() else { return false };
        // A timer in the past or now still moves the clock by at least a nanosecond, so that a
        // timer that keeps reporting the same instant cannot stall the simulation.
        let next = next.max(self.now + Duration::from_nanos(1));
        if next > deadline {
            self.now = deadline;
            self.drive();
            return false;
        }
        self.now = next;
        self.drive();
        true
    }

    /// Steps until `deadline`.
    pub fn run_until(&mut self, deadline: Instant) {
        while self.now < deadline && self.step_until(deadline) {}
        if self.now < deadline {
            self.now = deadline;
            self.drive();
        }
    }

    /// Datagram bytes the client has sent into its link.
    pub fn client_wire_bytes(&self) -> u64 {
        self.client_wire_bytes
    }

    /// Datagram bytes the server has sent into its link.
    pub fn server_wire_bytes(&self) -> u64 {
        self.server_wire_bytes
    }

    /// Messages the client received on `channel`, in order.
    pub fn client_messages(&self, channel: u8) -> Vec<&[u8]> {
        messages(&self.client_events, channel)
    }

    /// Messages the server received on `channel`, in order.
    pub fn server_messages(&self, channel: u8) -> Vec<&[u8]> {
        messages(&self.server_events, channel)
    }
}

fn messages(events: &[(ConnectionHandle, Event)], channel: u8) -> Vec<&[u8]> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Message { channel: c, payload } if *c == channel => Some(payload.as_slice()),
            _ => None,
        })
        .collect()
}

//! One server endpoint, several client endpoints, a link each way per client, one virtual
//! clock: the harness for scenarios with more than one connection.

use rally_netem::{Link, LinkConfig};
use rally_proto::{
    ConnectionHandle, Endpoint, EndpointConfig, EndpointRandomness, Event, Instant, Security,
};
use std::net::SocketAddr;
use std::time::Duration;

use crate::VirtualClock;

/// Rounds of I/O one drive may take before the harness calls it a livelock.
pub const DRIVE_STEPS_MAX: usize = 100_000;

/// A client endpoint with its own path to the server.
#[derive(Debug)]
pub struct Client {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its address as the server sees it.
    pub addr: SocketAddr,
    /// Client to server.
    pub up: Link<Vec<u8>>,
    /// Server to client.
    pub down: Link<Vec<u8>>,
    /// Events the client produced, in order.
    pub events: Vec<(ConnectionHandle, Event)>,
    /// The handle of its connection to the server.
    pub handle: Option<ConnectionHandle>,
    /// Datagram bytes it sent into its link.
    pub wire_bytes: u64,
}

/// A server and its clients on one virtual clock.
#[derive(Debug)]
pub struct Net {
    /// The virtual clock.
    pub now: Instant,
    /// The server.
    pub server: Endpoint,
    /// The server's address.
    pub server_addr: SocketAddr,
    /// Events the server produced, in order.
    pub server_events: Vec<(ConnectionHandle, Event)>,
    /// Datagram bytes the server sent into its links.
    pub server_wire_bytes: u64,
    /// The clients.
    pub clients: Vec<Client>,
    buf: Vec<u8>,
    /// Every endpoint's configuration, for clients that rebind.
    config: EndpointConfig,
    /// Seeds for rebinding clients' endpoints and links.
    rebinds: u64,
    seed: u64,
    /// A wiretap: the last [`TAP_MAX`] datagrams the server received from clients, with their
    /// source, when enabled (an attacker on the path, for security tests).
    pub tap: Option<std::collections::VecDeque<(SocketAddr, Vec<u8>)>>,
    /// Whether the server requires harness tokens ([`crate::secure`]) and clients present
    /// them; and how many tokens were issued (each attempt gets its own).
    secure: bool,
    tokens_issued: u64,
}

/// An endpoint whose secrets follow from `seed`, so that the seed replays the run.
///
/// # Panics
///
/// If `config` is invalid: a harness's caller passes a fixed configuration, and a wrong one is
/// the test's bug.
fn endpoint(config: EndpointConfig, seed: u64) -> Endpoint {
    match Endpoint::new(config, EndpointRandomness::danger_from_seed(seed)) {
        Ok(endpoint) => endpoint,
        Err(e) => panic!("invalid endpoint configuration: {e}"),
    }
}

/// Datagrams the wiretap keeps.
pub const TAP_MAX: usize = 256;

impl Net {
    /// `clients` clients, each with `link` both ways; all randomness derives from `seed`. A
    /// `config` with the default security (no key) runs in plaintext
    /// (`Security::DangerPlaintext`): the harness for the protocol's own tests; [`Net::secure`]
    /// runs them as deployed.
    pub fn new(config: EndpointConfig, link: LinkConfig, clients: usize, seed: u64) -> Self {
        let security = match config.security {
            Security::NoKey => Security::DangerPlaintext,
            security => security,
        };
        let config = EndpointConfig { security, ..config };
        // Client i's links use the seeds a benchmark's other peers use for their links (seed *
        // 7 + 3 and seed * 11 + 4 for the first), so that every peer meets the same link.
        let clients = (0..clients as u64)
            .map(|i| Client {
                endpoint: endpoint(config.clone(), seed.wrapping_mul(3).wrapping_add(1 + i)),
                addr: SocketAddr::from(([10, 0, 1, i as u8 + 1], 40_000 + i as u16)),
                up: Link::new(link, seed.wrapping_mul(7).wrapping_add(3 + 2 * i)),
                down: Link::new(link, seed.wrapping_mul(11).wrapping_add(4 + 2 * i)),
                events: Vec::new(),
                handle: None,
                wire_bytes: 0,
            })
            .collect();
        Self {
            now: Instant::ZERO,
            server: endpoint(config.clone(), seed.wrapping_mul(5).wrapping_add(2)),
            server_addr: "10.0.0.2:7777".parse().expect("a valid address"),
            server_events: Vec::new(),
            server_wire_bytes: 0,
            clients,
            buf: vec![0; 65_536],
            config,
            rebinds: 0,
            seed,
            tap: None,
            secure: false,
            tokens_issued: 0,
        }
    }

    /// [`Net::new`] with a server that requires connect tokens ([`crate::secure`]): every
    /// connection the harness makes presents a fresh one, and is sealed.
    pub fn secure(config: EndpointConfig, link: LinkConfig, clients: usize, seed: u64) -> Self {
        let mut net = Self::new(config.clone(), link, clients, seed);
        let server_config = crate::secure::server_config(config, net.server_addr);
        net.server = endpoint(server_config, seed.wrapping_mul(5).wrapping_add(2));
        net.secure = true;
        net
    }

    /// Client `i` starts connecting: with a fresh harness token if the net is secure.
    pub fn connect_client(&mut self, i: usize) {
        let (now, server) = (self.now, self.server_addr);
        let token = self.secure.then(|| {
            self.tokens_issued += 1;
            crate::secure::token(i as u64, self.tokens_issued, server)
        });
        let client = &mut self.clients[i];
        client.handle = match token {
            Some(token) => client.endpoint.connect_with_token(now, token).ok(),
            None => Some(client.endpoint.connect(now, server)),
        };
    }

    /// Connects every client and steps until all are connected or `timeout` passes; returns
    /// whether they all connected.
    pub fn connect_all(&mut self, timeout: Duration) -> bool {
        for i in 0..self.clients.len() {
            self.connect_client(i);
        }
        self.wait_connected(timeout)
    }

    /// [`Net::connect_all`], each client `i` presenting `tokens(i)` (a server with
    /// `Security::Tokens`); returns false at once if a token names no server.
    pub fn connect_all_with_tokens(
        &mut self,
        timeout: Duration,
        mut tokens: impl FnMut(usize) -> rally_proto::ConnectToken,
    ) -> bool {
        let now = self.now;
        self.connect_all_by(timeout, |i, endpoint| endpoint.connect_with_token(now, tokens(i)).ok())
    }

    fn connect_all_by(
        &mut self,
        timeout: Duration,
        mut connect: impl FnMut(usize, &mut Endpoint) -> Option<ConnectionHandle>,
    ) -> bool {
        for (i, client) in self.clients.iter_mut().enumerate() {
            client.handle = connect(i, &mut client.endpoint);
            if client.handle.is_none() {
                return false;
            }
        }
        self.wait_connected(timeout)
    }

    /// Steps until every client and the server report `Connected`, or `timeout` passes.
    fn wait_connected(&mut self, timeout: Duration) -> bool {
        let deadline = self.now + timeout;
        loop {
            self.drive();
            let connected = |events: &[(ConnectionHandle, Event)]| {
                events.iter().any(|(_, e)| *e == Event::Connected)
            };
            let servers = self.server_events.iter().filter(|(_, e)| *e == Event::Connected).count();
            if servers == self.clients.len() && self.clients.iter().all(|c| connected(&c.events)) {
                return true;
            }
            if self.now >= deadline || !self.step_until(deadline) {
                return false;
            }
        }
    }

    /// Gives client `i` a new socket, as a game client does to reconnect: a fresh endpoint on
    /// a new port. Datagrams in flight to the old port are lost, as they would be at a closed
    /// socket; the server's connection from the old port lives on until it times out. (Rally
    /// tells connections apart by address until connections get keys, so a reconnect from the
    /// same port while the server still holds the old connection is not supported.)
    pub fn rebind(&mut self, i: usize) {
        self.rebinds += 1;
        let seed = self.seed.wrapping_mul(13).wrapping_add(self.rebinds);
        let client = &mut self.clients[i];
        client.endpoint = endpoint(self.config.clone(), seed);
        client.addr.set_port(client.addr.port().wrapping_add(1_000));
        client.down = Link::new(*client.down.config(), seed.wrapping_add(1));
        client.handle = None;
    }

    /// Changes every client's links (a blackout, a heal).
    pub fn set_links(&mut self, link: LinkConfig) {
        for client in &mut self.clients {
            client.up.set_config(link);
            client.down.set_config(link);
        }
    }

    /// When every link's bottleneck will have sent what it holds.
    pub fn drained_at(&self) -> Instant {
        let times = self.clients.iter().flat_map(|c| [c.up.drained_at(), c.down.drained_at()]);
        times.max().unwrap_or(self.now)
    }
}

impl VirtualClock for Net {
    fn now(&self) -> Instant {
        self.now
    }

    fn set_now(&mut self, now: Instant) {
        self.now = now;
    }

    /// The next time anything is scheduled.
    fn next_event_time(&self) -> Option<Instant> {
        let clients = self
            .clients
            .iter()
            .flat_map(|c| [c.endpoint.poll_timeout(), c.up.poll_timeout(), c.down.poll_timeout()]);
        clients.chain([self.server.poll_timeout()]).flatten().min()
    }

    /// Handles everything due at `now`, until nothing more happens at this instant. Panics on
    /// a livelock.
    fn drive(&mut self) {
        for _ in 0..DRIVE_STEPS_MAX {
            let mut busy = false;
            for client in &mut self.clients {
                while let Some(packet) = client.up.poll_deliver(self.now) {
                    self.server.handle_datagram(self.now, client.addr, &packet);
                    if let Some(tap) = &mut self.tap {
                        if tap.len() >= TAP_MAX {
                            tap.pop_front();
                        }
                        tap.push_back((client.addr, packet));
                    }
                    busy = true;
                }
                while let Some(packet) = client.down.poll_deliver(self.now) {
                    client.endpoint.handle_datagram(self.now, self.server_addr, &packet);
                    busy = true;
                }
                client.endpoint.handle_timeout(self.now);
                while let Some(t) = client.endpoint.poll_transmit(self.now, &mut self.buf) {
                    client.up.send(self.now, self.buf[..t.len].to_vec(), t.len);
                    client.wire_bytes += t.len as u64;
                    busy = true;
                }
                while let Some(event) = client.endpoint.poll_event() {
                    client.events.push(event);
                    busy = true;
                }
            }
            self.server.handle_timeout(self.now);
            while let Some(t) = self.server.poll_transmit(self.now, &mut self.buf) {
                // A datagram to an address no client has is lost, as on a real network.
                if let Some(client) = self.clients.iter_mut().find(|c| c.addr == t.destination) {
                    client.down.send(self.now, self.buf[..t.len].to_vec(), t.len);
                }
                self.server_wire_bytes += t.len as u64;
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
}

//! The common case of [`Net`]: one client, one server.

use crate::net::Net;
use crate::VirtualClock;
use rally_netem::{Link, LinkConfig};
use rally_proto::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};
use std::net::SocketAddr;
use std::time::Duration;

/// A client and a server endpoint joined by two emulated links: a [`Net`] with one client and
/// accessors named for that case.
#[derive(Debug)]
pub struct Pair {
    /// The underlying network.
    pub net: Net,
}

impl Pair {
    /// A pair with the same endpoint configuration on both sides and `link` both ways; all
    /// randomness derives from `seed`.
    pub fn new(config: EndpointConfig, link: LinkConfig, seed: u64) -> Self {
        Self { net: Net::new(config, link, 1, seed) }
    }

    /// [`Pair::new`] with a server that requires a connect token, which the client presents:
    /// the connection is sealed ([`crate::secure`]).
    pub fn secure(config: EndpointConfig, link: LinkConfig, seed: u64) -> Self {
        Self { net: Net::secure(config, link, 1, seed) }
    }

    /// Connects the client and steps until both sides report `Connected` or `timeout` passes;
    /// returns the client's and the server's handles, or `None` if the handshake did not
    /// finish.
    pub fn connect(&mut self, timeout: Duration) -> Option<(ConnectionHandle, ConnectionHandle)> {
        if !self.net.connect_all(timeout) {
            return None;
        }
        let server = self.net.server_events.iter().find(|(_, e)| *e == Event::Connected)?.0;
        Some((self.net.clients[0].handle?, server))
    }

    /// The client's endpoint.
    pub fn client(&mut self) -> &mut Endpoint {
        &mut self.net.clients[0].endpoint
    }

    /// The server's endpoint.
    pub fn server(&mut self) -> &mut Endpoint {
        &mut self.net.server
    }

    /// The client's address as the server sees it.
    pub fn client_addr(&self) -> SocketAddr {
        self.net.clients[0].addr
    }

    /// Client to server.
    pub fn up(&mut self) -> &mut Link<Vec<u8>> {
        &mut self.net.clients[0].up
    }

    /// Server to client.
    pub fn down(&mut self) -> &mut Link<Vec<u8>> {
        &mut self.net.clients[0].down
    }

    /// Events the client's endpoint produced, in order.
    pub fn client_events(&self) -> &[(ConnectionHandle, Event)] {
        &self.net.clients[0].events
    }

    /// Events the server's endpoint produced, in order.
    pub fn server_events(&self) -> &[(ConnectionHandle, Event)] {
        &self.net.server_events
    }

    /// Datagram bytes the client has sent into its link.
    pub fn client_wire_bytes(&self) -> u64 {
        self.net.clients[0].wire_bytes
    }

    /// Datagram bytes the server has sent into its link.
    pub fn server_wire_bytes(&self) -> u64 {
        self.net.server_wire_bytes
    }

    /// Messages the client received on `channel`, in order.
    pub fn client_messages(&self, channel: u8) -> Vec<&[u8]> {
        messages(self.client_events(), channel)
    }

    /// Messages the server received on `channel`, in order.
    pub fn server_messages(&self, channel: u8) -> Vec<&[u8]> {
        messages(self.server_events(), channel)
    }
}

impl VirtualClock for Pair {
    fn now(&self) -> Instant {
        self.net.now()
    }

    fn set_now(&mut self, now: Instant) {
        self.net.set_now(now);
    }

    fn next_event_time(&self) -> Option<Instant> {
        self.net.next_event_time()
    }

    fn drive(&mut self) {
        self.net.drive();
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

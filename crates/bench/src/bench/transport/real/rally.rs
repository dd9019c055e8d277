//! Rally on real sockets: its driver at both ends, sealed (a connect token and an AEAD tag on
//! every packet, as deployed), the reliable-ordered channel of the default configuration, or
//! with streaming repair and 12-byte tags on (`rally-coded`).

use super::{index_of, Client, Server, CONNECT_TIMEOUT};
use rally_driver::{Clock, UdpDriver};
use rally_proto::{ConnectionHandle, EndpointConfig, Event, Instant, Repair, SendError, TokenKey};
use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The reliable-ordered channel of `EndpointConfig::default()`, as in sim mode.
const CHANNEL: u8 = 0;

/// One key for the whole benchmark: the server and the client's "backend" share it.
const KEY: TokenKey = TokenKey(*b"rally bench transport, real mode");

/// The default configuration, with streaming repair and short tags if `coded` (as in sim mode).
fn config(coded: bool) -> EndpointConfig {
    let mut config = EndpointConfig::default();
    if coded {
        config.connection.repair = Repair::adaptive();
        config.connection.short_tag = true;
    }
    config
}

pub fn server(coded: bool) -> std::io::Result<Server> {
    let protocol = crate::token::LOCAL_PROTOCOL_ID;
    let mut driver = UdpDriver::bind_secure("127.0.0.1:0", config(coded), KEY.clone(), protocol)?;
    let address = driver.local_addr()?;
    Server::spawn(address, move |stop: &AtomicBool| {
        while !stop.load(Ordering::Relaxed) {
            let echo = |endpoint: &mut rally_proto::Endpoint, handle, event| {
                if let Event::Message { channel, payload } = event {
                    // A full queue: the echo is dropped, as W1 allows; the client counts it.
                    let _ = endpoint.send(handle, channel, &payload);
                }
            };
            driver.run_for(Duration::from_millis(5), echo).map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

pub struct RallyClient {
    driver: UdpDriver,
    connection: ConnectionHandle,
    clock: Clock,
    /// Echoes the driver handed out while a payload was being sent.
    pending: Vec<(u32, Instant)>,
}

/// A client whose token names the relay first (where it connects) and the server (which
/// checks that it is named); it returns once connected.
pub fn client(
    via: SocketAddr,
    server: SocketAddr,
    clock: &Clock,
    coded: bool,
) -> Result<RallyClient, Box<dyn Error>> {
    let mut driver = UdpDriver::bind("127.0.0.1:0", config(coded))?;
    let token = crate::token::issue_local(&KEY, 0, vec![via, server])?;
    let connection = driver.connect_with_token(token)?;
    let deadline = clock.now() + CONNECT_TIMEOUT;
    let mut connected = false;
    while !connected {
        if clock.now() >= deadline {
            return Err("rally: no connection within 10 s".into());
        }
        driver.run_for(Duration::from_millis(5), |_, _, event| {
            connected |= matches!(event, Event::Connected);
        })?;
    }
    Ok(RallyClient { driver, connection, clock: *clock, pending: Vec::new() })
}

impl RallyClient {
    /// What to do with each event: note each echo's arrival on the benchmark's clock.
    fn on_event(pending: &mut Vec<(u32, Instant)>, clock: &Clock, event: Event) {
        if let Event::Message { payload, .. } = event {
            if let Some(index) = index_of(&payload) {
                pending.push((index, clock.now()));
            }
        }
    }
}

impl Client for RallyClient {
    fn send(&mut self, payload: &[u8]) -> Result<bool, Box<dyn Error>> {
        match self.driver.endpoint().send(self.connection, CHANNEL, payload) {
            Ok(()) => {}
            Err(SendError::QueueFull(_)) => return Ok(false),
            Err(e) => return Err(format!("rally: send failed: {e}").into()),
        }
        // Out at once, as the library does when a game sends between frames.
        let (pending, clock) = (&mut self.pending, self.clock);
        self.driver.pump(|_, _, event| Self::on_event(pending, &clock, event))?;
        Ok(true)
    }

    fn poll(
        &mut self,
        until: Instant,
        echoes: &mut Vec<(u32, Instant)>,
    ) -> Result<(), Box<dyn Error>> {
        let wait = until.saturating_duration_since(self.clock.now());
        let (pending, clock) = (&mut self.pending, self.clock);
        self.driver.run_for(wait, |_, _, event| Self::on_event(pending, &clock, event))?;
        echoes.append(&mut self.pending);
        Ok(())
    }
}

//! The browser's way in: a WebSocket gateway beside the host. Each WebSocket session gets a
//! UDP socket of its own on loopback and carries Rally's datagrams both ways, one binary
//! message per datagram, so that the room sees a browser player as one more UDP client: the
//! same handshake, sealing, acks, channels and resends (the page runs Rally's own client,
//! compiled to wasm: crates/web-client).
//!
//! Its limits and counters are the ones every gateway shares ([`rally_driver::gateway`]; the
//! WebTransport gateway, `rally-webtransport`, counts the same). The request's path names the
//! host's worker (`/k`, `/` for the first). Bad input is refused and counted, never a panic:
//! a message over [`GatewayConfig::frame_max`] or a broken frame ends its session
//! ([`GatewayStats::oversized`], [`GatewayStats::broken`]); a text message is dropped
//! ([`GatewayStats::garbage`]); sessions over [`GatewayConfig::sessions_max`] are refused
//! before the handshake, and a path naming no worker at it. Garbage inside a binary
//! message is the room's to refuse, as from any UDP peer. A closed tab closes its socket: the
//! gateway drops the session's UDP socket, and the page says goodbye first where it can
//! (`pagehide`), else the room times the connection out.
//!
//! One thread per session, sleeping in `ppoll` on both sockets: no async runtime.

use rally_driver::gateway::{room_socket, OpenSession};
pub use rally_driver::gateway::{GatewayConfig, GatewayStats};
use rally_driver::readable_fds;
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tungstenite::handshake::server::{ErrorResponse, Request};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// Bytes a session may queue for a browser that does not read, at most.
const WRITE_BUFFER_MAX: usize = 1 << 20;

/// How long a session's wait lasts at most, so that a stop is seen.
const WAIT: Duration = Duration::from_millis(100);

/// A running gateway; dropping it stops the listener and every session.
pub struct Gateway {
    address: SocketAddr,
    stats: Arc<GatewayStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Listens on `config.listen`.
    pub fn start(config: GatewayConfig) -> io::Result<Self> {
        let listener = TcpListener::bind(config.listen)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let stats = Arc::new(GatewayStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, t) = (stats.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("rally-gateway".into())
            .spawn(move || accept(&listener, &config, &s, &t))?;
        Ok(Self { address, stats, stop, thread: Some(thread) })
    }

    /// The WebSocket's URL.
    pub fn url(&self) -> String {
        format!("ws://{}/", self.address)
    }

    /// The counters.
    pub fn stats(&self) -> &GatewayStats {
        &self.stats
    }

    /// The counters, shared (for `rally server`'s telemetry).
    pub fn shared_stats(&self) -> Arc<GatewayStats> {
        self.stats.clone()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept(
    listener: &TcpListener,
    config: &GatewayConfig,
    stats: &Arc<GatewayStats>,
    stop: &Arc<AtomicBool>,
) {
    let mut sessions: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        sessions.retain(|s| !s.is_finished());
        match readable_fds(&[listener.as_raw_fd()], WAIT) {
            Ok(true) => {}
            _ => continue,
        }
        let Ok((stream, _)) = listener.accept() else { continue };
        if sessions.len() as u64 >= config.sessions_max {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let (config, counted, stop) = (config.clone(), stats.clone(), stop.clone());
        let session = std::thread::Builder::new()
            .name("rally-gateway-session".into())
            .spawn(move || session(stream, &config, &counted, &stop));
        match session {
            Ok(session) => sessions.push(session),
            Err(_) => _ = stats.refused.fetch_add(1, Ordering::Relaxed),
        }
    }
    for session in sessions {
        let _ = session.join();
    }
}

/// One browser: the handshake, then datagrams both ways until either side ends.
fn session(stream: TcpStream, config: &GatewayConfig, stats: &GatewayStats, stop: &AtomicBool) {
    let Some((mut socket, room)) = handshake(stream, config) else {
        GatewayStats::count(&stats.refused);
        return;
    };
    let _open = OpenSession::new(stats);
    let ended = room_socket(room).and_then(|udp| carry(&mut socket, &udp, stats, stop));
    if ended.is_err() {
        GatewayStats::count(&stats.broken);
    }
    let _ = socket.close(None);
    let _ = socket.flush();
    stats.add_thread_cpu();
}

/// The WebSocket's handshake, and the worker its path names (none: refused with a 404).
// tungstenite's callback returns its own (large) error response by value.
#[allow(clippy::result_large_err)]
fn handshake(
    stream: TcpStream,
    config: &GatewayConfig,
) -> Option<(WebSocket<TcpStream>, SocketAddr)> {
    // The handshake blocks, but not for ever: a silent client costs one thread for 5 s.
    stream.set_nonblocking(false).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.set_nodelay(true).ok()?;
    // A tab that stops reading (asleep, or hostile) may make the gateway hold at most
    // WRITE_BUFFER_MAX of datagrams for it; past that its session ends, counted as broken.
    let limits = WebSocketConfig::default()
        .max_message_size(Some(config.frame_max))
        .max_frame_size(Some(config.frame_max))
        .max_write_buffer_size(WRITE_BUFFER_MAX);
    let mut room = None;
    let pick = |request: &Request, response| match config.room_for(request.uri().path()) {
        Some(found) => {
            room = Some(found);
            Ok(response)
        }
        None => {
            let mut refusal = ErrorResponse::new(Some("no such worker\n".into()));
            *refusal.status_mut() = tungstenite::http::StatusCode::NOT_FOUND;
            Err(refusal)
        }
    };
    let socket = tungstenite::accept_hdr_with_config(stream, pick, Some(limits)).ok()?;
    socket.get_ref().set_nonblocking(true).ok()?;
    Some((socket, room?))
}

/// Carries datagrams until the browser closes (`Ok`) or a frame or socket breaks (`Err`).
fn carry(
    socket: &mut WebSocket<TcpStream>,
    udp: &UdpSocket,
    stats: &GatewayStats,
    stop: &AtomicBool,
) -> io::Result<()> {
    let fds = [socket.get_ref().as_raw_fd(), udp.as_raw_fd()];
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        readable_fds(&fds, WAIT)?;
        loop {
            match socket.read() {
                Ok(Message::Binary(datagram)) => match udp.send(&datagram) {
                    Ok(_) => GatewayStats::count(&stats.to_room),
                    // The room is not there (yet): a lost datagram, as on any network.
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(e),
                },
                Ok(Message::Text(_)) => GatewayStats::count(&stats.garbage),
                Ok(Message::Close(_)) => return Ok(()),
                Ok(_) => {} // pings are answered by tungstenite
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => break,
                Err(tungstenite::Error::ConnectionClosed) => return Ok(()),
                Err(tungstenite::Error::Capacity(_)) => {
                    GatewayStats::count(&stats.oversized);
                    return Ok(());
                }
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        loop {
            match udp.recv(&mut buf) {
                Ok(len) => {
                    socket.send(Message::binary(buf[..len].to_vec())).or_else(would_block)?;
                    GatewayStats::count(&stats.to_browser);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => break,
                Err(e) => return Err(e),
            }
        }
        socket.flush().or_else(would_block)?;
    }
    Ok(())
}

/// A write the kernel could not take yet stays queued in tungstenite: not an error.
fn would_block(e: tungstenite::Error) -> io::Result<()> {
    match e {
        tungstenite::Error::Io(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
        e => Err(io::Error::other(e)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::demo::table::{Roles, TableTennis};
    use rally_driver::{Clock, Host, HostConfig};
    use rally_engine::{connection_config, RoomConfig};
    use rally_proto::EndpointConfig;
    use rally_web_client::Player;
    use std::sync::Mutex;

    /// A table-tennis host, its room's address, and a connect token for it.
    pub(crate) fn table_room() -> (Host, SocketAddr, Vec<u8>, Arc<Mutex<Roles>>) {
        let key = rally_driver::backend::random_key().unwrap();
        let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
        let config = HostConfig {
            workers: 1,
            key: Some(key.clone()),
            protocol_id: crate::token::LOCAL_PROTOCOL_ID,
            endpoint,
            ..HostConfig::default()
        };
        let roles = Arc::new(Mutex::new(Roles::default()));
        // A short resume window: a player who said goodbye leaves soon after.
        let room =
            RoomConfig { resume_window: Duration::from_millis(100), ..RoomConfig::default() };
        let host = Host::start(config, TableTennis::new(room, roles.clone()));
        let host = host.unwrap();
        let room = host.room_address(0);
        let protocol = crate::token::LOCAL_PROTOCOL_ID;
        let token = rally_driver::backend::issue(&key, protocol, 7, 0, vec![room], 60).unwrap();
        (host, room, token.encode(), roles)
    }

    /// A table-tennis host with a gateway in front of it, and a connect token for it.
    fn table() -> (Host, Gateway, Vec<u8>, Arc<Mutex<Roles>>) {
        let (host, room, token, roles) = table_room();
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let gateway = Gateway::start(GatewayConfig::new(listen, room)).unwrap();
        (host, gateway, token, roles)
    }

    type Browser = WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>;

    fn open(gateway: &Gateway) -> Browser {
        let (socket, _) = tungstenite::connect(gateway.url()).unwrap();
        if let tungstenite::stream::MaybeTlsStream::Plain(tcp) = socket.get_ref() {
            tcp.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
        }
        socket
    }

    /// What arrived over the WebSocket, into the player.
    fn receive(player: &mut Player, socket: &mut Browser, clock: &Clock) {
        loop {
            match socket.read() {
                Ok(Message::Binary(d)) => player.receive(clock.now(), &d),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    break
                }
                Err(e) => panic!("the gateway ended the session: {e}"),
            }
        }
    }

    /// Turns of the page's loop (`receive` what arrived, timers, the hand, `send` what waits)
    /// until the room's replicated state shows the hand where the player put it; the hand as
    /// the player's own state shows it.
    pub(crate) fn play_until_the_hand_is_seen(
        player: &mut Player,
        clock: &Clock,
        roles: &Mutex<Roles>,
        mut receive: impl FnMut(&mut Player),
        mut send: impl FnMut(Vec<u8>),
    ) -> [f32; 3] {
        let hand = [0.4, 1.0, 1.2];
        let mut seen = None;
        for _ in 0..2000 {
            receive(player);
            let now = clock.now();
            player.update(now);
            let rotation = [0.0, 0.0, 0.0, 1.0];
            player.send_hand(now, rally_sim::sandbox::HandInput { position: hand, rotation });
            while let Some(datagram) = player.poll_transmit(now) {
                send(datagram);
            }
            let client = player.figures().client;
            let players = &crate::demo::table::lock(roles).players;
            let ours = client.and_then(|c| players.get(&c)).map(|(hand, _)| *hand);
            let entities = player.entities(clock.now());
            seen =
                entities.chunks(4).find(|e| Some(e[0] as u32) == ours).map(|e| [e[1], e[2], e[3]]);
            if seen.is_some_and(|s| s.iter().zip(hand).all(|(a, b)| (a - b).abs() < 1e-2)) {
                break;
            }
        }
        assert!(player.figures().client.is_some(), "the room welcomed the player");
        let seen = seen.expect("the player's hand is replicated back");
        assert!(seen.iter().zip(hand).all(|(a, b)| (a - b).abs() < 1e-2), "hand at {seen:?}");
        seen
    }

    #[test]
    fn a_browser_player_joins_through_the_gateway_and_moves_its_hand() {
        let (host, gateway, token, roles) = table();
        let clock = Clock::start();
        let mut player = Player::new(&[7; 24], 16_667).unwrap();
        player.connect(clock.now(), &token, u64::MAX / 2).unwrap_err(); // expired: refused
        player.connect(clock.now(), &token, 0).unwrap();
        let socket = std::cell::RefCell::new(open(&gateway));
        play_until_the_hand_is_seen(
            &mut player,
            &clock,
            &roles,
            |player| receive(player, &mut socket.borrow_mut(), &clock),
            |datagram| socket.borrow_mut().send(Message::binary(datagram)).unwrap(),
        );
        let mut socket = socket.into_inner();
        assert!(gateway.stats().to_room.load(Ordering::Relaxed) > 0);
        assert!(gateway.stats().to_browser.load(Ordering::Relaxed) > 0);
        // A closing tab says goodbye through the gateway: its player leaves the room (after
        // the resume window, in which a reloaded page could resume).
        let client = player.figures().client.unwrap();
        player.close();
        while let Some(datagram) = player.poll_transmit(clock.now()) {
            socket.send(Message::binary(datagram)).unwrap();
        }
        socket.flush().unwrap();
        while crate::demo::table::lock(&roles).players.contains_key(&client) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // And closes its WebSocket: the gateway ends the session.
        socket.close(None).unwrap();
        let _ = socket.flush();
        while gateway.stats().open.load(Ordering::Relaxed) > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(gateway);
        host.shutdown(Duration::from_millis(100)).unwrap();
    }

    #[test]
    fn oversized_and_text_messages_are_refused_and_counted() {
        let (host, gateway, _, _) = table();
        let mut socket = open(&gateway);
        socket.send(Message::text("not a datagram")).unwrap();
        // Garbage bytes are carried: the room refuses them as from any UDP peer.
        socket.send(Message::binary(vec![0xff; 40])).unwrap();
        socket.send(Message::binary(vec![0u8; 1501])).unwrap();
        // The gateway ends the session after the oversized message.
        let mut ended = false;
        for _ in 0..5000 {
            match socket.read() {
                Ok(Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => ended = true,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    continue
                }
                Err(_) => ended = true,
                Ok(_) => continue,
            }
            break;
        }
        assert!(ended, "an oversized message ends its session");
        let stats = gateway.stats();
        assert_eq!(stats.garbage.load(Ordering::Relaxed), 1);
        assert_eq!(stats.oversized.load(Ordering::Relaxed), 1);
        assert_eq!(stats.to_room.load(Ordering::Relaxed), 1);
        // The gateway still takes new sessions.
        drop(open(&gateway));
        drop(gateway);
        host.shutdown(Duration::from_millis(100)).unwrap();
    }
}

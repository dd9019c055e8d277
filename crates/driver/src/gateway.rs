//! What every gateway in front of a host shares: its limits ([`GatewayConfig`]) and its
//! counters ([`GatewayStats`]). A gateway carries a browser's datagrams to a room's UDP socket
//! through a socket of the session's own, so that the host sees one more UDP client; the
//! WebSocket gateway lives in the rally binary, the WebTransport one in `rally-webtransport`
//! (which keeps quinn, tokio and rustls out of this crate). Both count the same things, and
//! `rally server` exposes both as `rally_web_*` series.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a gateway listens, where it carries datagrams, and its limits.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The gateway's own address (port 0: any free one).
    pub listen: SocketAddr,
    /// The host's workers, by index: a session asks for worker `k` with the path `/k` (`/`
    /// is worker 0), the one its connect token names.
    pub rooms: Vec<SocketAddr>,
    /// Sessions at once at most, handshakes included; more are refused and counted.
    pub sessions_max: u64,
    /// The largest datagram a browser may send, bytes: Rally's datagrams are at most an MTU.
    pub frame_max: usize,
}

impl GatewayConfig {
    /// A gateway on `listen` to the one room (worker) at `room`, with 64 sessions and
    /// 1500-byte datagrams at most.
    pub fn new(listen: SocketAddr, room: SocketAddr) -> Self {
        Self { listen, rooms: vec![room], sessions_max: 64, frame_max: 1500 }
    }

    /// The worker a session's request path names: `/` or `/0` is the first, `/k` the k-th;
    /// anything else is no worker (the session is refused).
    pub fn room_for(&self, path: &str) -> Option<SocketAddr> {
        let index = match path.trim_start_matches('/') {
            "" => 0,
            k if k.len() <= 4 && k.bytes().all(|b| b.is_ascii_digit()) => k.parse().ok()?,
            _ => return None,
        };
        self.rooms.get(index).copied()
    }
}

/// A UDP socket of a session's own, connected to `room`: on loopback when the room is, else on
/// any address of the room's family.
pub fn room_socket(room: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let local: SocketAddr = match room {
        SocketAddr::V4(a) if a.ip().is_loopback() => (Ipv4Addr::LOCALHOST, 0).into(),
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(a) if a.ip().is_loopback() => (Ipv6Addr::LOCALHOST, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(room)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// What a gateway counted since it started. Relaxed atomics: each is bumped by one session
/// at a time and read by telemetry now and then.
#[derive(Debug, Default)]
pub struct GatewayStats {
    /// Sessions that completed their handshake.
    pub sessions: AtomicU64,
    /// Sessions open now.
    pub open: AtomicU64,
    /// Sessions refused: too many at once, a failed or slow handshake, or an unknown worker.
    pub refused: AtomicU64,
    /// Datagrams carried from browsers to the room.
    pub to_room: AtomicU64,
    /// Datagrams carried from the room to browsers.
    pub to_browser: AtomicU64,
    /// Datagrams from browsers over the size limit (each ends its session).
    pub oversized: AtomicU64,
    /// What is not a datagram (a WebSocket text message, a WebTransport stream), refused.
    pub garbage: AtomicU64,
    /// Datagrams from the room larger than the browser's path takes now (WebTransport's
    /// datagram size), dropped as a network would.
    pub too_large: AtomicU64,
    /// Sessions ended by a broken frame or a socket error.
    pub broken: AtomicU64,
    /// CPU time of the gateway's threads, microseconds, added as each ends (a WebSocket
    /// session's thread, the WebTransport gateway's runtime): what carrying costs.
    pub cpu_us: AtomicU64,
}

impl GatewayStats {
    /// Adds the calling thread's CPU time so far to [`Self::cpu_us`], as the thread ends.
    pub fn add_thread_cpu(&self) {
        self.cpu_us.fetch_add(crate::cpu::thread_cpu_us(), Ordering::Relaxed);
    }

    /// Adds one to `counter` (one of this struct's fields).
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters as (series name after `rally_web_`, whether it is a gauge, help, value),
    /// in the order `rally server` exposes them.
    pub fn figures(&self) -> [(&'static str, bool, &'static str, u64); 9] {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            (
                "sessions_total",
                false,
                "Sessions that completed their handshake.",
                n(&self.sessions),
            ),
            ("sessions_open", true, "Sessions open now.", n(&self.open)),
            (
                "sessions_refused_total",
                false,
                "Sessions refused: too many, a failed or slow handshake, an unknown worker.",
                n(&self.refused),
            ),
            (
                "sessions_broken_total",
                false,
                "Sessions ended by a broken frame or a socket error.",
                n(&self.broken),
            ),
            (
                "to_room_total",
                false,
                "Datagrams carried from browsers to the room.",
                n(&self.to_room),
            ),
            (
                "to_browser_total",
                false,
                "Datagrams carried from the room to browsers.",
                n(&self.to_browser),
            ),
            (
                "oversized_total",
                false,
                "Browser datagrams over the size limit (each ends its session).",
                n(&self.oversized),
            ),
            (
                "garbage_total",
                false,
                "Browser messages that are not datagrams (text, streams), refused.",
                n(&self.garbage),
            ),
            (
                "too_large_total",
                false,
                "Room datagrams larger than the browser's path takes, dropped.",
                n(&self.too_large),
            ),
        ]
    }
}

/// Counts a session open for as long as it lives, so that a session that ends any way (an
/// error, or a gateway stopping mid-session) is counted closed.
pub struct OpenSession<'a>(&'a GatewayStats);

impl<'a> OpenSession<'a> {
    /// A session that completed its handshake.
    pub fn new(stats: &'a GatewayStats) -> Self {
        GatewayStats::count(&stats.sessions);
        GatewayStats::count(&stats.open);
        Self(stats)
    }
}

impl Drop for OpenSession<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_a_worker_and_nothing_else() {
        let rooms: Vec<SocketAddr> =
            vec!["127.0.0.1:7777".parse().unwrap(), "127.0.0.1:7778".parse().unwrap()];
        let config =
            GatewayConfig { rooms: rooms.clone(), ..GatewayConfig::new(rooms[0], rooms[0]) };
        assert_eq!(config.room_for("/"), Some(rooms[0]));
        assert_eq!(config.room_for("/0"), Some(rooms[0]));
        assert_eq!(config.room_for("/1"), Some(rooms[1]));
        for bad in ["/2", "/-1", "/1?x", "/../1", "/99999999999999999999", "/a"] {
            assert_eq!(config.room_for(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_session_is_counted_open_until_it_ends() {
        let stats = GatewayStats::default();
        {
            let _open = OpenSession::new(&stats);
            assert_eq!(stats.open.load(Ordering::Relaxed), 1);
        }
        assert_eq!(stats.open.load(Ordering::Relaxed), 0);
        assert_eq!(stats.sessions.load(Ordering::Relaxed), 1);
    }
}

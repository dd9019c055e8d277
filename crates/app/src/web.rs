//! The browser's ways in beside a host, started together: the WebTransport gateway
//! (`rally-webtransport`, HTTP/3 datagrams, what a page tries first) and the WebSocket gateway
//! ([`crate::gateway`], its fallback). Both carry each session's datagrams to the room through
//! a UDP socket of the session's own, with the same limits and counters
//! ([`rally_driver::gateway`]). `rally demo` starts both on loopback; `rally server`
//! starts the ones its `[web]` section names (docs/web.md, docs/operating.md).

use crate::gateway::{Gateway, GatewayConfig, GatewayStats};
#[cfg(feature = "webtransport")]
pub use rally_webtransport::{CurrentCertificate, WebTransportGateway};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
#[cfg(not(feature = "webtransport"))]
pub use without_webtransport::{CurrentCertificate, WebTransportGateway};

/// Which gateways to start, and their limits.
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// The WebSocket gateway's TCP address, if any.
    pub websocket: Option<SocketAddr>,
    /// The WebTransport gateway's UDP address, if any.
    pub webtransport: Option<SocketAddr>,
    /// Sessions at once at most, per gateway.
    pub sessions_max: u64,
    /// The largest datagram a browser may send, bytes.
    pub frame_max: usize,
}

/// Each gateway's counters, by transport name (`websocket`, `webtransport`).
pub type WebStats = Vec<(&'static str, Arc<GatewayStats>)>;

/// The running gateways; dropping them closes every session.
pub struct Web {
    /// The WebSocket gateway, if started.
    pub websocket: Option<Gateway>,
    /// The WebTransport gateway, if started.
    pub webtransport: Option<WebTransportGateway>,
}

impl Web {
    /// Starts the gateways `settings` names, in front of the host's workers at `rooms` (the
    /// path `/k` of a gateway's URL reaches worker k). An error names the gateway.
    pub fn start(settings: &WebSettings, rooms: &[SocketAddr]) -> Result<Self, String> {
        let config = |listen| GatewayConfig {
            listen,
            rooms: rooms.iter().map(|&room| reachable(room)).collect(),
            sessions_max: settings.sessions_max,
            frame_max: settings.frame_max,
        };
        let websocket = match settings.websocket {
            Some(at) => Some(
                Gateway::start(config(at))
                    .map_err(|e| format!("the WebSocket gateway on {at}: {e}"))?,
            ),
            None => None,
        };
        let webtransport = match settings.webtransport {
            Some(at) => Some(
                WebTransportGateway::start(config(at))
                    .map_err(|e| format!("the WebTransport gateway on {at}: {e}"))?,
            ),
            None => None,
        };
        Ok(Self { websocket, webtransport })
    }

    /// Each running gateway's counters, for telemetry.
    pub fn stats(&self) -> WebStats {
        let mut stats = Vec::new();
        if let Some(g) = &self.webtransport {
            stats.push(("webtransport", g.shared_stats()));
        }
        if let Some(g) = &self.websocket {
            stats.push(("websocket", g.shared_stats()));
        }
        stats
    }

    /// Stops the gateways; then one line per gateway: what it carried, what that cost, and
    /// what it refused.
    pub fn stop(self) -> Vec<String> {
        let stats = self.stats();
        drop(self);
        stats.iter().map(|(transport, s)| summary(transport, s)).collect()
    }
}

fn summary(transport: &str, s: &GatewayStats) -> String {
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let datagrams = n(&s.to_room) + n(&s.to_browser);
    // Without a datagram the threads' CPU (startup, wake-ups) is no cost per datagram.
    let cpu = match datagrams {
        0 => format!("{} us CPU, no datagram", n(&s.cpu_us)),
        _ => format!("{:.1} us CPU per datagram", n(&s.cpu_us) as f64 / datagrams as f64),
    };
    format!(
        "browser gateway ({transport}): {} sessions, {} datagrams to the room and {} back, \
         {cpu}; {} refused, {} oversized, {} garbage, {} too large for the path",
        n(&s.sessions),
        n(&s.to_room),
        n(&s.to_browser),
        n(&s.refused),
        n(&s.oversized),
        n(&s.garbage),
        n(&s.too_large)
    )
}

/// What a build without the `webtransport` feature (`cargo demo`'s) has in its place: the
/// same names, and a gateway that cannot be started, so that the callers compile unchanged in
/// both builds (but for the server's certificate log) and an asked-for gateway is a clear
/// error, not a missing option.
#[cfg(not(feature = "webtransport"))]
mod without_webtransport {
    use super::GatewayConfig;
    use crate::gateway::GatewayStats;
    use std::sync::Arc;

    /// Why there is no WebTransport gateway.
    pub const NOT_BUILT: &str = "this rally was built without WebTransport (the `webtransport` \
        feature, on by default; `cargo demo` leaves it out to build faster: \
        `cargo run --release -- demo` has it)";

    /// No gateway: there is never a value of this type.
    pub enum WebTransportGateway {}

    impl WebTransportGateway {
        /// Always the error that says why.
        pub fn start(_: GatewayConfig) -> std::io::Result<Self> {
            Err(std::io::Error::new(std::io::ErrorKind::Unsupported, NOT_BUILT))
        }

        /// Never called: there is no gateway.
        pub fn url(&self) -> String {
            match *self {}
        }

        /// Never called.
        pub fn certificate(&self) -> CurrentCertificate {
            match *self {}
        }

        /// Never called.
        pub fn shared_stats(&self) -> Arc<GatewayStats> {
            match *self {}
        }
    }

    /// No certificate either.
    #[derive(Debug, Clone)]
    pub enum CurrentCertificate {}

    impl CurrentCertificate {
        /// Never called: there is no certificate.
        pub fn hash_hex(&self) -> String {
            match *self {}
        }
    }
}

/// A worker bound to every address is reached on loopback.
fn reachable(room: SocketAddr) -> SocketAddr {
    match room.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, room.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, room.port()).into(),
        _ => room,
    }
}

#[cfg(all(test, feature = "webtransport"))]
mod tests {
    use super::*;
    use crate::gateway::tests::{play_until_the_hand_is_seen, table_room};
    use rally_driver::Clock;
    use rally_web_client::Player;
    use std::time::Duration;
    use tokio::runtime::Runtime;
    use wtransport::error::ConnectingError;
    use wtransport::tls::Sha256Digest;
    use wtransport::{ClientConfig, Connection, Endpoint};

    /// A WebTransport gateway alone, on loopback, in front of `room`.
    fn webtransport(room: SocketAddr, sessions_max: u64, frame_max: usize) -> Web {
        let loopback = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        let settings =
            WebSettings { websocket: None, webtransport: loopback, sessions_max, frame_max };
        Web::start(&settings, &[room]).unwrap()
    }

    /// A browser's WebTransport: trusts the gateway's certificate by its hash only, as a page
    /// does with `serverCertificateHashes`.
    fn connect(rt: &Runtime, web: &Web, path: &str) -> Result<Connection, ConnectingError> {
        let hash = web.webtransport.as_ref().unwrap().certificate_hash();
        connect_trusting(rt, web, hash, path)
    }

    /// The same, trusting a certificate by the hash given (a page's, from its token).
    fn connect_trusting(
        rt: &Runtime,
        web: &Web,
        hash: [u8; 32],
        path: &str,
    ) -> Result<Connection, ConnectingError> {
        let gateway = web.webtransport.as_ref().unwrap();
        let hash = Sha256Digest::new(hash);
        rt.block_on(async {
            let config = ClientConfig::builder()
                .with_bind_default()
                .with_server_certificate_hashes([hash])
                .build();
            let endpoint = Endpoint::client(config).unwrap();
            endpoint.connect(format!("https://{}{path}", gateway.address())).await
        })
    }

    fn runtime() -> Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    fn stats(web: &Web) -> Arc<GatewayStats> {
        web.webtransport.as_ref().unwrap().shared_stats()
    }

    /// Waits for `what`, running the client's side of QUIC meanwhile.
    fn until(rt: &Runtime, what: impl Fn() -> bool) {
        while !what() {
            rt.block_on(async { tokio::time::sleep(Duration::from_millis(5)).await });
        }
    }

    #[test]
    fn a_renewed_certificate_serves_new_sessions_and_leaves_open_ones_be() {
        // Goal: a gateway that runs longer than its certificate's days renews it without
        // dropping anyone: pages given the new hash connect, open sessions carry on, and the
        // old hash is no longer accepted. Method: a real gateway told to renew now, a
        // wtransport client trusting it by hash alone, as a page does.
        let room = SocketAddr::from(([127, 0, 0, 1], 9));
        let web = webtransport(room, 64, 1500);
        let gateway = web.webtransport.as_ref().unwrap();
        let rt = runtime();
        let old = gateway.certificate_hash();
        let open = connect(&rt, &web, "/").expect("the first certificate is trusted");
        gateway.renew_now();
        until(&rt, || gateway.certificate().renewals() == 1);
        assert_ne!(gateway.certificate_hash(), old, "a new certificate, a new hash");
        assert_eq!(gateway.certificate().failures(), 0);
        assert!(connect_trusting(&rt, &web, old, "/").is_err(), "the old hash is refused");
        let new = connect(&rt, &web, "/").expect("the new hash is trusted");
        assert!(open.send_datagram([1u8; 8]).is_ok(), "the session opened before is open");
        assert!(new.send_datagram([1u8; 8]).is_ok());
    }

    #[test]
    fn a_browser_player_joins_over_webtransport_and_moves_its_hand() {
        // Goal: a page's datagrams reach the room through the WebTransport gateway and back,
        // so that the room welcomes it and shows its hand where it put it; a closed tab ends
        // its session. Method: Rally's wasm client (compiled natively) over a wtransport
        // client that trusts the gateway's self-signed certificate by its hash alone, in front
        // of a real table-tennis host on loopback.
        let (host, room, token, roles) = table_room();
        let web = webtransport(room, 64, 1500);
        let rt = runtime();
        let connection = connect(&rt, &web, "/0").expect("the certificate's hash is trusted");
        let clock = Clock::start();
        let mut player = Player::new(&[7; 24], 16_667).unwrap();
        player.connect(clock.now(), &token, 0).unwrap();
        let receive = |player: &mut Player| {
            let wait = Duration::from_millis(2);
            let next = || {
                rt.block_on(async {
                    tokio::time::timeout(wait, connection.receive_datagram()).await
                })
            };
            while let Ok(Ok(d)) = next() {
                player.receive(clock.now(), &d);
            }
        };
        let send = |datagram: Vec<u8>| connection.send_datagram(datagram).unwrap();
        play_until_the_hand_is_seen(&mut player, &clock, &roles, receive, send);
        let s = stats(&web);
        assert!(s.to_room.load(Ordering::Relaxed) > 0 && s.to_browser.load(Ordering::Relaxed) > 0);
        assert_eq!(s.too_large.load(Ordering::Relaxed), 0, "the room's datagrams fit");
        // A closed tab: the gateway ends the session (and drops its socket to the room).
        connection.close(0u32.into(), b"tab closed");
        until(&rt, || s.open.load(Ordering::Relaxed) == 0);
        assert_eq!((s.sessions.load(Ordering::Relaxed), s.broken.load(Ordering::Relaxed)), (1, 0));
        drop(web);
        host.shutdown(Duration::from_millis(100)).unwrap();
    }

    #[test]
    fn bad_input_over_webtransport_is_refused_and_counted() {
        // Goal: what is not a datagram Rally could send is refused, counted, and never stops
        // the gateway. Method: a path naming no worker, a stream, an oversized datagram, and
        // a session over the limit, each against a real gateway and host.
        let (host, room, _, _) = table_room();
        let web = webtransport(room, 1, 100);
        let s = stats(&web);
        let rt = runtime();
        assert!(connect(&rt, &web, "/1").is_err(), "no worker 1: refused");
        until(&rt, || s.refused.load(Ordering::Relaxed) == 1);
        let connection = connect(&rt, &web, "/").unwrap();
        // One session at most: the next is refused before its handshake.
        assert!(connect(&rt, &web, "/").is_err(), "over sessions_max");
        until(&rt, || s.refused.load(Ordering::Relaxed) == 2);
        rt.block_on(async {
            let stream = connection.open_uni().await.unwrap().await.unwrap();
            drop(stream);
        });
        connection.send_datagram([0xff; 40]).unwrap(); // garbage for the room to refuse
        until(&rt, || {
            s.garbage.load(Ordering::Relaxed) == 1 && s.to_room.load(Ordering::Relaxed) == 1
        });
        connection.send_datagram([0u8; 101]).unwrap();
        // The oversized datagram ends the session.
        let closed = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), connection.closed()).await
        });
        assert!(closed.is_ok(), "an oversized datagram ends its session");
        assert_eq!(s.oversized.load(Ordering::Relaxed), 1);
        until(&rt, || s.open.load(Ordering::Relaxed) == 0);
        // The gateway still takes new sessions.
        assert!(connect(&rt, &web, "/0").is_ok());
        drop(web);
        host.shutdown(Duration::from_millis(100)).unwrap();
    }
}

//! # rally-webtransport
//!
//! The browser's first way in: a **WebTransport** gateway beside a Rally host. A page opens
//! `new WebTransport(url, { serverCertificateHashes })`; each of its WebTransport datagrams is
//! one Rally datagram, carried to the room through a UDP socket of the session's own (on
//! loopback when the room is), and each datagram the room sends back is one WebTransport
//! datagram. The room sees one more UDP client: the same handshake with a connect token, the
//! same sealing, acks, channels, fragmentation and resends. The WebSocket gateway in the rally
//! binary does the same over TCP, for browsers without WebTransport; both share their limits
//! and counters ([`rally_driver::gateway`]).
//!
//! ```no_run
//! use rally_webtransport::{GatewayConfig, WebTransportGateway};
//!
//! let (listen, room) = ("127.0.0.1:0".parse().unwrap(), "127.0.0.1:7777".parse().unwrap());
//! let gateway = WebTransportGateway::start(GatewayConfig::new(listen, room)).unwrap();
//! // What the page needs with its connect token: the URL and the certificate's SHA-256.
//! println!("{} {}", gateway.url(), gateway.certificate_hash_hex());
//! ```
//!
//! **Certificate.** A self-signed ECDSA P-256 certificate made at start, valid for
//! [`CERTIFICATE_DAYS`] days from then: the rules a browser sets for a certificate it trusts by
//! its hash (`serverCertificateHashes`: ECDSA, at most 14 days), so that no certificate
//! authority is needed on loopback or a LAN. Its SHA-256 goes to the page with its token. A
//! gateway that runs for weeks makes a new one every [`RENEW_AFTER`] ([`certificate`]): read
//! the hash from [`WebTransportGateway::certificate`] when a token is handed out.
//!
//! **Bad input** is refused and counted, never a panic: a datagram over
//! [`GatewayConfig::frame_max`] ends its session ([`GatewayStats::oversized`]); a stream the
//! page opens (Rally uses datagrams only) is refused ([`GatewayStats::garbage`]); sessions
//! over [`GatewayConfig::sessions_max`] are refused before their handshake, a handshake must
//! finish within [`HANDSHAKE_TIMEOUT`], and a path naming no worker is answered 404. A room's
//! datagram larger than the browser's path takes now is dropped as a network would
//! ([`GatewayStats::too_large`]). A closed tab closes its QUIC connection (or stops answering,
//! and the connection times out after [`IDLE_TIMEOUT`]): the session's UDP socket is dropped.
//!
//! **Threads.** One: a tokio runtime on a current thread runs every session; datagrams are
//! small and few (a player's inputs and its snapshots), so one core is plenty.

pub mod certificate;

pub use certificate::{CurrentCertificate, CERTIFICATE_DAYS, RENEW_AFTER};
use rally_driver::gateway::{room_socket, OpenSession};
pub use rally_driver::gateway::{GatewayConfig, GatewayStats};
use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinSet;
use wtransport::endpoint::endpoint_side::Server;
use wtransport::endpoint::IncomingSession;
use wtransport::error::SendDatagramError;
use wtransport::{Connection, Endpoint, Identity, ServerConfig};

/// How long a session's QUIC and WebTransport handshakes may take together.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A session silent for this long (a tab killed, a network gone) ends.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keep-alives from the gateway, so that a quiet but live page is not timed out.
const KEEP_ALIVE: Duration = Duration::from_secs(2);

/// A running WebTransport gateway; dropping it closes every session.
pub struct WebTransportGateway {
    address: SocketAddr,
    certificate: CurrentCertificate,
    renew: Arc<Notify>,
    stats: Arc<GatewayStats>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl WebTransportGateway {
    /// Makes the certificate and listens on `config.listen` (UDP).
    pub fn start(config: GatewayConfig) -> io::Result<Self> {
        let (identity, hash) = certificate::identity(config.listen)?;
        let certificate = CurrentCertificate::new(hash, wall_clock());
        let server = server_config(config.listen, identity)?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        // quinn binds on the runtime it is made in.
        let endpoint = {
            let _inside = runtime.enter();
            Endpoint::server(server)?
        };
        let address = endpoint.local_addr()?;
        let stats = Arc::new(GatewayStats::default());
        let (stop, stopped) = oneshot::channel();
        let renew = Arc::new(Notify::new());
        let renewing = Renewal { certificate: certificate.clone(), now: renew.clone() };
        let counted = stats.clone();
        let thread = std::thread::Builder::new()
            .name("rally-webtransport".into())
            .spawn(move || runtime.block_on(serve(endpoint, config, counted, renewing, stopped)))?;
        let (stop, thread) = (Some(stop), Some(thread));
        Ok(Self { address, certificate, renew, stats, stop, thread })
    }

    /// The URL of the first worker (`/k` after the address names worker k).
    pub fn url(&self) -> String {
        format!("https://{}/", self.address)
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The SHA-256 of the current certificate's DER, which the page passes as
    /// `serverCertificateHashes`.
    pub fn certificate_hash(&self) -> [u8; 32] {
        self.certificate.hash()
    }

    /// [`Self::certificate_hash`] in lowercase hex, as the page receives it.
    pub fn certificate_hash_hex(&self) -> String {
        self.certificate.hash_hex()
    }

    /// The current certificate, shared: its hash changes at each renewal, so whoever hands
    /// out tokens keeps this and reads the hash for each.
    pub fn certificate(&self) -> CurrentCertificate {
        self.certificate.clone()
    }

    /// Makes a new certificate now rather than when [`RENEW_AFTER`] says (an operator's
    /// rotation; tests); [`CurrentCertificate::renewals`] counts it once it serves.
    pub fn renew_now(&self) {
        self.renew.notify_one();
    }

    /// The counters.
    pub fn stats(&self) -> &GatewayStats {
        &self.stats
    }

    /// The counters, shared (for a server's telemetry).
    pub fn shared_stats(&self) -> Arc<GatewayStats> {
        self.stats.clone()
    }
}

impl Drop for WebTransportGateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The wall clock, which certificates are dated on: this gateway is I/O code, as the driver is,
/// and reads it here only (the renewal's schedule takes it as an argument).
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// The server's QUIC and HTTP/3 settings with `identity`.
fn server_config(listen: SocketAddr, identity: Identity) -> io::Result<ServerConfig> {
    Ok(ServerConfig::builder()
        .with_bind_address(listen)
        .with_identity(identity)
        .keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(Some(IDLE_TIMEOUT))
        .map_err(io::Error::other)?
        .build())
}

/// What the serving loop needs to renew the certificate: where its hash is shared, and the
/// signal to renew at once.
struct Renewal {
    certificate: CurrentCertificate,
    now: Arc<Notify>,
}

impl Renewal {
    /// A new certificate for the endpoint's new sessions; a failure is counted, the old one
    /// serves on and the next check tries again.
    fn renew(&self, endpoint: &Endpoint<Server>, listen: SocketAddr) {
        let renewed = certificate::identity(listen).and_then(|(identity, hash)| {
            endpoint.reload_config(server_config(listen, identity)?, false)?;
            self.certificate.renewed(hash, wall_clock())
        });
        if renewed.is_err() {
            self.certificate.failed();
        }
    }
}

/// Accepts sessions until `stop`, renewing the certificate when it is due; then closes every
/// connection.
async fn serve(
    endpoint: Endpoint<Server>,
    config: GatewayConfig,
    stats: Arc<GatewayStats>,
    renewal: Renewal,
    mut stop: oneshot::Receiver<()>,
) {
    let config = Arc::new(config);
    let mut sessions = JoinSet::new();
    let mut check = tokio::time::interval(certificate::RENEW_CHECK);
    loop {
        let incoming = tokio::select! {
            _ = &mut stop => break,
            _ = check.tick() => {
                if certificate::renewal_due(renewal.certificate.made(), wall_clock()) {
                    renewal.renew(&endpoint, config.listen);
                }
                continue;
            }
            _ = renewal.now.notified() => {
                renewal.renew(&endpoint, config.listen);
                continue;
            }
            incoming = endpoint.accept() => incoming,
        };
        while sessions.try_join_next().is_some() {}
        if sessions.len() as u64 >= config.sessions_max {
            GatewayStats::count(&stats.refused);
            incoming.refuse();
            continue;
        }
        sessions.spawn(session(incoming, config.clone(), stats.clone()));
    }
    // Dropping the sessions drops their sockets and closes their connections.
    sessions.shutdown().await;
    endpoint.close(0u32.into(), b"the gateway stopped");
    let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
    stats.add_thread_cpu();
}

/// One page: the handshakes, then datagrams both ways until either side ends.
async fn session(incoming: IncomingSession, config: Arc<GatewayConfig>, stats: Arc<GatewayStats>) {
    let accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(incoming, &config)).await;
    let Ok(Some((connection, room))) = accepted else {
        GatewayStats::count(&stats.refused);
        return;
    };
    let _open = OpenSession::new(&stats);
    let udp = room_socket(room).and_then(UdpSocket::from_std);
    let ended = match udp {
        Ok(udp) => carry(&connection, &udp, &config, &stats).await,
        Err(e) => Err(e),
    };
    if ended.is_err() {
        GatewayStats::count(&stats.broken);
    }
    connection.close(0u32.into(), b"");
}

/// The QUIC and WebTransport handshakes, and the worker the request's path names (none: 404).
async fn handshake(
    incoming: IncomingSession,
    config: &GatewayConfig,
) -> Option<(Connection, SocketAddr)> {
    let request = incoming.await.ok()?;
    let Some(room) = config.room_for(request.path()) else {
        request.not_found().await;
        return None;
    };
    Some((request.accept().await.ok()?, room))
}

/// Carries datagrams until the page goes (`Ok`) or the room's socket breaks (`Err`).
async fn carry(
    connection: &Connection,
    udp: &UdpSocket,
    config: &GatewayConfig,
    stats: &GatewayStats,
) -> io::Result<()> {
    let mut buf = vec![0u8; 65_536];
    loop {
        tokio::select! {
            // Closed by the page, timed out, or refused by us: the session ends.
            datagram = connection.receive_datagram() => {
                let Ok(datagram) = datagram else { return Ok(()) };
                if datagram.len() > config.frame_max {
                    GatewayStats::count(&stats.oversized);
                    return Ok(());
                }
                match udp.send(&datagram).await {
                    Ok(_) => GatewayStats::count(&stats.to_room),
                    // The room is not there (yet): a lost datagram, as on any network.
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(e),
                }
            }
            received = udp.recv(&mut buf) => match received {
                Ok(len) => match connection.send_datagram(&buf[..len]) {
                    Ok(()) => GatewayStats::count(&stats.to_browser),
                    Err(SendDatagramError::TooLarge) => GatewayStats::count(&stats.too_large),
                    Err(SendDatagramError::NotConnected) => return Ok(()),
                    Err(SendDatagramError::UnsupportedByPeer) => {
                        return Err(io::Error::other("the page takes no datagrams"))
                    }
                },
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(e),
            },
            // Rally speaks datagrams only: a stream is refused (dropping it resets it).
            stream = connection.accept_uni() => match stream {
                Ok(_) => GatewayStats::count(&stats.garbage),
                Err(_) => return Ok(()),
            },
            stream = connection.accept_bi() => match stream {
                Ok(_) => GatewayStats::count(&stats.garbage),
                Err(_) => return Ok(()),
            },
        }
    }
}

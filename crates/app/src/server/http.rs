//! The host's telemetry over HTTP: `/metrics` in the Prometheus exposition format
//! ([`super::exposition`]) and `/stats` as JSON.
//!
//! It runs on its own threads, never the workers': it reads the reports the workers publish
//! ten times a second, so a scrape costs the workers nothing but that publication. It bounds
//! its own work against a scraper that never finishes, many scrapers at once, or bytes that
//! are not HTTP: [`HANDLERS`] threads answer one connection each at a time, [`QUEUE_MAX`]
//! accepted connections wait for them and any beyond are closed at once (counted); a request
//! must arrive whole, at most [`REQUEST_MAX`] bytes, within [`REQUEST_TIMEOUT`], or it is
//! answered 400 and closed (counted); an answer that the client does not read within
//! [`WRITE_TIMEOUT`] is abandoned. Every answer closes its connection.

use super::exposition::{self, EndpointCounters};
use crate::agones;
use crate::web::WebStats;
use rally_driver::host::Reporter;
use std::error::Error;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Threads answering requests.
pub const HANDLERS: usize = 2;
/// Accepted connections waiting for a handler at most; more are closed at once.
pub const QUEUE_MAX: usize = 16;
/// The longest request head taken (request line and headers).
pub const REQUEST_MAX: usize = 8 * 1024;
/// How long a request may take to arrive whole.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an answer may take to be written.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the accepting thread pauses after a failed accept (out of file descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The endpoint's own counters, shared by its threads.
#[derive(Debug, Default)]
struct Counters {
    scrapes: AtomicU64,
    refused: AtomicU64,
    bad_requests: AtomicU64,
}

impl Counters {
    fn read(&self) -> EndpointCounters {
        EndpointCounters {
            scrapes: self.scrapes.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            bad_requests: self.bad_requests.load(Ordering::Relaxed),
        }
    }
}

/// A running telemetry endpoint; dropping it stops it.
pub struct Telemetry {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Telemetry {
    /// Serves `reporter`'s figures at `address`.
    pub fn start(address: SocketAddr, reporter: Reporter) -> Result<Self, Box<dyn Error>> {
        Self::start_with(address, reporter, None, Vec::new())
    }

    /// Serves `reporter`'s figures at `address`, the Agones integration's (zeros without) and
    /// the browser gateways' (zeros for a transport not running).
    pub fn start_with(
        address: SocketAddr,
        reporter: Reporter,
        agones: Option<Arc<agones::Stats>>,
        web: WebStats,
    ) -> Result<Self, Box<dyn Error>> {
        let listener = TcpListener::bind(address).map_err(|e| {
            format!("telemetry.listen {address}: {e} (is the port in use? set another, or \"\")")
        })?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let (queue, waiting) = sync_channel::<TcpStream>(QUEUE_MAX);
        let waiting = Arc::new(Mutex::new(waiting));
        let mut threads = Vec::new();
        for k in 0..HANDLERS {
            let (waiting, reporter, counters, agones) =
                (waiting.clone(), reporter.clone(), counters.clone(), agones.clone());
            let web = web.clone();
            threads.push(std::thread::Builder::new().name(format!("rally-telemetry-{k}")).spawn(
                move || {
                    let extras = Extras { agones: agones.as_deref(), web: &web };
                    handle_all(&waiting, &reporter, &counters, &extras)
                },
            )?);
        }
        let stopped = stop.clone();
        threads.push(std::thread::Builder::new().name("rally-telemetry".into()).spawn(
            move || {
                accept(&listener, &stopped, &counters, queue);
            },
        )?);
        Ok(Self { address, stop, threads })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The accepting thread waits in `accept`: a connection of our own wakes it to see the
        // flag (on loopback when it listens on every address).
        let mut wake = self.address;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        // The accepting thread drops the queue's sender as it stops; the handlers then finish
        // what they hold and stop too.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Accepts connections and queues them for the handlers; closes those the queue cannot take.
fn accept(
    listener: &TcpListener,
    stop: &AtomicBool,
    counters: &Counters,
    queue: std::sync::mpsc::SyncSender<TcpStream>,
) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match accepted {
            Ok((stream, _)) => match queue.try_send(stream) {
                Ok(()) => {}
                // Dropping the stream closes it: a scraper retries at its next interval.
                Err(TrySendError::Full(_)) => {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return,
            },
            // A connection reset before it was accepted, or out of file descriptors: wait
            // and go on rather than spin.
            Err(_) => std::thread::sleep(ACCEPT_PAUSE),
        }
    }
}

/// The series beside the host's: the Agones integration's and the browser gateways'.
struct Extras<'a> {
    agones: Option<&'a agones::Stats>,
    web: &'a WebStats,
}

/// A handler's loop: one connection at a time until the queue closes.
fn handle_all(
    waiting: &Mutex<Receiver<TcpStream>>,
    reporter: &Reporter,
    counters: &Counters,
    extras: &Extras,
) {
    loop {
        let next = {
            let receiver = waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            receiver.recv()
        };
        let Ok(stream) = next else { return };
        // An error here is the client's (it hung up, or stopped reading): the endpoint goes on.
        let _ = handle(stream, reporter, counters, extras);
    }
}

/// Reads one request and answers it.
fn handle(
    mut stream: TcpStream,
    reporter: &Reporter,
    counters: &Counters,
    extras: &Extras,
) -> std::io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let Some(path) = read_request(&mut stream)? else {
        counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return respond(&mut stream, "400 Bad Request", "text/plain", b"bad request\n");
    };
    match path.as_str() {
        "/metrics" => {
            counters.scrapes.fetch_add(1, Ordering::Relaxed);
            let mut body = exposition::render(&reporter.report(), &counters.read());
            exposition::agones(&mut body, extras.agones);
            exposition::web(&mut body, extras.web);
            respond(&mut stream, "200 OK", "text/plain; version=0.0.4", body.as_bytes())
        }
        "/stats" => match serde_json::to_string_pretty(&reporter.report()) {
            Ok(json) => respond(&mut stream, "200 OK", "application/json", json.as_bytes()),
            Err(e) => {
                let body = format!("stats: {e}\n");
                respond(&mut stream, "500 Internal Server Error", "text/plain", body.as_bytes())
            }
        },
        _ => respond(&mut stream, "404 Not Found", "text/plain", b"try /metrics or /stats\n"),
    }
}

/// The path of a `GET` whose head arrives whole, within [`REQUEST_MAX`] bytes and
/// [`REQUEST_TIMEOUT`]; `None` for anything else.
fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    // The endpoint is I/O like the driver: it reads the driver's clock.
    let clock = rally_driver::Clock::start();
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = REQUEST_TIMEOUT.saturating_sub(Duration::from_nanos(clock.now().as_nanos()));
        if left.is_zero() || head.len() >= REQUEST_MAX {
            return Ok(None);
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
    }
    Ok(parse_request_line(&head))
}

/// `GET <path> HTTP/1.x` to its path (the query string dropped).
fn parse_request_line(head: &[u8]) -> Option<String> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if method != "GET" || !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return None;
    }
    Some(target.split('?').next().unwrap_or(target).to_string())
}

fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::parse_request_line;

    #[test]
    fn only_a_get_over_http_1_is_a_request() {
        let get = parse_request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(get.as_deref(), Some("/metrics"));
        for garbage in
            [&b"POST /metrics HTTP/1.1\r\n"[..], b"\x16\x03\x01\x02\x00", b"GET /\r\n", b""]
        {
            assert_eq!(parse_request_line(garbage), None, "{garbage:?}");
        }
    }
}

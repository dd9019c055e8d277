//! The dashboard's web server: its static files built into the binary (no build step),
//! `/api/live`, the latest [`super::live::View`] as JSON, which the page polls ten times a
//! second, and `/api/scene`, a scene demo's static geometry ([`super::scene::SceneLayout`]),
//! which the page reads once. In the table-tennis demo it also serves the browser player's
//! page (`/play`, its scripts, three.js), its wasm client (`/play/rally_web_client.wasm`,
//! built by the crate's build script and held in the binary) and a connect token per visit
//! (`/play/token`, with the WebTransport and WebSocket gateways' addresses and the
//! WebTransport certificate's hash): the demo is its own backend. The
//! server only copies the JSON the collector made; it measures its own CPU time so that the
//! demo can show what the dashboard costs.

use rally_driver::cpu::thread_cpu_us;
use rally_proto::TokenKey;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// JavaScript's content type.
const JS: &str = "text/javascript; charset=utf-8";

/// The headers that make a page cross-origin isolated (`SharedArrayBuffer` allowed).
const ISOLATED: [(&str, &str); 2] = [
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Embedder-Policy", "require-corp"),
];

/// The pages, their scripts and their style.
const FILES: [(&str, &str, &str); 10] = [
    ("/play", "text/html; charset=utf-8", include_str!("static/play.html")),
    ("/play.js", JS, include_str!("static/play.js")),
    ("/play/rally-client.js", JS, include_str!("static/rally-client.js")),
    ("/play/transport.js", JS, include_str!("static/transport.js")),
    ("/play/net-worker.js", JS, include_str!("static/net-worker.js")),
    ("/play/ring.js", JS, include_str!("static/ring.js")),
    // three.js, the subset the page uses (scripts/build-three.sh bundles it from npm).
    ("/play/three.min.js", JS, include_str!("static/three.min.js")),
    ("/", "text/html; charset=utf-8", include_str!("static/index.html")),
    ("/dashboard.js", JS, include_str!("static/dashboard.js")),
    ("/dashboard.css", "text/css; charset=utf-8", include_str!("static/dashboard.css")),
];

/// What the collector and the server share.
#[derive(Debug, Default)]
pub struct Shared {
    /// The latest view, as JSON.
    pub json: Mutex<String>,
    /// The server thread's CPU time so far, microseconds.
    pub cpu_us: AtomicU64,
    /// Requests served.
    pub requests: AtomicU64,
    /// The scene's static geometry as JSON (`null` in the table-tennis demo), served once per
    /// page at `/api/scene`.
    pub scene: String,
    /// What the browser player's page needs (set once the room is up; table tennis only).
    pub play: OnceLock<Play>,
}

/// The browser player's backend: tokens for the room and the gateway's address.
#[derive(Debug)]
pub struct Play {
    /// The key tokens are sealed with (the host's).
    pub key: TokenKey,
    /// The room's address, named in each token.
    pub room: SocketAddr,
    /// The WebSocket gateway's URL, told to the page with its token.
    pub gateway: String,
    /// The WebTransport gateway's URL and its current certificate, whose SHA-256 is told to
    /// the page with its token; or why there is none (the page says so, on the WebSocket).
    pub webtransport: Result<(String, crate::web::CurrentCertificate), String>,
    /// The client id of the next token (the bots have the ones below it).
    pub next_client: AtomicU64,
}

/// The browser player's wasm client, as build.rs left it: empty when it could not be built.
const WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rally_web_client.wasm"));

/// How long a page's connect token lasts, seconds: enough to load the page and connect.
const PLAY_TOKEN_TTL_S: u64 = 300;

/// A running dashboard; dropping it stops the server.
pub struct Dashboard {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Dashboard {
    /// Serves on `127.0.0.1:port` (0: any free port).
    pub fn start(port: u16, shared: Arc<Shared>) -> Result<Self, Box<dyn Error>> {
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let server = tiny_http::Server::http(address).map_err(|e| {
            format!(
                "the dashboard cannot listen on {address}: {e} (another demo running? \
                 pass --port N for another port, or --port 0 for any free one)"
            )
        })?;
        let address = server.server_addr().to_ip().ok_or("the dashboard is not on IP")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rally-dashboard".into())
            .spawn(move || serve(&server, &shared, &stopped))?;
        Ok(Self { address, stop, thread: Some(thread) })
    }

    /// The page's address.
    pub fn url(&self) -> String {
        format!("http://{}/", self.address)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, shared: &Shared, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        // The timeout only bounds how long a stop waits.
        if let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(100)) {
            respond(request, shared);
            shared.requests.fetch_add(1, Ordering::Relaxed);
        }
        shared.cpu_us.store(thread_cpu_us(), Ordering::Relaxed);
    }
}

fn respond(request: tiny_http::Request, shared: &Shared) {
    let path = request.url().split('?').next().unwrap_or("/").to_string();
    let (status, content_type, body): (u16, &str, Vec<u8>) = if path == "/api/live" {
        let json = shared.json.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (200, "application/json", json.into())
    } else if let Some(found) = play(&path, shared.play.get()) {
        found
    } else if path == "/api/scene" {
        let json = if shared.scene.is_empty() { "null".to_string() } else { shared.scene.clone() };
        (200, "application/json", json.into())
    } else if let Some((_, kind, text)) = FILES.iter().find(|(at, _, _)| *at == path) {
        (200, *kind, text.as_bytes().to_vec())
    } else {
        (404, "text/plain", format!("no {path} here: the dashboard is at /\n").into())
    };
    let header = tiny_http::Header::from_bytes("Content-Type", content_type)
        .expect("a constant, valid header");
    let no_store = tiny_http::Header::from_bytes("Cache-Control", "no-store")
        .expect("a constant, valid header");
    let mut response = tiny_http::Response::from_data(body)
        .with_status_code(status)
        .with_header(header)
        .with_header(no_store);
    // The player's page is cross-origin isolated, so that its network worker can share memory
    // with it (ring.js): everything it loads is the demo's own.
    if path == "/play" || path.starts_with("/play/") || path == "/play.js" {
        for (name, value) in ISOLATED {
            response.add_header(
                tiny_http::Header::from_bytes(name, value).expect("a constant, valid header"),
            );
        }
    }
    // A browser that went away is its own business; the server goes on.
    let _ = request.respond(response);
}

/// The browser player's own paths: a token or the wasm client (`None`: not a path of its own).
fn play(path: &str, play: Option<&Play>) -> Option<(u16, &'static str, Vec<u8>)> {
    play_with(path, play, WASM)
}

/// [`play`] serving `wasm` as the client.
fn play_with(path: &str, play: Option<&Play>, wasm: &[u8]) -> Option<(u16, &'static str, Vec<u8>)> {
    let text = |status, body: &str| Some((status, "text/plain", body.as_bytes().to_vec()));
    match (path, play) {
        ("/play/rally_web_client.wasm", _) if wasm.is_empty() => text(503, NOT_BUILT),
        ("/play/rally_web_client.wasm", _) => Some((200, "application/wasm", wasm.to_vec())),
        ("/play/token", None) => {
            text(404, "this demo has no browser player: it is table tennis only\n")
        }
        ("/play/token", Some(play)) => Some(token(play)),
        _ => None,
    }
}

/// Whether this binary holds the wasm client (build.rs could build it).
pub fn client_built() -> bool {
    !WASM.is_empty()
}

/// What the page shows when the binary holds no wasm client.
const NOT_BUILT: &str = "this rally was built without its wasm client: add the target with \
    `rustup target add wasm32-unknown-unknown`, then run `cargo demo` again (docs/web.md)\n";

/// A fresh connect token for the next client id, and the gateway's address, as JSON.
fn token(play: &Play) -> (u16, &'static str, Vec<u8>) {
    let client = play.next_client.fetch_add(1, Ordering::Relaxed);
    let protocol = crate::token::LOCAL_PROTOCOL_ID;
    let issued = rally_driver::backend::issue(
        &play.key,
        protocol,
        client,
        0,
        vec![play.room],
        PLAY_TOKEN_TTL_S,
    );
    match issued {
        Ok(token) => {
            // Read per token: the gateway renews its certificate while it runs.
            let wt = play.webtransport.as_ref();
            let (url, hash) = wt.map(|(u, c)| (u, c.hash_hex())).ok().unzip();
            let json = serde_json::json!({
                "token": crate::token::token_to_hex(&token),
                "gateway": play.gateway,
                "webtransport": url,
                "certificate_hash": hash,
                "webtransport_off": wt.err(),
            });
            (200, "application/json", json.to_string().into_bytes())
        }
        Err(e) => (500, "text/plain", format!("no token: {e}\n").into_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> Play {
        Play {
            key: rally_driver::backend::random_key().unwrap(),
            room: SocketAddr::from(([127, 0, 0, 1], 40000)),
            gateway: "ws://127.0.0.1:40001/".into(),
            webtransport: webtransport(),
            next_client: 3.into(),
        }
    }

    #[cfg(feature = "webtransport")]
    fn webtransport() -> Result<(String, crate::web::CurrentCertificate), String> {
        let made = std::time::SystemTime::UNIX_EPOCH;
        let certificate = crate::web::CurrentCertificate::new([0xab; 32], made);
        Ok(("https://127.0.0.1:40002/".into(), certificate))
    }

    #[cfg(not(feature = "webtransport"))]
    fn webtransport() -> Result<(String, crate::web::CurrentCertificate), String> {
        Err("not built".into())
    }

    #[test]
    fn each_visit_gets_a_token_for_the_room_and_the_gateway() {
        let ours = backend();
        let (status, kind, body) = play("/play/token", Some(&ours)).unwrap();
        assert_eq!((status, kind), (200, "application/json"));
        let reply: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(reply["gateway"], "ws://127.0.0.1:40001/");
        if cfg!(feature = "webtransport") {
            assert_eq!(reply["webtransport"], "https://127.0.0.1:40002/");
            assert_eq!(reply["certificate_hash"], "ab".repeat(32));
        } else {
            assert!(reply["webtransport"].is_null(), "no gateway, no URL");
            assert_eq!(reply["webtransport_off"], "not built", "the page is told why");
        }
        let token = crate::token::token_from_hex(reply["token"].as_str().unwrap()).unwrap();
        assert_eq!(token.server_addresses, vec![ours.room]);
        assert_eq!(ours.next_client.load(Ordering::Relaxed), 4, "the next visit is another client");
        // Without a room of table tennis there is no token; other paths are not the player's.
        assert_eq!(play("/play/token", None).unwrap().0, 404);
        assert!(play("/api/live", Some(&ours)).is_none());
    }

    #[test]
    fn the_wasm_client_is_served_or_the_page_is_told_how_to_get_it() {
        let (status, kind, body) =
            play_with("/play/rally_web_client.wasm", None, b"\0asm").unwrap();
        assert_eq!((status, kind, body.as_slice()), (200, "application/wasm", &b"\0asm"[..]));
        let (status, _, body) = play_with("/play/rally_web_client.wasm", None, b"").unwrap();
        assert_eq!(status, 503);
        assert!(String::from_utf8(body).unwrap().contains("rustup target add"));
    }

    #[test]
    fn this_build_holds_a_wasm_module_that_imports_nothing() {
        // The build script builds the client unless told not to (RALLY_WEB_CLIENT=skip).
        if option_env!("RALLY_WEB_CLIENT") == Some("skip") {
            return;
        }
        assert_eq!(WASM.get(..4), Some(&b"\0asm"[..]), "a wasm module ({} bytes)", WASM.len());
        // Section 2 (imports) absent: the module needs nothing from the page but its calls.
        assert!(!sections(WASM).contains(&2), "sections {:?}", sections(WASM));
    }

    /// The ids of a wasm module's sections, in order.
    fn sections(wasm: &[u8]) -> Vec<u8> {
        let (mut at, mut ids) = (8, Vec::new());
        while at < wasm.len() {
            ids.push(wasm[at]);
            at += 1;
            let (mut size, mut shift) = (0usize, 0);
            loop {
                let byte = wasm[at];
                at += 1;
                size |= usize::from(byte & 0x7f) << shift;
                shift += 7;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            at += size;
        }
        ids
    }
}

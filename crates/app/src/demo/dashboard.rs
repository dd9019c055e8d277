//! The dashboard's web server: six static files built into the binary (no build step),
//! `/api/live`, the latest [`super::live::View`] as JSON, which the page polls ten times a
//! second, and `/api/scene`, a scene demo's static geometry ([`super::scene::SceneLayout`]),
//! which the page reads once. With `--play`, it also serves the browser player's page
//! (`/play`, `/play.js`, `/transport.js`), its wasm client (`/play/pkg/...`, read from the directory the flag
//! names) and a connect token per visit (`/play/token`): the demo is its own backend. The
//! server only copies the JSON the collector made; it measures its own CPU time so that the
//! demo can show what the dashboard costs.

use rally_driver::cpu::thread_cpu_us;
use rally_proto::TokenKey;
use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// The pages, their scripts and their style.
const FILES: [(&str, &str, &str); 6] = [
    ("/play", "text/html; charset=utf-8", include_str!("static/play.html")),
    ("/play.js", "text/javascript; charset=utf-8", include_str!("static/play.js")),
    ("/transport.js", "text/javascript; charset=utf-8", include_str!("static/transport.js")),
    ("/", "text/html; charset=utf-8", include_str!("static/index.html")),
    ("/dashboard.js", "text/javascript; charset=utf-8", include_str!("static/dashboard.js")),
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
    /// What the browser player's page needs, with `--play` (set once the room is up).
    pub play: OnceLock<Play>,
}

/// The browser player's backend: tokens for the room, the gateway's address, the wasm files.
#[derive(Debug)]
pub struct Play {
    /// The key tokens are sealed with (the host's).
    pub key: TokenKey,
    /// The room's address, named in each token.
    pub room: SocketAddr,
    /// The WebSocket gateway's URL, told to the page with its token.
    pub gateway: String,
    /// The WebTransport gateway's URL and its certificate's SHA-256 in hex, told to the page
    /// with its token (`None`: the page uses the WebSocket).
    pub webtransport: Option<(String, String)>,
    /// The directory wasm-bindgen wrote the client into.
    pub pkg: PathBuf,
    /// The client id of the next token (the bots have the ones below it).
    pub next_client: AtomicU64,
}

/// The wasm client's files under `/play/pkg/`: only these names are ever read.
const PKG_FILES: [(&str, &str); 2] = [
    ("rally_web_client.js", "text/javascript; charset=utf-8"),
    ("rally_web_client_bg.wasm", "application/wasm"),
];

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
    let response = tiny_http::Response::from_data(body)
        .with_status_code(status)
        .with_header(header)
        .with_header(no_store);
    // A browser that went away is its own business; the server goes on.
    let _ = request.respond(response);
}

/// The browser player's own paths: a token, or one of the wasm client's files (`None`: not a
/// path of the player's).
fn play(path: &str, play: Option<&Play>) -> Option<(u16, &'static str, Vec<u8>)> {
    let text = |status, body: String| Some((status, "text/plain", body.into_bytes()));
    let name = match path.strip_prefix("/play/") {
        Some(name) if path.starts_with("/play/pkg/") || name == "token" => name,
        _ => return None,
    };
    let Some(play) = play else {
        return text(
            404,
            "the demo runs without a browser player: start it with --play DIR\n".into(),
        );
    };
    if name == "token" {
        let client = play.next_client.fetch_add(1, Ordering::Relaxed);
        let protocol = crate::token::LOCAL_PROTOCOL_ID;
        return match rally_driver::backend::issue(
            &play.key,
            protocol,
            client,
            0,
            vec![play.room],
            PLAY_TOKEN_TTL_S,
        ) {
            Ok(token) => {
                let (url, hash) = play.webtransport.clone().unzip();
                let json = serde_json::json!({
                    "token": crate::token::token_to_hex(&token),
                    "gateway": play.gateway,
                    "webtransport": url,
                    "certificate_hash": hash,
                });
                Some((200, "application/json", json.to_string().into_bytes()))
            }
            Err(e) => text(500, format!("no token: {e}\n")),
        };
    }
    let file = name.strip_prefix("pkg/")?;
    let Some((file, kind)) = PKG_FILES.iter().find(|(f, _)| *f == file) else {
        return text(404, format!("no {path}: the client is {PKG_FILES:?}\n"));
    };
    match std::fs::read(play.pkg.join(file)) {
        Ok(bytes) => Some((200, kind, bytes)),
        Err(e) => text(
            500,
            format!("{}: {e} (build it: scripts/build-web.sh)\n", play.pkg.join(file).display()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(pkg: PathBuf) -> Play {
        Play {
            key: rally_driver::backend::random_key().unwrap(),
            room: SocketAddr::from(([127, 0, 0, 1], 40000)),
            gateway: "ws://127.0.0.1:40001/".into(),
            webtransport: Some(("https://127.0.0.1:40002/".into(), "ab".repeat(32))),
            pkg,
            next_client: 3.into(),
        }
    }

    #[test]
    fn each_visit_gets_a_token_for_the_room_and_the_gateway() {
        let ours = backend(PathBuf::from("/nonexistent"));
        let (status, kind, body) = play("/play/token", Some(&ours)).unwrap();
        assert_eq!((status, kind), (200, "application/json"));
        let reply: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(reply["gateway"], "ws://127.0.0.1:40001/");
        assert_eq!(reply["webtransport"], "https://127.0.0.1:40002/");
        assert_eq!(reply["certificate_hash"], "ab".repeat(32));
        let token = crate::token::token_from_hex(reply["token"].as_str().unwrap()).unwrap();
        assert_eq!(token.server_addresses, vec![ours.room]);
        assert_eq!(ours.next_client.load(Ordering::Relaxed), 4, "the next visit is another client");
    }

    #[test]
    fn only_the_clients_own_files_are_served() {
        let dir = std::env::temp_dir().join(format!("rally-play-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rally_web_client_bg.wasm"), b"\0asm").unwrap();
        let ours = backend(dir.clone());
        let (status, kind, body) = play("/play/pkg/rally_web_client_bg.wasm", Some(&ours)).unwrap();
        assert_eq!((status, kind, body.as_slice()), (200, "application/wasm", &b"\0asm"[..]));
        // Any other name is refused before the file system is asked.
        assert_eq!(play("/play/pkg/../../etc/passwd", Some(&ours)).unwrap().0, 404);
        // A missing build says how to make it.
        let (status, _, body) = play("/play/pkg/rally_web_client.js", Some(&ours)).unwrap();
        assert_eq!(status, 500);
        assert!(String::from_utf8(body).unwrap().contains("scripts/build-web.sh"));
        // Without --play the player's paths say how to turn it on; others are not its own.
        assert_eq!(play("/play/token", None).unwrap().0, 404);
        assert!(play("/api/live", Some(&ours)).is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

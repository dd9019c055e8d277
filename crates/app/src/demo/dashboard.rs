//! The dashboard's web server: three static files built into the binary (no build step),
//! `/api/live`, the latest [`super::live::View`] as JSON, which the page polls ten times a
//! second, and `/api/scene`, a scene demo's static geometry ([`super::scene::SceneLayout`]),
//! which the page reads once. The server only copies the JSON the collector made; it
//! measures its own CPU time so that the demo can show what the dashboard costs.

use rally_driver::cpu::thread_cpu_us;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The page, its script and its style.
const FILES: [(&str, &str, &str); 3] = [
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
}

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
    let (status, content_type, body) = if path == "/api/live" {
        let json = shared.json.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (200, "application/json", json)
    } else if path == "/api/scene" {
        let json = if shared.scene.is_empty() { "null".to_string() } else { shared.scene.clone() };
        (200, "application/json", json)
    } else if let Some((_, kind, text)) = FILES.iter().find(|(at, _, _)| *at == path) {
        (200, *kind, text.to_string())
    } else {
        (404, "text/plain", format!("no {path} here: the dashboard is at /\n"))
    };
    let header = tiny_http::Header::from_bytes("Content-Type", content_type)
        .expect("a constant, valid header");
    let no_store = tiny_http::Header::from_bytes("Cache-Control", "no-store")
        .expect("a constant, valid header");
    let response = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header)
        .with_header(no_store);
    // A browser that went away is its own business; the server goes on.
    let _ = request.respond(response);
}

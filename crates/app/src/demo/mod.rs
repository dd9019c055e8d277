//! `rally demo`: table tennis in a rapier3d world on a Rally host on this machine (or, with
//! `--scene FILE`, a room built from a scene file: [`scene`]), played by
//! bot players over real UDP on loopback with sealed connections, and a live web dashboard
//! served by the demo itself: the host's tick by phase against its budgets, each player's
//! RTT and loss, the total-latency histogram against the latency model, and the table seen
//! from above as a player's replicated state shows it. `--headless` prints the same figures.
//! A person joins the table from a browser: the page at `/play` draws it with three.js and
//! runs Rally's client in wasm over WebTransport or a WebSocket ([`crate::web`], docs/web.md);
//! with the default three bots, the far end has a free place for the page.
//!
//! The threads: the host's worker ticks the room; each bot has its own thread, socket and
//! client session; the main thread collects the bots' reports and the host's telemetry into
//! one [`live::View`] ten times a second; the dashboard's thread serves it.

mod bots;
mod dashboard;
mod live;
mod scene;
pub(crate) mod table;

use bots::BotReport;
use dashboard::{Dashboard, Shared};
use live::{Live, View};
use rally_driver::cpu::thread_cpu_us;
use rally_driver::host::Budgets;
use rally_driver::{Host, HostConfig};
use rally_engine::{connection_config, RoomConfig};
use rally_proto::EndpointConfig;
use scene::SceneLayout;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use table::{Roles, TableTennis};

/// Options of `rally demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// No dashboard: print the figures to the terminal only.
    #[arg(long)]
    pub headless: bool,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Bot players (even ones at the near end of the table, odd ones at the far end): with
    /// an odd number the far end has a free place for a person playing from the browser.
    #[arg(long, default_value_t = 3)]
    pub bots: usize,
    /// Server ticks and client frames per second.
    #[arg(long, default_value_t = 120)]
    pub hz: u32,
    /// `fast`, `greedy` or `naive`.
    #[arg(long, default_value = "fast")]
    pub pipeline: String,
    /// The dashboard's port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 7480)]
    pub port: u16,
    /// Write this run's token key (hex) to PATH, so that `rally inspect --key-file PATH`
    /// can open a capture of the demo's sealed traffic.
    #[arg(long, value_name = "PATH")]
    pub key_log: Option<std::path::PathBuf>,
    /// Play in a room built from this scene file (docs/scene.md) instead of table tennis: the
    /// bots send the standard XR input and pick up, carry and throw its grabbable bodies. The
    /// scene's tick rate and pipeline replace --hz and --pipeline.
    #[arg(long, value_name = "FILE")]
    pub scene: Option<std::path::PathBuf>,
}

/// How often the collector builds a view (and the page asks for one).
const VIEW_EVERY: Duration = Duration::from_millis(100);
/// How often the host's telemetry is read (and started afresh) and a line printed.
const WINDOW: Duration = Duration::from_secs(1);

/// Runs the demo until `--duration` passes, Ctrl-C or SIGTERM.
pub fn run(args: &DemoArgs) -> Result<(), Box<dyn Error>> {
    let pipeline = crate::pipeline(&args.pipeline)?;
    if !(10..=1000).contains(&args.hz) || args.bots == 0 || args.bots > 64 {
        return Err("--hz must be 10 to 1000 and --bots 1 to 64, such as --hz 120 --bots 4".into());
    }
    let scene = match &args.scene {
        Some(file) => Some((file.display().to_string(), rally_scene::Scene::load(file)?)),
        None => None,
    };
    // A scene's room settings are the scene's, as `rally server --scene` hosts it.
    let (hz, pipeline, pipeline_name) = match &scene {
        Some((file, scene)) => {
            let s = scene.settings();
            if args.bots > s.players_max as usize {
                return Err(format!(
                    "--bots {}: {file} takes at most {} players (its room.players_max)",
                    args.bots, s.players_max
                )
                .into());
            }
            (s.tick_rate, s.pipeline, format!("{:?}", s.pipeline).to_lowercase())
        }
        None => (args.hz, pipeline, args.pipeline.clone()),
    };
    if args.duration.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
        return Err("--duration must be a positive number of seconds, such as --duration 20".into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())?;
    }
    // The dashboard first: a port in use is the likeliest failure and should cost nothing.
    // Its page may ask before the first report: it gets an empty view, not an error.
    let mut live = Live::new(hz, &pipeline_name, args.bots);
    if scene.is_some() {
        live.set_ends("spawn");
    }
    let layout = match &scene {
        Some((file, scene)) => Some(Arc::new(SceneLayout::new(file, scene)?)),
        None => None,
    };
    let shared =
        Arc::new(Shared { scene: serde_json::to_string(&layout.as_deref())?, ..Shared::default() });
    publish(&shared, live.view(0.0, &Roles::default()));
    let dashboard = match args.headless {
        true => None,
        false => Some(Dashboard::start(args.port, shared.clone())?),
    };
    let roles = Arc::new(Mutex::new(Roles::default()));
    let scene_stats = Arc::new(Mutex::new(rally_scene::SceneStats::default()));
    let key = rally_driver::backend::random_key()?;
    if let Some(path) = &args.key_log {
        std::fs::write(path, crate::token::key_to_hex(&key) + "\n")
            .map_err(|e| format!("--key-log {}: {e}", path.display()))?;
    }
    let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
    let host_config = HostConfig {
        workers: 1,
        key: Some(key.clone()),
        protocol_id: crate::token::LOCAL_PROTOCOL_ID,
        endpoint: endpoint.clone(),
        budgets: budgets(),
        ..HostConfig::default()
    };
    let host = match &scene {
        None => {
            let room = RoomConfig { tick_rate: hz, pipeline, ..RoomConfig::default() };
            Host::start(host_config, TableTennis::new(room, roles.clone()))?
        }
        Some((_, scene)) => {
            let game = crate::game::SceneGame::new(scene.clone(), |id| id + 1)?;
            Host::start(host_config, game.watch(scene_stats.clone()))?
        }
    };
    let address = host.room_address(0);
    let what = match &scene {
        Some((file, _)) => format!("a room of the scene {file}"),
        None => "a table-tennis room".into(),
    };
    println!(
        "rally demo: {what} on {address}, {} bots at {hz} Hz, {pipeline_name} pipeline",
        args.bots
    );
    if let Some(dashboard) = &dashboard {
        println!("dashboard: {}  (Ctrl-C stops)", dashboard.url());
    }
    // The gateway lives as long as the demo.
    let gateway = match (&scene, &dashboard) {
        (None, Some(dashboard)) => Some(start_play(&shared, &key, address, args.bots, dashboard)?),
        _ => None,
    };
    let (reports, received) = mpsc::channel();
    let mut threads = Vec::new();
    for bot in 0..args.bots {
        // The demo is its own backend: a token per bot for room 0.
        let protocol = crate::token::LOCAL_PROTOCOL_ID;
        let token =
            rally_driver::backend::issue(&key, protocol, bot as u64, 0, vec![address], 3600)?;
        let (config, roles, stop, reports) =
            (endpoint.clone(), roles.clone(), stop.clone(), reports.clone());
        let bots = args.bots;
        let thread = std::thread::Builder::new().name(format!("rally-bot-{bot}"));
        let thread = match layout.clone() {
            None => thread
                .spawn(move || bots::play(bot, bots, token, config, hz, roles, stop, reports))?,
            Some(layout) => {
                thread.spawn(move || scene::play(bot, token, config, hz, layout, stop, reports))?
            }
        };
        threads.push(thread);
    }
    drop(reports);
    let scene_stats = scene.is_some().then_some(&*scene_stats);
    let web = gateway.as_ref().map_or_else(Vec::new, |g| g.stats());
    let collector = Collector { live, host: &host, scene: scene_stats, web };
    collector.run(&received, &roles, dashboard.as_ref().map(|_| &*shared), args.duration, &stop);
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for (bot, thread) in threads.into_iter().enumerate() {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("bot {bot}: {e}")),
            Err(_) => failures.push(format!("bot {bot} panicked")),
        }
    }
    for line in gateway.map(crate::web::Web::stop).unwrap_or_default() {
        println!("{line}");
    }
    host.shutdown(Duration::from_millis(200))?;
    drop(dashboard);
    match failures.is_empty() {
        true => Ok(()),
        false => Err(failures.join("; ").into()),
    }
}

/// The browser player's gateways to the room at `address` (WebTransport and WebSocket, on
/// loopback), and its backend in the dashboard. A WebTransport gateway that cannot start
/// leaves the page the WebSocket, and says so.
fn start_play(
    shared: &Shared,
    key: &rally_proto::TokenKey,
    address: std::net::SocketAddr,
    bots: usize,
    dashboard: &Dashboard,
) -> Result<crate::web::Web, Box<dyn Error>> {
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut settings = crate::web::WebSettings {
        websocket: Some(loopback),
        webtransport: Some(loopback),
        sessions_max: 64,
        frame_max: 1500,
    };
    let mut off = None;
    let web = crate::web::Web::start(&settings, &[address]).or_else(|e| {
        println!("{e}: the page will use the WebSocket only");
        off = Some(e);
        settings.webtransport = None;
        crate::web::Web::start(&settings, &[address])
    });
    let web = web.map_err(|e| format!("the browser's gateway cannot listen: {e}"))?;
    let websocket = web.websocket.as_ref().map(|g| g.url()).unwrap_or_default();
    // Without the `webtransport` feature no gateway exists: the first arm cannot be reached.
    #[cfg_attr(not(feature = "webtransport"), allow(unreachable_code))]
    let webtransport = match (&web.webtransport, off) {
        (Some(g), _) => Ok((g.url(), g.certificate())),
        (None, why) => Err(why.unwrap_or_else(|| "not started".into())),
    };
    let wt = webtransport.as_ref().map_or("none".to_string(), |(url, _)| url.clone());
    let play = dashboard::Play {
        key: key.clone(),
        room: address,
        gateway: websocket.clone(),
        webtransport,
        next_client: (bots as u64).into(),
    };
    let _ = shared.play.set(play);
    println!(
        "play in your browser: {}play  (gateways: WebTransport {wt}, WebSocket {websocket})",
        dashboard.url()
    );
    if !dashboard::client_built() {
        println!("  (this build has no wasm client: `rustup target add wasm32-unknown-unknown`)");
    }
    Ok(web)
}

/// Budgets for the demo's room: one table with physics and four players on the fast path
/// (inputs applied and poses sent on arrival, counted in ingest), about twice the p99 this
/// machine measured for each phase. The host's defaults are the W3 reference room's, a room
/// without physics sized for hundreds per core.
fn budgets() -> Budgets {
    let us = Duration::from_micros;
    Budgets {
        ingest: us(100),
        interact: us(10),
        simulate: us(250),
        replicate: us(60),
        transmit: us(20),
        ..Budgets::default()
    }
}

/// Gathers the bots' reports and the host's telemetry into views.
struct Collector<'a> {
    live: Live,
    host: &'a Host,
    /// A scene demo's players' figures (grabs and releases instead of serves and hits).
    scene: Option<&'a Mutex<rally_scene::SceneStats>>,
    /// The browser's gateways' counters (none without the page).
    web: crate::web::WebStats,
}

impl Collector<'_> {
    /// Until `duration`, `stop`, or every bot is gone: a view every [`VIEW_EVERY`] (as JSON
    /// into `shared` when the dashboard runs), a line every [`WINDOW`].
    #[allow(clippy::disallowed_methods)] // the demo runs on the OS clock
    fn run(
        mut self,
        received: &mpsc::Receiver<BotReport>,
        roles: &Mutex<Roles>,
        shared: Option<&Shared>,
        duration: Option<f64>,
        stop: &AtomicBool,
    ) {
        let started = Instant::now();
        let (mut next_view, mut window_start) = (started + VIEW_EVERY, started);
        // CPU the dashboard cost: its server thread's, and this thread's JSON making.
        let (mut json_cpu_us, mut cpu_at_window) = (0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            let seconds = started.elapsed().as_secs_f64();
            if duration.is_some_and(|d| seconds >= d) {
                return;
            }
            match received.recv_timeout(next_view.saturating_duration_since(Instant::now())) {
                Ok(report) => self.live.bot(seconds, report),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() < next_view {
                continue;
            }
            next_view += VIEW_EVERY;
            let window_over = window_start.elapsed() >= WINDOW;
            if window_over {
                self.live.host(&self.host.report(), window_start.elapsed());
                self.host.reset_telemetry();
                let cpu = json_cpu_us + shared.map_or(0, |s| s.cpu_us.load(Ordering::Relaxed));
                let percent =
                    (cpu - cpu_at_window) as f64 / window_start.elapsed().as_micros() as f64;
                self.live.set_dashboard_cpu(percent * 100.0);
                let gateways = self.web.iter().map(|(t, s)| live::GatewayView::new(t, s));
                self.live.set_gateways(gateways.collect());
                (cpu_at_window, window_start) = (cpu, Instant::now());
            }
            let mut roles = table::lock(roles).clone();
            if let Some(stats) = self.scene {
                // The scene's grabs and releases take the places of serves and hits.
                let stats = *stats.lock().unwrap_or_else(|p| p.into_inner());
                (roles.serves, roles.hits) = (stats.grabs, stats.releases);
            }
            let before = thread_cpu_us();
            let view = self.live.view(seconds, &roles);
            if let Some(shared) = shared {
                publish(shared, view);
                json_cpu_us += thread_cpu_us() - before;
            }
            if window_over {
                print_lines(view, self.scene.is_some());
            }
        }
    }
}

/// Hands `view` to the dashboard's server as JSON.
fn publish(shared: &Shared, view: &View) {
    // A view is plain numbers and strings: serializing it cannot fail.
    let json = serde_json::to_string(view).unwrap_or_default();
    *shared.json.lock().unwrap_or_else(|p| p.into_inner()) = json;
}

/// The view as two lines: what the players feel, and what the server spends.
fn print_lines(view: &View, scene: bool) {
    let l = &view.latency;
    let joined = view.clients.iter().filter(|c| c.client.is_some()).count();
    let rtt = view.clients.iter().map(|c| c.rtt_ms).sum::<f64>() / view.clients.len().max(1) as f64;
    let loss = view.clients.iter().map(|c| c.loss_percent).fold(0.0, f64::max);
    println!(
        "{:>5.0} s  {joined}/{} players  latency mean {:.1} p99 {:.1} max {:.1} ms, {:.0}% within \
         model ({:.1} to {:.1})  RTT {rtt:.2} ms  loss {loss:.1}%{}",
        view.seconds,
        view.clients.len(),
        l.mean_ms,
        l.p99_ms,
        l.max_ms,
        l.within_percent,
        l.best_ms,
        l.worst_ms,
        match scene {
            true => format!(
                "  entities {}  grabs {} releases {}",
                view.sandbox.entities.len(),
                view.sandbox.serves,
                view.sandbox.hits
            ),
            false => format!("  serves {} hits {}", view.sandbox.serves, view.sandbox.hits),
        },
    );
    let phases: Vec<String> = view
        .phases
        .iter()
        .map(|p| format!("{} {:.0}/{:.0} ({:.0})", p.name, p.mean_us, p.p99_us, p.budget_us))
        .collect();
    let overruns: u64 = view.phases.iter().map(|p| p.overruns).sum();
    println!(
        "         tick us mean/p99 (budget): {}  overruns {overruns}  late p99 {:.2} ms  \
         host {:.1}% of a core  dashboard {:.2}%",
        phases.join(", "),
        view.lateness_ms.p99,
        view.host_cpu_percent,
        view.dashboard_cpu_percent,
    );
}

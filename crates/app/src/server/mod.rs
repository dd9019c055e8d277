//! `rally server`: the host from a TOML config, its telemetry on HTTP ([`exposition`] for
//! `/metrics`, [`http`] for the endpoint), its logs ([`log`]), a graceful drain on SIGTERM or
//! Ctrl-C. A key it generates is written to an owner-only file, never printed.

pub mod config;
mod exposition;
mod http;
pub mod log;

pub use http::Telemetry;

use crate::agones::{self, Agones, Sdk};
use crate::game::{reference_room, Paddles, SceneGame};
use config::{GameKind, ServerConfig};
use rally_driver::host::DrainReport;
use rally_driver::{Host, HostConfig};
use rally_engine::{Room, RoomConfig};
use rally_proto::EndpointConfig;
use std::error::Error;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Options of `rally server`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// A TOML file overriding the embedded defaults (see `--print-config`).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print the embedded defaults, with a comment on every field, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Host rooms built from this scene file (docs/scene.md): sets `room.game = "scene"` and
    /// `room.scene = FILE` over the config. A bad scene is refused at start.
    #[arg(long, value_name = "FILE")]
    pub scene: Option<PathBuf>,
    /// How log lines are written (overrides `log.format`); levels come from `RUST_LOG` or
    /// `log.level`.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<log::LogFormat>,
    /// Run as an Agones game server (sets `agones.enabled`): the SDK sidecar on
    /// AGONES_SDK_HTTP_PORT, 9358 when unset (docs/operating.md, "Running on Agones").
    #[arg(long)]
    pub agones: bool,
    /// Let browsers in (sets `web.enabled`): a WebTransport and a WebSocket gateway beside the
    /// workers, at `web.webtransport` and `web.websocket` (docs/web.md).
    #[arg(long)]
    pub web: bool,
}

/// Runs the server until SIGTERM or Ctrl-C, then drains.
pub fn run(args: &ServerArgs) -> Result<(), Box<dyn Error>> {
    if args.print_config {
        print!("{}", config::DEFAULT);
        return Ok(());
    }
    let (mut config, source) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading the config {}: {e}", path.display()))?;
            let source = path.display().to_string();
            (ServerConfig::parse(&text, &source)?, source)
        }
        None => (ServerConfig::parse("", "the defaults")?, "the defaults".to_string()),
    };
    if let Some(scene) = &args.scene {
        config.room.game = "scene".into();
        config.room.scene = scene.display().to_string();
    }
    config.agones.enabled |= args.agones;
    config.web.enabled |= args.web;
    let format = match args.log_format {
        Some(format) => format,
        None => config.log_format()?,
    };
    log::init(format, &config.log.level)?;
    contain_panics_in_the_log();
    log_config(&config, &source);
    // Before anything binds: a bad scene stops the server with its file, line, field and fix.
    let scene = config.scene()?;
    // Registered before the host starts, so that no signal finds the default action.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone())?;
    }
    // Under Agones, where clients reach each worker comes from the GameServer, before binding
    // (and before a key is generated, so that a failure leaves no key file behind).
    let fleet = if config.agones.enabled { Some(place_on_agones(&config, &stop)?) } else { None };
    let mut host_config = host_config(&config)?;
    if let Some((settings, _, placement)) = &fleet {
        host_config.workers = settings.workers;
        host_config.worker_ports = placement.bind_ports.clone();
        host_config.public_addresses = placement.public.clone();
    }
    // A generated key is this run's only: its file goes when the server stops.
    let generated =
        (host_config.key.is_some() && config.security.key.is_empty()).then(|| config.key_file());
    let host = start(&config, scene, host_config)?;
    let workers = host.addresses().len();
    for (worker, address) in host.addresses().iter().enumerate() {
        let rooms = format!("id % {workers} = {worker}");
        let public = host.public_addresses()[worker];
        tracing::info!(worker, %address, %public, %rooms, "worker listening");
    }
    let agones = match fleet {
        Some((settings, sdk, _)) => {
            let public = host.public_addresses().to_vec();
            Some(Agones::start(settings, sdk, host.reporter(), public)?)
        }
        None => None,
    };
    let web = match config.web()? {
        Some(settings) => Some(start_web(&config, &settings, &host)?),
        None => None,
    };
    let telemetry = match config.telemetry_address()? {
        Some(address) => {
            let stats = agones.as_ref().map(Agones::stats);
            let web = web.as_ref().map(crate::web::Web::stats).unwrap_or_default();
            let server = http::Telemetry::start_with(address, host.reporter(), stats, web)?;
            let url = format!("http://{}/metrics", server.address());
            tracing::info!(address = %server.address(), url = %url, "telemetry listening");
            Some(server)
        }
        None => None,
    };
    tracing::info!("running; SIGTERM or Ctrl-C drains and stops");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let timeout_ms = config.host.drain_timeout_ms;
    tracing::info!(timeout_ms, "draining");
    // The pages' sessions go with the gateways; their players drain with the rest (Rally's
    // own goodbye cannot reach them any more: they resume or time out).
    drop(web);
    if let Some(agones) = &agones {
        agones.drain();
    }
    let reports = host.shutdown(Duration::from_millis(timeout_ms))?;
    log_drain(&reports);
    if let Some(agones) = agones {
        agones.shutdown(Duration::from_millis(config.agones.shutdown_wait_ms));
    }
    drop(telemetry);
    if let Some(path) = generated {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

/// Finds the sidecar and reads from the GameServer where clients reach each worker: the
/// integration's settings (the number of workers resolved), its sidecar, and the placement.
fn place_on_agones(
    config: &ServerConfig,
    stop: &AtomicBool,
) -> Result<(agones::Settings, Sdk, agones::Placement), Box<dyn Error>> {
    let workers = match config.host.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let port = std::env::var("AGONES_SDK_HTTP_PORT").ok();
    let authority = agones::sdk_authority(port.as_deref())?;
    let settings = config.agones_settings(workers, authority.clone())?;
    let sdk = Sdk { authority, stats: Arc::new(agones::Stats::default()) };
    let policy = settings.port_policy;
    tracing::info!(sdk = %sdk.authority, ?policy, "agones: reading the GameServer");
    let placement = agones::placement(&settings, &sdk, stop)?;
    Ok((settings, sdk, placement))
}

/// The browser's gateways in front of the host's workers; the WebTransport certificate's hash
/// logged and written where the config says, for the game's backend to hand to pages.
fn start_web(
    #[cfg_attr(not(feature = "webtransport"), allow(unused_variables))] config: &ServerConfig,
    settings: &crate::web::WebSettings,
    host: &Host,
) -> Result<crate::web::Web, Box<dyn Error>> {
    let web = crate::web::Web::start(settings, host.addresses())?;
    if let Some(g) = &web.websocket {
        tracing::info!(url = %g.url(), "web: WebSocket gateway listening (/k: worker k)");
    }
    #[cfg(feature = "webtransport")]
    if let Some(g) = &web.webtransport {
        let hash = g.certificate_hash_hex();
        let days = rally_webtransport::CERTIFICATE_DAYS;
        tracing::info!(url = %g.url(), certificate_sha256 = %hash, valid_days = days,
            "web: WebTransport gateway listening (/k: worker k)");
        // Written again at each renewal (every rally_webtransport::RENEW_AFTER).
        let file = &config.web.certificate_hash_file;
        if !file.is_empty() {
            g.certificate()
                .write_to(file)
                .map_err(|e| format!("web.certificate_hash_file {file}: {e}"))?;
        }
    }
    Ok(web)
}

/// The start line: the version and the settings an operator checks first (never the key).
fn log_config(config: &ServerConfig, source: &str) {
    let h = &config.host;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        config = %source,
        workers = h.workers,
        ip = %h.ip,
        port = h.port,
        game = %config.room.game,
        tick_rate = config.room.tick_rate,
        pipeline = %config.room.pipeline,
        rooms_per_worker_max = h.rooms_per_worker_max,
        connections_per_worker_max = h.connections_per_worker_max,
        protocol_id = config.security.protocol_id,
        telemetry = %config.telemetry.listen,
        "rally server starting"
    );
}

/// A panic anywhere (a room's game code, which the host contains) is logged as an error
/// event, with where it happened, instead of a bare message on standard error.
fn contain_panics_in_the_log() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        tracing::error!(thread = %thread, panic = %info, "panic");
    }));
}

fn host_config(config: &ServerConfig) -> Result<HostConfig, Box<dyn Error>> {
    let key = if config.security.danger_plaintext {
        tracing::warn!(
            "security.danger_plaintext is set: no tokens, no encryption; anyone can connect, \
             read and forge traffic. For debugging only."
        );
        None
    } else if config.security.key.is_empty() {
        let key = rally_driver::backend::random_key()?;
        let path = config.key_file();
        write_secret(&path, &crate::token::key_to_hex(&key))
            .map_err(|e| format!("writing the generated key to {}: {e}", path.display()))?;
        tracing::info!(
            path = %path.display(),
            "generated a token key for this run, readable by its owner only (rally token \
             issue --key-file)"
        );
        Some(key)
    } else {
        Some(crate::token::key_from_hex(&config.security.key)?)
    };
    let mut endpoint =
        EndpointConfig { connection: rally_engine::connection_config(), ..Default::default() };
    endpoint.connections_max = config.host.connections_per_worker_max;
    Ok(HostConfig {
        workers: config.host.workers,
        ip: config.host.ip,
        port: config.host.port,
        worker_ports: Vec::new(),
        public_addresses: Vec::new(),
        spin: Duration::from_micros(config.host.spin_us),
        worker_cores: config.host.worker_cores.clone(),
        realtime_priority: (config.host.realtime_priority > 0)
            .then_some(config.host.realtime_priority),
        sleep_step: Duration::from_micros(config.host.sleep_step_us),
        tick_window: Duration::from_micros(config.host.tick_window_us),
        rooms_per_worker_max: config.host.rooms_per_worker_max,
        room_idle_close: Duration::from_secs(config.host.room_idle_close_s),
        budgets: config.budgets(),
        endpoint,
        key,
        protocol_id: config.security.protocol_id,
        telemetry: true,
    })
}

/// Starts the host with the configured game (`scene`: the loaded `room.scene`, for a scene
/// server).
fn start(
    config: &ServerConfig,
    scene: Option<rally_scene::Scene>,
    host: HostConfig,
) -> Result<Host, Box<dyn Error>> {
    let room = RoomConfig {
        tick_rate: config.room.tick_rate,
        pipeline: config.pipeline()?,
        ..RoomConfig::default()
    };
    room.validate()?;
    let master = rooms_secret()?;
    let started = match config.game()? {
        GameKind::Reference => Host::start(host, move |id| {
            // reference_room raises the entity limit to fit its bodies, so spawning cannot fail.
            reference_room(room.clone(), room_seed(master, id)).expect("the reference room fits")
        })?,
        GameKind::Paddles => {
            Host::start(host, move |id| paddles_room(room.clone(), room_seed(master, id)))?
        }
        GameKind::Scene => {
            let scene = scene.ok_or("room.game = \"scene\" without a loaded scene")?;
            let game = SceneGame::new(scene, move |id| room_seed(master, id))
                .map_err(|e| format!("{}: {e}", config.room.scene))?;
            log_scene(&config.room.scene, game.scene());
            Host::start(host, game)?
        }
    };
    Ok(started)
}

/// The secret every room's seed derives from, from the OS's randomness: a server whose OS
/// gives none refuses to start rather than run its rooms on guessable session secrets.
fn rooms_secret() -> Result<u64, Box<dyn Error>> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("the OS gave no randomness for the rooms' session secrets: {e}"))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Room `id`'s seed for its session secrets: the rooms' secret mixed with the id
/// (SplitMix64's finalizer), so that no two rooms, nor two runs, share them.
fn room_seed(secret: u64, id: u64) -> u64 {
    let mut z = secret ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The demo's table-tennis room.
fn paddles_room(config: RoomConfig, seed: u64) -> Room<Paddles> {
    // `start` validated the config.
    let mut room = Room::new(config, Paddles::new(1), seed).expect("a valid room config");
    let mut game = std::mem::replace(room.simulation_mut(), Paddles::new(1));
    // A table and a ball in an empty world cannot exceed its entity limit.
    game.set_table(room.world_mut()).expect("room for the table");
    *room.simulation_mut() = game;
    room
}

/// What a scene server hosts, and that the room settings are the scene's.
fn log_scene(file: &str, scene: &rally_scene::Scene) {
    let s = scene.settings();
    tracing::info!(
        file,
        colliders = scene.colliders().len(),
        bodies = scene.bodies().len(),
        tick_rate = s.tick_rate,
        pipeline = ?s.pipeline,
        players_max = s.players_max,
        client_bytes_per_tick_max = s.client_bytes_per_tick_max,
        "scene hosted (its [room] settings; the config's room.tick_rate and room.pipeline apply \
         to the other games)"
    );
}

fn log_drain(reports: &[DrainReport]) {
    let connections: usize = reports.iter().map(|r| r.connections).sum();
    let drained: usize = reports.iter().map(|r| r.drained).sum();
    let undelivered: usize = reports.iter().map(|r| r.undelivered).sum();
    tracing::info!(
        connections,
        drained,
        undelivered,
        "stopped: clients told the server is shutting down (drained: with every reliable \
         message acknowledged)"
    );
}

/// Writes `text` to `path`, readable and writable by its owner only (mode 0600), replacing
/// what was there.
fn write_secret(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let mut file = options.open(path)?;
        // A file that existed keeps its mode through `open`: narrow it before writing.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        writeln!(file, "{text}")
    }
    #[cfg(not(unix))]
    {
        let mut file = options.open(path)?;
        writeln!(file, "{text}")
    }
}

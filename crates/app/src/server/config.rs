//! `rally server`'s configuration: embedded defaults (default.toml), overridden field by field
//! by the operator's file. An unknown field, a wrong type or a value out of range is an error
//! that names the field and says what it takes.

use rally_driver::host::Budgets;
use rally_engine::Pipeline;
use rally_scene::Scene;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The defaults, as shipped.
pub const DEFAULT: &str = include_str!("default.toml");

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Workers and sockets.
    pub host: HostSection,
    /// Tokens and encryption.
    pub security: SecuritySection,
    /// The rooms' game.
    pub room: RoomSection,
    /// Per room-tick budgets.
    pub budgets: BudgetSection,
    /// The metrics endpoint.
    pub telemetry: TelemetrySection,
    /// Logs.
    pub log: LogSection,
    /// Running as an Agones game server.
    pub agones: AgonesSection,
    /// The browser's gateways.
    pub web: WebSection,
}

/// `[web]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSection {
    pub enabled: bool,
    pub webtransport: String,
    pub websocket: String,
    pub sessions_max: u64,
    pub datagram_max: usize,
    /// Read only where there is a WebTransport gateway to have a certificate.
    #[cfg_attr(not(feature = "webtransport"), allow(dead_code))]
    pub certificate_hash_file: String,
}

/// `[host]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    pub workers: usize,
    pub ip: IpAddr,
    pub port: u16,
    pub spin_us: u64,
    pub worker_cores: Vec<usize>,
    pub realtime_priority: u8,
    pub sleep_step_us: u64,
    pub tick_window_us: u64,
    pub rooms_per_worker_max: usize,
    pub room_idle_close_s: u64,
    pub drain_timeout_ms: u64,
    pub connections_per_worker_max: usize,
}

/// `[security]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySection {
    pub key: String,
    pub protocol_id: u64,
    pub danger_plaintext: bool,
    pub key_file: String,
}

/// `[room]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomSection {
    pub game: String,
    pub scene: String,
    pub tick_rate: u32,
    pub pipeline: String,
}

/// `[budgets]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSection {
    pub ingest_us: u64,
    pub interact_us: u64,
    pub simulate_us: u64,
    pub replicate_us: u64,
    pub transmit_us: u64,
    pub lateness_us: u64,
}

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    pub listen: String,
}

/// `[log]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    pub format: String,
    pub level: String,
}

/// `[agones]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgonesSection {
    pub enabled: bool,
    pub port_policy: String,
    pub port_prefix: String,
    pub health_period_ms: u64,
    pub late_ticks_ratio_max: f64,
    pub retry_max_ms: u64,
    pub placement_wait_s: u64,
    pub shutdown_wait_ms: u64,
    pub ready_when_empty_s: u64,
}

/// The games a server can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GameKind {
    /// The W3 reference room.
    Reference,
    /// Table tennis in rapier3d.
    Paddles,
    /// A room built from the scene file `room.scene` (rally-scene, docs/scene.md).
    Scene,
}

impl ServerConfig {
    /// The defaults overridden by `text` (a TOML file's contents, named `source` in errors).
    pub fn parse(text: &str, source: &str) -> Result<Self, String> {
        let mut merged: toml::Table = DEFAULT.parse().map_err(|e| format!("defaults: {e}"))?;
        let overrides: toml::Table = text.parse().map_err(|e| format!("{source}: {e}"))?;
        merge(&mut merged, overrides, "", source)?;
        let config: ServerConfig = merged.try_into().map_err(|e| format!("{source}: {e}"))?;
        config.check().map_err(|e| format!("{source}: {e}"))?;
        Ok(config)
    }

    /// Checks what types cannot: ranges and names.
    fn check(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.room.tick_rate) {
            return Err("room.tick_rate must be 1 to 1000 ticks a second, such as 128".into());
        }
        self.pipeline()?;
        self.game()?;
        if !self.security.key.is_empty() {
            crate::token::key_from_hex(&self.security.key)
                .map_err(|e| format!("security.key: {e} (make one with `rally token keygen`)"))?;
        }
        if !(1..=1_000_000).contains(&self.host.sleep_step_us) {
            return Err("host.sleep_step_us must be 1 to 1000000: a step in microseconds, or \
                        2000 or more for none (one sleep to each deadline)"
                .into());
        }
        if self.host.tick_window_us > 2_000 {
            return Err("host.tick_window_us must be 0 (each room at its own deadline) to 2000 \
                        microseconds"
                .into());
        }
        if self.host.spin_us > 10_000 {
            return Err("host.spin_us must be 0 (no spin) to 10000 microseconds".into());
        }
        if self.host.realtime_priority > 99 {
            return Err("host.realtime_priority must be 0 (the ordinary policy) to 99".into());
        }
        if self.host.rooms_per_worker_max == 0 || self.host.connections_per_worker_max == 0 {
            return Err("host.rooms_per_worker_max and host.connections_per_worker_max must be \
                        at least 1"
                .into());
        }
        if self.host.workers > 1 && self.host.port != 0 {
            let last = u32::from(self.host.port) + self.host.workers as u32 - 1;
            if last > u32::from(u16::MAX) {
                return Err(format!("host.port: workers need ports up to {last}, past 65535"));
            }
        }
        self.telemetry_address()?;
        self.port_policy()?;
        let a = &self.agones;
        if !(1..=60_000).contains(&a.health_period_ms)
            || !(0.0..=1.0).contains(&a.late_ticks_ratio_max)
        {
            return Err("agones.health_period_ms must be 1 to 60000 and \
                        agones.late_ticks_ratio_max 0 to 1"
                .into());
        }
        self.log_format()?;
        self.web()?;
        super::log::filter(&self.log.level).map_err(|e| format!("log.level: {e}"))?;
        Ok(())
    }

    /// The rooms' pipeline.
    pub fn pipeline(&self) -> Result<Pipeline, String> {
        match self.room.pipeline.as_str() {
            "fast" => Ok(Pipeline::Fast),
            "greedy" => Ok(Pipeline::Greedy),
            "naive" => Ok(Pipeline::Naive),
            other => {
                Err(format!("room.pipeline = {other:?}: use \"fast\", \"greedy\" or \"naive\""))
            }
        }
    }

    /// The rooms' game.
    pub fn game(&self) -> Result<GameKind, String> {
        match self.room.game.as_str() {
            "reference" => Ok(GameKind::Reference),
            "paddles" => Ok(GameKind::Paddles),
            "scene" => Ok(GameKind::Scene),
            other => Err(format!(
                "room.game = {other:?}: use \"reference\", \"paddles\" or \"scene\" (with \
                 room.scene naming the scene file)"
            )),
        }
    }

    /// The scene a `room.game = "scene"` server hosts, loaded and checked; `None` for the other
    /// games. Its error names the scene file, the line, the field and the fix (rally-scene's
    /// [`SceneError`](rally_scene::SceneError)).
    pub fn scene(&self) -> Result<Option<Scene>, String> {
        match (self.game()?, self.room.scene.as_str()) {
            (GameKind::Scene, "") => Err("room.game = \"scene\" needs room.scene, the scene \
                                          file to host (or pass --scene FILE)"
                .into()),
            (GameKind::Scene, file) => Scene::load(file).map(Some).map_err(|e| e.to_string()),
            (_, "") => Ok(None),
            (game, file) => Err(format!(
                "room.scene = {file:?} is set but room.game is {game:?}: set room.game = \
                 \"scene\" to host it, or remove room.scene"
            )),
        }
    }

    /// Where telemetry is served, if anywhere.
    pub fn telemetry_address(&self) -> Result<Option<SocketAddr>, String> {
        if self.telemetry.listen.is_empty() {
            return Ok(None);
        }
        self.telemetry.listen.parse().map(Some).map_err(|_| {
            format!(
                "telemetry.listen = {:?}: use an address and port such as \"127.0.0.1:9100\", \
                 or \"\" to serve nothing",
                self.telemetry.listen
            )
        })
    }

    /// How workers' ports reach the outside under Agones.
    pub fn port_policy(&self) -> Result<crate::agones::PortPolicy, String> {
        match self.agones.port_policy.as_str() {
            "dynamic" => Ok(crate::agones::PortPolicy::Dynamic),
            "passthrough" => Ok(crate::agones::PortPolicy::Passthrough),
            other => {
                Err(format!("agones.port_policy = {other:?}: use \"dynamic\" or \"passthrough\""))
            }
        }
    }

    /// The Agones integration's settings for `workers` workers and the sidecar at `sdk`.
    pub fn agones_settings(
        &self,
        workers: usize,
        sdk: String,
    ) -> Result<crate::agones::Settings, String> {
        let a = &self.agones;
        let scene = (self.game()? == GameKind::Scene).then(|| {
            let path = std::path::Path::new(&self.room.scene);
            path.file_stem().map_or(String::new(), |s| s.to_string_lossy().into_owned())
        });
        Ok(crate::agones::Settings {
            sdk,
            health_period: Duration::from_millis(a.health_period_ms),
            late_ticks_ratio_max: a.late_ticks_ratio_max,
            port_policy: self.port_policy()?,
            port_prefix: a.port_prefix.clone(),
            retry_max: Duration::from_millis(a.retry_max_ms),
            placement_wait: Duration::from_secs(a.placement_wait_s),
            workers,
            rooms_per_worker_max: self.host.rooms_per_worker_max,
            connections_per_worker_max: self.host.connections_per_worker_max,
            scene,
            ready_when_empty: Duration::from_secs(a.ready_when_empty_s),
        })
    }

    /// The browser's gateways, if `[web]` is enabled.
    pub fn web(&self) -> Result<Option<crate::web::WebSettings>, String> {
        let w = &self.web;
        let address = |field: &str, value: &str| match value {
            "" => Ok(None),
            v => v.parse().map(Some).map_err(|_| {
                format!(
                    "web.{field} = {v:?}: use an address and port such as \"0.0.0.0:7443\", \
                     or \"\" for none"
                )
            }),
        };
        let settings = crate::web::WebSettings {
            webtransport: address("webtransport", &w.webtransport)?,
            websocket: address("websocket", &w.websocket)?,
            sessions_max: w.sessions_max,
            frame_max: w.datagram_max,
        };
        if !(1..=100_000).contains(&w.sessions_max) || !(200..=65_000).contains(&w.datagram_max) {
            return Err(
                "web.sessions_max must be 1 to 100000 and web.datagram_max 200 to 65000".into()
            );
        }
        Ok(w.enabled.then_some(settings))
    }

    /// How log lines are written.
    pub fn log_format(&self) -> Result<super::log::LogFormat, String> {
        self.log.format.parse()
    }

    /// Where a generated key is written: `security.key_file`, or `rally-server-<pid>.key` in
    /// the system's temporary directory.
    pub fn key_file(&self) -> std::path::PathBuf {
        if self.security.key_file.is_empty() {
            std::env::temp_dir().join(format!("rally-server-{}.key", std::process::id()))
        } else {
            std::path::PathBuf::from(&self.security.key_file)
        }
    }

    /// The budgets.
    pub fn budgets(&self) -> Budgets {
        let us = Duration::from_micros;
        let b = &self.budgets;
        Budgets {
            ingest: us(b.ingest_us),
            interact: us(b.interact_us),
            simulate: us(b.simulate_us),
            replicate: us(b.replicate_us),
            transmit: us(b.transmit_us),
            lateness: us(b.lateness_us),
        }
    }
}

/// Lays `overrides` over `base`, refusing keys `base` does not have (naming them and the keys
/// that exist).
fn merge(
    base: &mut toml::Table,
    overrides: toml::Table,
    path: &str,
    source: &str,
) -> Result<(), String> {
    for (key, value) in overrides {
        let name = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        let Some(existing) = base.get_mut(&key) else {
            let known: Vec<&str> = base.keys().map(String::as_str).collect();
            return Err(format!(
                "{source}: unknown field `{name}`; {} has: {}",
                if path.is_empty() { "the config".to_string() } else { format!("[{path}]") },
                known.join(", ")
            ));
        };
        match (existing, value) {
            (toml::Value::Table(inner), toml::Value::Table(value)) => {
                merge(inner, value, &name, source)?
            }
            (toml::Value::Table(_), _) => {
                return Err(format!("{source}: `{name}` must be a table ([{name}])"));
            }
            (existing, value) => *existing = value,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_parse_and_a_file_overrides_them_field_by_field() {
        let config = ServerConfig::parse("", "empty").expect("defaults are valid");
        assert_eq!((config.room.tick_rate, config.host.port), (128, 7777));
        let config = ServerConfig::parse("[host]\nworkers = 3\n", "file").expect("valid");
        assert_eq!((config.host.workers, config.host.port), (3, 7777));
    }

    #[test]
    fn the_default_sleep_policy_is_one_sleep_and_a_step_can_be_set() {
        // Goal: the default worker sleeps once to each deadline (no steps), and a file can
        // ask for steps. Method: the host settings built from the defaults and from a file
        // (in plaintext, so that no key file is written).
        let plain = "[security]\ndanger_plaintext = true\n";
        let config = ServerConfig::parse(plain, "file").expect("defaults are valid");
        assert_eq!(config.host.sleep_step_us, 2000);
        let host = super::super::host_config(&config).expect("a host config");
        assert!(host.sleep_step >= rally_driver::STEPPED_STRETCH, "no steps by default");
        assert_eq!(host.spin, std::time::Duration::ZERO);
        let text = format!("{plain}[host]\nsleep_step_us = 200\n");
        let stepped = ServerConfig::parse(&text, "file").expect("a valid step");
        let host = super::super::host_config(&stepped).expect("a host config");
        assert_eq!(host.sleep_step, std::time::Duration::from_micros(200));
        assert!(host.validate().is_ok());
    }

    #[test]
    fn the_tick_window_is_the_hosts_default_and_can_be_set() {
        // Goal: the file's default tick window is the host's own default, and a file can
        // set another (0: each room at its own deadline).
        let plain = "[security]\ndanger_plaintext = true\n";
        let config = ServerConfig::parse(plain, "file").expect("defaults are valid");
        let host = super::super::host_config(&config).expect("a host config");
        assert_eq!(host.tick_window, rally_driver::host::TICK_WINDOW_DEFAULT);
        let text = format!("{plain}[host]\ntick_window_us = 0\n");
        let each = ServerConfig::parse(&text, "file").expect("a valid window");
        let host = super::super::host_config(&each).expect("a host config");
        assert_eq!(host.tick_window, std::time::Duration::ZERO);
        assert!(host.validate().is_ok());
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            ("[host]\nwrkers = 2\n", "host.wrkers"),
            ("[hots]\nworkers = 2\n", "hots"),
            ("[host]\nworkers = \"two\"\n", "workers"),
            ("[room]\ntick_rate = 0\n", "room.tick_rate"),
            ("[host]\nsleep_step_us = 0\n", "host.sleep_step_us"),
            ("[host]\nsleep_step_us = 1000001\n", "host.sleep_step_us"),
            ("[host]\nsleep_step_us = -5\n", "sleep_step_us"),
            ("[host]\nspin_us = 20000\n", "host.spin_us"),
            ("[host]\ntick_window_us = 2001\n", "host.tick_window_us"),
            ("[host]\nrealtime_priority = 100\n", "host.realtime_priority"),
            ("[room]\npipeline = \"quick\"\n", "room.pipeline"),
            ("[room]\ngame = \"chess\"\n", "room.game"),
            ("[security]\nkey = \"abc\"\n", "security.key"),
            ("[telemetry]\nlisten = \"nowhere\"\n", "telemetry.listen"),
            ("[log]\nformat = \"xml\"\n", "log.format"),
            ("[log]\nlevel = \"loud\"\n", "log.level"),
            ("[agones]\nport_policy = \"static\"\n", "agones.port_policy"),
            ("[agones]\nlate_ticks_ratio_max = 2.0\n", "agones.late_ticks_ratio_max"),
            ("[web]\nwebtransport = \"port 7443\"\n", "web.webtransport"),
            ("[web]\nwebsocket = \"7443\"\n", "web.websocket"),
            ("[web]\nsessions_max = 0\n", "web.sessions_max"),
            ("host = 3\n", "host"),
            ("[host\n", "file"),
        ];
        for (text, field) in cases {
            let error = ServerConfig::parse(text, "file").expect_err(text);
            assert!(error.contains(field), "{text:?} gave {error:?}, which does not name {field}");
        }
    }

    #[test]
    fn the_agones_deployment_config_is_valid_and_turns_agones_on() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/agones/server.toml");
        let text = std::fs::read_to_string(path).expect("deploy/agones/server.toml");
        let config = ServerConfig::parse(&text, path).expect("valid");
        assert!(config.agones.enabled);
        assert_eq!(config.port_policy(), Ok(crate::agones::PortPolicy::Dynamic));
    }

    #[test]
    fn a_bad_scene_is_refused_with_its_file_line_field_and_fix() {
        // Goal: a scene server never starts on a scene it cannot host, and the operator reads
        // where the scene is wrong and how to fix it. Method: a scene with a mass out of range
        // written to a temporary file, then a scene game with no file, and a file with no scene
        // game; last, the example sandbox loads.
        let file =
            std::env::temp_dir().join(format!("rally-server-scene-{}.toml", std::process::id()));
        std::fs::write(&file, "[room]\ntick_rate = 120\n\n[[bodies]]\nsphere = 0.1\nmass_kg = 0\n")
            .unwrap();
        let text = format!("[room]\ngame = \"scene\"\nscene = {:?}\n", file.display().to_string());
        let config = ServerConfig::parse(&text, "server.toml").expect("the config itself is valid");
        let error = config.scene().expect_err("a massless body");
        let _ = std::fs::remove_file(&file);
        let place = format!("{}:6:11: bodies[0].mass_kg: 0 is out of range", file.display());
        assert!(error.starts_with(&place), "{error}");
        assert!(error.contains("fix: give a value from 0.001 to 100000"), "{error}");

        let config = ServerConfig::parse("[room]\ngame = \"scene\"\n", "f").unwrap();
        assert!(config.scene().expect_err("no file").contains("needs room.scene"));
        let config = ServerConfig::parse("[room]\nscene = \"a.toml\"\n", "f").unwrap();
        assert!(config.scene().expect_err("not a scene game").contains("room.game"));

        let sandbox = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes/sandbox.toml");
        let text = format!("[room]\ngame = \"scene\"\nscene = {sandbox:?}\n");
        let scene = ServerConfig::parse(&text, "f").unwrap().scene().unwrap().expect("a scene");
        assert_eq!(scene.settings().players_max, 10);
    }
}

//! `/metrics`: a host's report in the Prometheus text exposition format (version 0.0.4).
//!
//! Every series is per worker (`worker` label), so that a fleet's dashboards sum or take
//! quantiles across workers and hosts: counters in base units (`_seconds_total`,
//! `_bytes_total`), gauges for what a worker holds, and histograms with fixed buckets for
//! tick phases, lateness and the clients' connection quality. No series is per room or per
//! connection: a scrape's size grows with workers, not with rooms. The names and their
//! meaning are documented in docs/operating.md; `tests/telemetry.rs` checks both agree.

use rally_driver::host::telemetry::{Buckets, TransportCounters, ROOM_SCOPES, SCOPES};
use rally_driver::host::{HostReport, WorkerReport};
use std::fmt::Write;

/// The endpoint's own counters, rendered with the host's.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointCounters {
    /// `/metrics` requests answered.
    pub scrapes: u64,
    /// Connections closed at once because every handler was busy and the queue full.
    pub refused: u64,
    /// Requests that were not HTTP, too long, or too slow to arrive.
    pub bad_requests: u64,
}

/// The kind of a series, as `# TYPE` names it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A series of one value per worker, read from its report.
type PerWorker = (&'static str, Kind, &'static str, fn(&WorkerReport) -> f64);

/// The plain per-worker series.
const PER_WORKER: [PerWorker; 16] = [
    ("rally_rooms", Kind::Gauge, "Rooms open on the worker.", |w| w.rooms as f64),
    (
        "rally_players",
        Kind::Gauge,
        "Clients in the worker's rooms (connected or resumable).",
        |w| w.players as f64,
    ),
    ("rally_connections", Kind::Gauge, "Connections routed to the worker's rooms.", |w| {
        w.connections as f64
    }),
    ("rally_rooms_opened_total", Kind::Counter, "Rooms opened.", |w| w.rooms_opened as f64),
    ("rally_rooms_closed_total", Kind::Counter, "Rooms closed (idle or failed).", |w| {
        w.rooms_closed as f64
    }),
    ("rally_rooms_failed_total", Kind::Counter, "Rooms whose game code panicked.", |w| {
        w.rooms_failed as f64
    }),
    ("rally_room_ticks_total", Kind::Counter, "Room-ticks run.", |w| w.room_ticks as f64),
    (
        "rally_late_ticks_total",
        Kind::Counter,
        "Room-ticks that started later than the lateness budget.",
        |w| w.late_ticks as f64,
    ),
    (
        "rally_worker_cpu_seconds_total",
        Kind::Counter,
        "CPU time of the worker's thread (user and system).",
        |w| w.cpu_us as f64 * 1e-6,
    ),
    (
        "rally_datagrams_received_total",
        Kind::Counter,
        "Datagrams read from the worker's socket.",
        |w| w.transport.traffic.datagrams_in as f64,
    ),
    (
        "rally_received_bytes_total",
        Kind::Counter,
        "UDP payload bytes read from the worker's socket.",
        |w| w.transport.traffic.bytes_in as f64,
    ),
    (
        "rally_datagrams_sent_total",
        Kind::Counter,
        "Datagrams handed to the worker's socket.",
        |w| w.transport.traffic.datagrams_out as f64,
    ),
    (
        "rally_sent_bytes_total",
        Kind::Counter,
        "UDP payload bytes handed to the worker's socket.",
        |w| w.transport.traffic.bytes_out as f64,
    ),
    (
        "rally_handshakes_started_total",
        Kind::Counter,
        "Connection requests from new addresses (retries count again).",
        |w| w.transport.handshakes_started as f64,
    ),
    ("rally_handshakes_completed_total", Kind::Counter, "Connections opened.", |w| {
        w.transport.handshakes_completed as f64
    }),
    ("rally_resends_total", Kind::Counter, "Reliable units sent again.", |w| {
        w.transport.resends as f64
    }),
];

/// A counter family split by a `reason` label.
type Reasons =
    (&'static str, &'static str, &'static [(&'static str, fn(&TransportCounters) -> u64)]);

const BY_REASON: [Reasons; 3] = [
    (
        "rally_handshakes_refused_total",
        "Handshakes refused, by reason.",
        &[
            ("expired", |c| c.refused_expired),
            ("forged", |c| c.refused_forged),
            ("wrong_server", |c| c.refused_wrong_server),
            ("replay", |c| c.refused_replay),
            ("missing_token", |c| c.refused_missing),
            ("token_table_full", |c| c.refused_token_table_full),
            ("server_full", |c| c.refused_server_full),
            ("bad_cookie", |c| c.refused_bad_cookie),
        ],
    ),
    (
        "rally_packets_open_failed_total",
        "Packets to sealed connections that failed to open, by reason.",
        &[
            ("unauthenticated", |c| c.open_failed_unauthenticated),
            ("replayed", |c| c.open_failed_replayed),
        ],
    ),
    (
        "rally_datagrams_dropped_total",
        "Datagrams dropped before reaching a connection, by reason.",
        &[
            ("malformed", |c| c.dropped_malformed),
            ("unknown_peer", |c| c.dropped_unknown_peer),
            ("rate_limited", |c| c.dropped_rate_limited),
            ("rate_table_full", |c| c.dropped_rate_table_full),
            ("oversized", |c| c.dropped_oversized),
            ("send_error", |c| c.send_errors),
        ],
    ),
];

/// Renders the host's figures and the endpoint's own.
pub fn render(report: &HostReport, endpoint: &EndpointCounters) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let workers = &report.workers;
    header(&mut out, "rally_workers", Kind::Gauge, "Worker threads reporting.");
    let _ = writeln!(out, "rally_workers {}", workers.len());
    for (name, kind, help, value) in PER_WORKER {
        header(&mut out, name, kind, help);
        for w in workers {
            let _ = writeln!(out, "{name}{{worker=\"{}\"}} {}", w.worker, value(w));
        }
    }
    for (name, help, reasons) in BY_REASON {
        header(&mut out, name, Kind::Counter, help);
        for w in workers {
            for (reason, value) in reasons {
                let (id, n) = (w.worker, value(&w.transport));
                let _ = writeln!(out, "{name}{{worker=\"{id}\",reason=\"{reason}\"}} {n}");
            }
        }
    }
    scopes(&mut out, workers);
    histograms(&mut out, workers);
    endpoint_counters(&mut out, endpoint);
    out
}

/// Time per scope and overruns per phase.
fn scopes(out: &mut String, workers: &[WorkerReport]) {
    let name = "rally_scope_seconds_total";
    header(out, name, Kind::Counter, "Worker time per scope of the work (transport and rooms).");
    for w in workers {
        for scope in SCOPES {
            let seconds = w.scope_nanos[scope.index()] as f64 * 1e-9;
            let (id, scope) = (w.worker, scope.name());
            let _ = writeln!(out, "{name}{{worker=\"{id}\",scope=\"{scope}\"}} {seconds}");
        }
    }
    let name = "rally_budget_overruns_total";
    header(out, name, Kind::Counter, "Room-ticks whose phase took longer than its budget.");
    for w in workers {
        for (k, phase) in ROOM_SCOPES.iter().enumerate() {
            let (id, phase, n) = (w.worker, phase.name(), w.overruns[k]);
            let _ = writeln!(out, "{name}{{worker=\"{id}\",phase=\"{phase}\"}} {n}");
        }
    }
}

/// The fixed-bucket histograms.
fn histograms(out: &mut String, workers: &[WorkerReport]) {
    let name = "rally_tick_phase_seconds";
    header(out, name, Kind::Histogram, "Time per room-tick of each phase.");
    for w in workers {
        for (phase, buckets) in ROOM_SCOPES.iter().zip(&w.histograms.phase_seconds) {
            let labels = format!("worker=\"{}\",phase=\"{}\"", w.worker, phase.name());
            histogram(out, name, &labels, buckets);
        }
    }
    type Of = fn(&WorkerReport) -> &Buckets;
    let families: [(&str, &str, Of); 6] = [
        ("rally_tick_lateness_seconds", "How late each room-tick started.", |w| {
            &w.histograms.lateness_seconds
        }),
        (
            "rally_tick_wake_lateness_seconds",
            "The part of each room-tick's lateness the worker's wake-up from an idle sleep took.",
            |w| &w.histograms.wake_lateness_seconds,
        ),
        (
            "rally_tick_lateness_busy_seconds",
            "The part of each room-tick's lateness the worker's work took (it was busy).",
            |w| &w.histograms.lateness_busy_seconds,
        ),
        (
            "rally_client_rtt_seconds",
            "Connections' smoothed round-trip time, one sample per connection a second.",
            |w| &w.histograms.client_rtt_seconds,
        ),
        (
            "rally_client_jitter_seconds",
            "Connections' round-trip time deviation, one sample per connection a second.",
            |w| &w.histograms.client_jitter_seconds,
        ),
        (
            "rally_client_loss_ratio",
            "Connections' packet loss estimate (0 to 1), one sample per connection a second.",
            |w| &w.histograms.client_loss_ratio,
        ),
    ];
    for (name, help, of) in families {
        header(out, name, Kind::Histogram, help);
        for w in workers {
            histogram(out, name, &format!("worker=\"{}\"", w.worker), of(w));
        }
    }
}

fn endpoint_counters(out: &mut String, endpoint: &EndpointCounters) {
    let series = [
        ("rally_telemetry_scrapes_total", "/metrics requests answered.", endpoint.scrapes),
        (
            "rally_telemetry_connections_refused_total",
            "Telemetry connections closed at once: every handler busy, the queue full.",
            endpoint.refused,
        ),
        (
            "rally_telemetry_bad_requests_total",
            "Telemetry requests that were not HTTP, too long or too slow.",
            endpoint.bad_requests,
        ),
    ];
    for (name, help, value) in series {
        header(out, name, Kind::Counter, help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// The Agones integration's series (crate::agones): zeros on a server without it, so that a
/// fleet's dashboards and alerts need no special case.
pub fn agones(out: &mut String, stats: Option<&crate::agones::Stats>) {
    use crate::agones::sdk::{CALLS, FAILURES};
    let zero = crate::agones::Stats::default();
    let stats = stats.unwrap_or(&zero);
    let name = "rally_agones_calls_total";
    header(out, name, Kind::Counter, "Calls to the Agones SDK sidecar, by call.");
    for call in CALLS {
        let _ = writeln!(out, "{name}{{call=\"{}\"}} {}", call.name(), stats.calls(call));
    }
    let name = "rally_agones_errors_total";
    header(out, name, Kind::Counter, "Failed Agones SDK calls, by call and reason.");
    for call in CALLS {
        for failure in FAILURES {
            let (c, r, n) = (call.name(), failure.name(), stats.failures(call, failure));
            let _ = writeln!(out, "{name}{{call=\"{c}\",reason=\"{r}\"}} {n}");
        }
    }
    let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
    let name = "rally_agones_health_withheld_total";
    header(out, name, Kind::Counter, "Health periods with a worker late or stuck: no Health.");
    let _ = writeln!(out, "{name} {}", load(&stats.health_withheld));
    let name = "rally_agones_allocations_total";
    header(out, name, Kind::Counter, "Allocations seen on the watch, by outcome.");
    let _ = writeln!(out, "{name}{{outcome=\"accepted\"}} {}", load(&stats.allocations_accepted));
    let _ = writeln!(out, "{name}{{outcome=\"refused\"}} {}", load(&stats.allocations_refused));
}

/// The browser gateways' series (crate::web), by transport: zeros for a transport that is not
/// running, so that dashboards need no special case. Nine counters per transport, read from
/// atomics: a scrape's cost does not grow with sessions.
pub fn web(out: &mut String, stats: &crate::web::WebStats) {
    let zero = rally_driver::gateway::GatewayStats::default();
    let of = |transport| stats.iter().find(|(t, _)| *t == transport).map_or(&zero, |(_, s)| s);
    let transports = ["webtransport", "websocket"].map(|t| (t, of(t).figures()));
    for k in 0..transports[0].1.len() {
        let (suffix, gauge, help, _) = transports[0].1[k];
        let name = format!("rally_web_{suffix}");
        header(out, &name, if gauge { Kind::Gauge } else { Kind::Counter }, help);
        for (transport, figures) in &transports {
            let _ = writeln!(out, "{name}{{transport=\"{transport}\"}} {}", figures[k].3);
        }
    }
}

fn header(out: &mut String, name: &str, kind: Kind, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.name());
}

/// One histogram's cumulative buckets, sum and count.
fn histogram(out: &mut String, name: &str, labels: &str, buckets: &Buckets) {
    let mut cumulative = 0;
    for (bound, count) in buckets.bounds.iter().zip(&buckets.counts) {
        cumulative += count;
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let total = buckets.count();
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {total}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", buckets.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
}

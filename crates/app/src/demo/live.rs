//! The demo's live figures: what the bots measured and what the host's telemetry says,
//! gathered into one [`View`] that the dashboard serves as JSON and the terminal prints.

use super::bots::{BotReport, EntityView};
use super::table::{Roles, TABLE_HALF, TABLE_TOP};
use rally_driver::gateway::GatewayStats;
use rally_driver::host::telemetry::ROOM_SCOPES;
use rally_driver::host::HostReport;
use rally_engine::{LatencyModel, LatencySample};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How far back the latency histogram looks.
const LATENCY_WINDOW: Duration = Duration::from_secs(5);
/// The histogram's bin width, milliseconds.
const BIN_MS: f64 = 0.5;
/// Bins kept; latencies beyond them count in the last.
const BINS: usize = 80;
/// A sample within its model give or take this much counts as within (the clocks' grain).
const MODEL_SLACK: Duration = Duration::from_millis(1);

/// Everything the dashboard draws, as of one moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct View {
    /// Seconds since the demo started.
    pub seconds: f64,
    /// Views built so far (the dashboard shows it changing).
    pub version: u64,
    /// Ticks and frames per second.
    pub hz: u32,
    /// The room's pipeline.
    pub pipeline: String,
    /// Rooms open on the host.
    pub rooms: usize,
    /// Connections on the host.
    pub connections: usize,
    /// The host's tick by phase over the last second, against its budgets.
    pub phases: Vec<PhaseView>,
    /// How late ticks started over the last second, milliseconds.
    pub lateness_ms: Quantiles,
    /// The host's CPU over the last second, percent of one core.
    pub host_cpu_percent: f64,
    /// Each bot's connection and latency.
    pub clients: Vec<ClientView>,
    /// Total latency over the last few seconds, against the model.
    pub latency: LatencyView,
    /// The table as bot 0 sees it.
    pub sandbox: SandboxView,
    /// What serving this dashboard costs the demo, percent of one core.
    pub dashboard_cpu_percent: f64,
    /// The browser's gateways (WebTransport, WebSocket): what they carried and refused.
    pub gateways: Vec<GatewayView>,
}

/// One browser gateway's counters since the demo started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GatewayView {
    /// `webtransport` or `websocket`.
    pub transport: &'static str,
    /// Sessions opened, and open now.
    pub sessions: u64,
    /// Sessions open now.
    pub open: u64,
    /// Datagrams carried to the room.
    pub to_room: u64,
    /// Datagrams carried to the pages.
    pub to_browser: u64,
    /// Bad input and limits, each counted: sessions refused, datagrams over the size limit,
    /// what is not a datagram, datagrams the page's path could not take, sessions broken.
    pub refused: u64,
    /// See [`Self::refused`].
    pub oversized: u64,
    /// See [`Self::refused`].
    pub garbage: u64,
    /// See [`Self::refused`].
    pub too_large: u64,
    /// See [`Self::refused`].
    pub broken: u64,
}

impl GatewayView {
    /// The counters of the gateway for `transport`, read now.
    pub fn new(transport: &'static str, s: &GatewayStats) -> Self {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Self {
            transport,
            sessions: n(&s.sessions),
            open: n(&s.open),
            to_room: n(&s.to_room),
            to_browser: n(&s.to_browser),
            refused: n(&s.refused),
            oversized: n(&s.oversized),
            garbage: n(&s.garbage),
            too_large: n(&s.too_large),
            broken: n(&s.broken),
        }
    }
}

/// One phase of the room's tick.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseView {
    /// The scope's name.
    pub name: &'static str,
    /// Per room-tick, microseconds.
    pub mean_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Largest, microseconds.
    pub max_us: f64,
    /// Its budget, microseconds.
    pub budget_us: f64,
    /// Ticks over budget in the window.
    pub overruns: u64,
}

/// p50, p99 and max.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// One bot.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClientView {
    /// Which bot.
    pub bot: usize,
    /// `near` or `far` end of the table (`spawn` in a scene demo).
    pub end: &'static str,
    /// Its client id in the room, once welcomed (the dashboard names players by it).
    pub client: Option<u32>,
    /// Smoothed RTT, milliseconds.
    pub rtt_ms: f64,
    /// Loss, percent.
    pub loss_percent: f64,
    /// Mean total latency over the window, milliseconds.
    pub latency_ms: f64,
}

/// The total-latency histogram and the model's bounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencyView {
    /// Samples in the window.
    pub samples: usize,
    /// Width of a bin, milliseconds.
    pub bin_ms: f64,
    /// Counts per bin from zero.
    pub bins: Vec<u64>,
    /// Mean, p99 and max, milliseconds.
    pub mean_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// The model's best and worst for the round trips the samples saw, averaged, ms.
    pub best_ms: f64,
    /// See `best_ms`.
    pub worst_ms: f64,
    /// Samples within their own model (each judged by its own round trip), percent.
    pub within_percent: f64,
    /// Mean round trip the samples saw, milliseconds.
    pub round_trip_ms: f64,
    /// Mean time the server held an input, milliseconds.
    pub server_hold_ms: f64,
}

/// The sandbox from above.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SandboxView {
    /// Half the table's width (x) and length (z), metres.
    pub table_half: [f32; 2],
    /// Height of the table's top, metres.
    pub table_top: f32,
    /// Each entity as replicated, with its part.
    pub entities: Vec<Drawn>,
    /// Serves so far (in a scene demo: grabs, the room's `SceneStats::grabs`).
    pub serves: u64,
    /// Paddle hits so far (in a scene demo: releases).
    pub hits: u64,
}

/// An entity and the part it plays.
#[derive(Debug, Clone, Serialize)]
pub struct Drawn {
    /// `table`, `net`, `ball`, `hand`, `paddle` or `other`.
    pub role: &'static str,
    /// The player whose hand or paddle it is.
    pub player: Option<u32>,
    /// The entity as the client sees it.
    #[serde(flatten)]
    pub entity: EntityView,
}

/// What the collector keeps between views.
#[derive(Debug)]
pub struct Live {
    view: View,
    tick: Duration,
    /// Latency samples with the second they arrived and their bot, oldest first.
    samples: VecDeque<(f64, usize, LatencySample)>,
    entities: Vec<EntityView>,
}

impl Live {
    /// Figures for a room at `hz` on `pipeline`, with `bots` players.
    pub fn new(hz: u32, pipeline: &str, bots: usize) -> Self {
        let clients = (0..bots)
            .map(|bot| ClientView {
                bot,
                end: if bot % 2 == 0 { "near" } else { "far" },
                ..ClientView::default()
            })
            .collect();
        let view = View { hz, pipeline: pipeline.to_string(), clients, ..View::default() };
        Self {
            view,
            tick: Duration::from_secs(1) / hz,
            samples: VecDeque::new(),
            entities: Vec::new(),
        }
    }

    /// Names every bot's place `end` (a scene demo's bots stand at spawn points, not at an
    /// end of a table).
    pub fn set_ends(&mut self, end: &'static str) {
        for client in &mut self.view.clients {
            client.end = end;
        }
    }

    /// Takes a bot's report, received `seconds` into the demo.
    pub fn bot(&mut self, seconds: f64, report: BotReport) {
        let Some(client) = self.view.clients.get_mut(report.bot) else { return };
        client.client = report.client;
        client.rtt_ms = ms(report.rtt);
        client.loss_percent = report.loss * 100.0;
        self.samples.extend(report.samples.into_iter().map(|s| (seconds, report.bot, s)));
        if report.bot == 0 {
            self.entities = report.entities;
        }
    }

    /// Takes the host's figures over the last window, which lasted `window`.
    pub fn host(&mut self, report: &HostReport, window: Duration) {
        let view = &mut self.view;
        view.rooms = report.workers.iter().map(|w| w.rooms).sum();
        view.connections = report.workers.iter().map(|w| w.connections).sum();
        let cpu: u64 = report.workers.iter().map(|w| w.cpu_us).sum();
        view.host_cpu_percent = cpu as f64 / window.as_micros().max(1) as f64 * 100.0;
        // The demo runs one worker; with more, the view shows the first's.
        let Some(worker) = report.workers.first() else { return };
        view.lateness_ms = Quantiles {
            p50: worker.lateness.p50_us / 1e3,
            p99: worker.lateness.p99_us / 1e3,
            max: worker.lateness.max_us / 1e3,
        };
        view.phases = ROOM_SCOPES
            .iter()
            .enumerate()
            .filter_map(|(k, scope)| {
                let summary = worker.per_room_tick.iter().find(|(s, _)| s == scope)?.1;
                Some(PhaseView {
                    name: scope.name(),
                    mean_us: summary.mean_us,
                    p99_us: summary.p99_us,
                    max_us: summary.max_us,
                    budget_us: report.budgets.of(*scope).map_or(0.0, |b| b.as_secs_f64() * 1e6),
                    overruns: worker.overruns[k],
                })
            })
            .collect();
    }

    /// The view as of `seconds` into the demo, with the game's `roles`.
    pub fn view(&mut self, seconds: f64, roles: &Roles) -> &View {
        let window = LATENCY_WINDOW.as_secs_f64();
        while self.samples.front().is_some_and(|(at, _, _)| seconds - at > window) {
            self.samples.pop_front();
        }
        self.view.seconds = seconds;
        self.view.version += 1;
        self.view.latency = latency(self.samples.iter().map(|(_, _, s)| s), self.tick);
        for client in &mut self.view.clients {
            let mine = self.samples.iter().filter(|(_, bot, _)| *bot == client.bot);
            let (sum, count) =
                mine.fold((0.0, 0), |(sum, n), (_, _, s)| (sum + ms(s.total), n + 1));
            client.latency_ms = sum / f64::from(count.max(1));
        }
        self.view.sandbox = sandbox(&self.entities, roles);
        &self.view
    }

    /// Sets what the dashboard cost over the last window.
    pub fn set_dashboard_cpu(&mut self, percent: f64) {
        self.view.dashboard_cpu_percent = percent;
    }

    /// Sets the browser gateways' counters.
    pub fn set_gateways(&mut self, gateways: Vec<GatewayView>) {
        self.view.gateways = gateways;
    }
}

/// The histogram of `samples` and how they sit against the model of their own round trips.
fn latency<'a>(samples: impl Iterator<Item = &'a LatencySample>, tick: Duration) -> LatencyView {
    let mut view = LatencyView { bin_ms: BIN_MS, bins: vec![0; BINS], ..LatencyView::default() };
    let mut totals = Vec::new();
    let (mut best, mut worst, mut within, mut round_trip, mut hold) = (0.0, 0.0, 0, 0.0, 0.0);
    let mut timed = 0usize;
    for sample in samples {
        let total = ms(sample.total);
        totals.push(total);
        view.bins[((total / BIN_MS) as usize).min(BINS - 1)] += 1;
        hold += sample.server_hold.map_or(0.0, ms);
        // A sample whose round trip the meter could not split is judged by none.
        let Some(rtt) = sample.round_trip else { continue };
        let model = LatencyModel::new(rtt, tick, tick);
        best += ms(model.best);
        worst += ms(model.worst);
        round_trip += ms(rtt);
        within += usize::from(model.contains(sample.total, MODEL_SLACK));
        timed += 1;
    }
    let s = crate::stats::summary(&totals);
    let (n, t) = (totals.len().max(1) as f64, timed.max(1) as f64);
    view.samples = totals.len();
    (view.mean_ms, view.p99_ms, view.max_ms) = (s.mean, s.p99, s.max);
    (view.best_ms, view.worst_ms, view.round_trip_ms) = (best / t, worst / t, round_trip / t);
    view.within_percent = within as f64 / t * 100.0;
    view.server_hold_ms = hold / n;
    view
}

/// Bot 0's entities, each with its part in the game.
fn sandbox(entities: &[EntityView], roles: &Roles) -> SandboxView {
    let part = |id: u32| -> (&'static str, Option<u32>) {
        if roles.table == Some(id) {
            return ("table", None);
        }
        if roles.net == Some(id) {
            return ("net", None);
        }
        if roles.ball == Some(id) {
            return ("ball", None);
        }
        for (client, (hand, paddle)) in &roles.players {
            if *hand == id {
                return ("hand", Some(*client));
            }
            if *paddle == id {
                return ("paddle", Some(*client));
            }
        }
        ("other", None)
    };
    SandboxView {
        table_half: TABLE_HALF,
        table_top: TABLE_TOP,
        entities: entities
            .iter()
            .map(|e| {
                let (role, player) = part(e.id);
                Drawn { role, player, entity: *e }
            })
            .collect(),
        serves: roles.serves,
        hits: roles.hits,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(total_ms: u64, rtt_ms: u64) -> LatencySample {
        LatencySample {
            seq: 0,
            total: Duration::from_millis(total_ms),
            round_trip: Some(Duration::from_millis(rtt_ms)),
            server_hold: Some(Duration::ZERO),
            frame_wait: Duration::ZERO,
        }
    }

    #[test]
    fn samples_are_judged_by_their_own_round_trip_and_age_out() {
        let mut live = Live::new(100, "fast", 2);
        // At 100 Hz: a 5 ms round trip allows 10 to 20 ms; 25 ms is outside.
        let samples = vec![sample(10, 5), sample(20, 5), sample(25, 5)];
        live.bot(0.0, BotReport { bot: 1, samples, ..BotReport::default() });
        let view = live.view(1.0, &Roles::default()).clone();
        assert_eq!(view.latency.samples, 3);
        assert!((view.latency.within_percent - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!((view.latency.best_ms, view.latency.worst_ms), (10.0, 20.0));
        assert_eq!(view.latency.bins[20] + view.latency.bins[40] + view.latency.bins[50], 3);
        // Five seconds on, the window is empty.
        assert_eq!(live.view(6.5, &Roles::default()).latency.samples, 0);
    }

    #[test]
    fn entities_are_named_by_their_part() {
        let mut live = Live::new(120, "fast", 1);
        let at = |id| EntityView { id, position: [0.0; 3], yaw: 0.0 };
        let entities = vec![at(0), at(1), at(2), at(3), at(4), at(9)];
        live.bot(0.0, BotReport { bot: 0, entities, ..BotReport::default() });
        let mut roles = Roles { table: Some(0), net: Some(1), ball: Some(2), ..Roles::default() };
        roles.players.insert(7, (3, 4));
        let parts: Vec<_> =
            live.view(0.1, &roles).sandbox.entities.iter().map(|d| (d.role, d.player)).collect();
        let expected = [
            ("table", None),
            ("net", None),
            ("ball", None),
            ("hand", Some(7)),
            ("paddle", Some(7)),
            ("other", None),
        ];
        assert_eq!(parts, expected);
    }

    #[test]
    fn a_report_from_a_bot_that_does_not_exist_changes_nothing() {
        let mut live = Live::new(120, "fast", 1);
        live.bot(0.0, BotReport { bot: 5, samples: vec![sample(9, 1)], ..BotReport::default() });
        assert_eq!(live.view(0.1, &Roles::default()).latency.samples, 0);
    }

    #[test]
    fn the_browser_gateways_counters_reach_the_dashboards_json() {
        let stats = GatewayStats::default();
        GatewayStats::count(&stats.to_room);
        GatewayStats::count(&stats.garbage);
        let mut live = Live::new(120, "fast", 3);
        live.set_gateways(vec![GatewayView::new("websocket", &stats)]);
        let json = serde_json::to_value(live.view(1.0, &Roles::default())).unwrap();
        let gateway = &json["gateways"][0];
        assert_eq!(gateway["transport"], "websocket");
        assert_eq!((gateway["to_room"].as_u64(), gateway["garbage"].as_u64()), (Some(1), Some(1)));
        assert_eq!(gateway["refused"].as_u64(), Some(0));
    }
}

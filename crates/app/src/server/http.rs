//! The host's telemetry over HTTP: `/metrics` in the Prometheus exposition format (the metrics
//! crate's Prometheus exporter renders it) and `/stats` as JSON. Metric names are documented in
//! docs/operating.md.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use rally_driver::host::telemetry::{ROOM_SCOPES, SCOPES};
use rally_driver::host::{HostReport, Reporter, Summary};
use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running telemetry endpoint; dropping it stops it.
pub struct Telemetry {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Telemetry {
    /// Serves `reporter`'s figures at `address`.
    pub fn start(address: SocketAddr, reporter: Reporter) -> Result<Self, Box<dyn Error>> {
        let server = tiny_http::Server::http(address).map_err(|e| {
            format!("telemetry.listen {address}: {e} (is the port in use? set another, or \"\")")
        })?;
        let address = server.server_addr().to_ip().ok_or("telemetry is not on an IP address")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rally-telemetry".into())
            .spawn(move || serve(&server, &reporter, &stopped))?;
        Ok(Self { address, stop, thread: Some(thread) })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, reporter: &Reporter, stop: &AtomicBool) {
    let recorder = PrometheusBuilder::new().build_recorder();
    while !stop.load(Ordering::Relaxed) {
        let request = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(_) => continue,
        };
        let (status, content_type, body) = match request.url() {
            "/metrics" => {
                (200, "text/plain; version=0.0.4", metrics(&recorder, &reporter.report()))
            }
            "/stats" => match serde_json::to_string_pretty(&reporter.report()) {
                Ok(json) => (200, "application/json", json),
                Err(e) => (500, "text/plain", format!("stats: {e}\n")),
            },
            _ => (404, "text/plain", "not found: try /metrics or /stats\n".to_string()),
        };
        let header = tiny_http::Header::from_bytes("Content-Type", content_type)
            .expect("a constant, valid header");
        let response = tiny_http::Response::from_string(body).with_status_code(status);
        // A client that hung up is its own problem; the endpoint goes on.
        let _ = request.respond(response.with_header(header));
    }
}

/// Sets every metric from `report` and renders the exposition.
fn metrics(recorder: &PrometheusRecorder, report: &HostReport) -> String {
    metrics::with_local_recorder(recorder, || {
        for w in &report.workers {
            let worker = w.worker.to_string();
            let labels = [("worker", worker.clone())];
            metrics::gauge!("rally_rooms", &labels).set(w.rooms as f64);
            metrics::gauge!("rally_connections", &labels).set(w.connections as f64);
            metrics::counter!("rally_room_ticks_total", &labels).absolute(w.room_ticks);
            metrics::counter!("rally_cpu_microseconds_total", &labels).absolute(w.cpu_us);
            metrics::counter!("rally_rooms_failed_total", &labels).absolute(w.rooms_failed);
            metrics::counter!("rally_datagrams_dropped_total", &labels).absolute(w.dropped);
            metrics::counter!("rally_send_errors_total", &labels).absolute(w.send_errors);
            for scope in SCOPES {
                let labels = [("worker", worker.clone()), ("scope", scope.name().to_string())];
                let nanos = w.scope_nanos[scope.index()];
                metrics::counter!("rally_scope_nanoseconds_total", &labels).absolute(nanos);
            }
            for (k, scope) in ROOM_SCOPES.iter().enumerate() {
                let labels = [("worker", worker.clone()), ("scope", scope.name().to_string())];
                metrics::counter!("rally_budget_overruns_total", &labels).absolute(w.overruns[k]);
            }
            for (scope, summary) in &w.per_room_tick {
                quantiles("rally_room_tick_microseconds", &worker, Some(scope.name()), summary);
            }
            quantiles("rally_tick_lateness_microseconds", &worker, None, &w.lateness);
        }
    });
    recorder.handle().render()
}

/// A summary as gauges labelled by statistic.
fn quantiles(name: &'static str, worker: &str, scope: Option<&str>, summary: &Summary) {
    let stats = [
        ("mean", summary.mean_us),
        ("p50", summary.p50_us),
        ("p99", summary.p99_us),
        ("max", summary.max_us),
    ];
    for (stat, value) in stats {
        let mut labels = vec![("worker", worker.to_string()), ("stat", stat.to_string())];
        if let Some(scope) = scope {
            labels.push(("scope", scope.to_string()));
        }
        metrics::gauge!(name, &labels).set(value);
    }
}

//! The Agones SDK sidecar's REST API as Rally calls it, its figures, and the GameServer as
//! Rally reads it.
//!
//! Every call goes through [`Sdk::call`], which counts it and its failure by kind
//! ([`Stats`], served on `/metrics`): `unreachable` (nothing listens, the connection broke or
//! timed out), `refused` (an answer other than 2xx) and `garbage` (an answer that is not HTTP,
//! or JSON Rally cannot read).

use crate::http_client::{self, HttpError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long one call to the sidecar may take (each read and write).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The SDK calls Rally makes, as `/metrics` labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `POST /ready`.
    Ready,
    /// `POST /health`.
    Health,
    /// `POST /shutdown`.
    Shutdown,
    /// `PATCH /v1beta1/counters/{name}`.
    Counter,
    /// `GET /gameserver`.
    GameServer,
    /// `GET /watch/gameserver` (each stream opened).
    Watch,
    /// `PUT /metadata/annotation`.
    Annotation,
}

/// Every call, in `/metrics` order.
pub const CALLS: [Call; 7] = [
    Call::Ready,
    Call::Health,
    Call::Shutdown,
    Call::Counter,
    Call::GameServer,
    Call::Watch,
    Call::Annotation,
];

impl Call {
    /// Its `call` label.
    pub fn name(self) -> &'static str {
        match self {
            Call::Ready => "ready",
            Call::Health => "health",
            Call::Shutdown => "shutdown",
            Call::Counter => "counter",
            Call::GameServer => "gameserver",
            Call::Watch => "watch",
            Call::Annotation => "annotation",
        }
    }
}

/// Why a call failed, as `/metrics` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Nothing listens, or the connection broke or timed out.
    Unreachable,
    /// The sidecar answered with a status other than 2xx.
    Refused,
    /// The answer was not HTTP, or not JSON Rally can read.
    Garbage,
}

/// Every failure kind, in `/metrics` order.
pub const FAILURES: [Failure; 3] = [Failure::Unreachable, Failure::Refused, Failure::Garbage];

impl Failure {
    /// Its `reason` label.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Unreachable => "unreachable",
            Failure::Refused => "refused",
            Failure::Garbage => "garbage",
        }
    }
}

/// The Agones integration's figures, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    calls: [AtomicU64; CALLS.len()],
    failures: [[AtomicU64; FAILURES.len()]; CALLS.len()],
    /// Health periods in which a worker was not ticking within its budget: no `Health` sent.
    pub health_withheld: AtomicU64,
    /// Allocations Rally accepted (a room it can host, the scene it hosts).
    pub allocations_accepted: AtomicU64,
    /// Allocations Rally refused (a room id that is not one, a full worker, another scene).
    pub allocations_refused: AtomicU64,
}

impl Stats {
    /// Calls made of `call`.
    pub fn calls(&self, call: Call) -> u64 {
        self.calls[call as usize].load(Ordering::Relaxed)
    }

    /// Calls of `call` that failed with `failure`.
    pub fn failures(&self, call: Call, failure: Failure) -> u64 {
        self.failures[call as usize][failure as usize].load(Ordering::Relaxed)
    }

    /// Counts a call made outside [`Sdk::call`] (a watch stream opened).
    pub fn called(&self, call: Call) {
        self.calls[call as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failure of `call` that happened outside [`Sdk::call`] (a watch stream that
    /// broke, a line of it that is not JSON).
    pub fn fail(&self, call: Call, failure: Failure) {
        self.failures[call as usize][failure as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The sidecar at `authority` (`127.0.0.1:<AGONES_SDK_HTTP_PORT>`).
#[derive(Debug, Clone)]
pub struct Sdk {
    /// `host:port`.
    pub authority: String,
    /// Counted here.
    pub stats: std::sync::Arc<Stats>,
}

impl Sdk {
    /// One call; its response body if the sidecar answered 2xx. Counted, failures by kind.
    pub fn call(
        &self,
        call: Call,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<Vec<u8>, String> {
        self.stats.called(call);
        let answer =
            http_client::request(&self.authority, method, path, body.as_bytes(), CALL_TIMEOUT);
        let failed = |failure: Failure, why: String| {
            self.stats.fail(call, failure);
            Err(format!("{method} {path}: {why}"))
        };
        match answer {
            Ok(response) if response.ok() => Ok(response.body),
            Ok(response) => {
                let text = String::from_utf8_lossy(&response.body);
                let text: String = text.chars().take(200).collect();
                failed(Failure::Refused, format!("answered {}: {text}", response.status))
            }
            Err(e @ (HttpError::Connect { .. } | HttpError::Io(_))) => {
                failed(Failure::Unreachable, e.to_string())
            }
            Err(e) => failed(Failure::Garbage, e.to_string()),
        }
    }

    /// `GET /gameserver`, read.
    pub fn game_server(&self) -> Result<GameServer, String> {
        let body = self.call(Call::GameServer, "GET", "/gameserver", "")?;
        GameServer::parse(&body).map_err(|e| {
            self.stats.fail(Call::GameServer, Failure::Garbage);
            format!("GET /gameserver: {e}")
        })
    }

    /// `PATCH /v1beta1/counters/{name}`: count and capacity (int64s are strings in Agones'
    /// JSON).
    pub fn set_counter(&self, name: &str, count: u64, capacity: u64) -> Result<(), String> {
        let body = format!("{{\"count\":\"{count}\",\"capacity\":\"{capacity}\"}}");
        self.call(Call::Counter, "PATCH", &format!("/v1beta1/counters/{name}"), &body).map(drop)
    }

    /// `PUT /metadata/annotation`: Agones stores it as `agones.dev/sdk-<key>`.
    pub fn annotate(&self, key: &str, value: &str) -> Result<(), String> {
        let body = serde_json::json!({ "key": key, "value": value }).to_string();
        self.call(Call::Annotation, "PUT", "/metadata/annotation", &body).map(drop)
    }
}

/// What Rally reads of a GameServer (`GET /gameserver`, each object of the watch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GameServer {
    /// `object_meta.name`.
    pub name: String,
    /// `status.state`: `Scheduled`, `Ready`, `Allocated`, `Shutdown`...
    pub state: String,
    /// `status.address`: where clients reach the node.
    pub address: Option<IpAddr>,
    /// `status.ports`: host ports by port name.
    pub ports: BTreeMap<String, u16>,
    /// `object_meta.labels` and `object_meta.annotations`, annotations winning.
    pub metadata: BTreeMap<String, String>,
}

impl GameServer {
    /// Parses the SDK's JSON (`{"result": ...}` as the watch wraps it, or bare).
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("not a GameServer: {e}"))?;
        let object = value.get("result").unwrap_or(&value);
        if !object.is_object() {
            return Err("not a GameServer: not a JSON object".into());
        }
        let meta = &object["object_meta"];
        let status = &object["status"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let mut metadata = BTreeMap::new();
        for field in ["labels", "annotations"] {
            if let Some(map) = meta[field].as_object() {
                for (key, value) in map {
                    metadata.insert(key.clone(), text(value));
                }
            }
        }
        let mut ports = BTreeMap::new();
        for port in status["ports"].as_array().into_iter().flatten() {
            let number = port["port"].as_u64().or_else(|| port["port"].as_str()?.parse().ok());
            match (port["name"].as_str(), number.and_then(|n| u16::try_from(n).ok())) {
                (Some(name), Some(number)) if number != 0 => {
                    ports.insert(name.to_string(), number);
                }
                _ => return Err(format!("a port that is not {{name, port}}: {port}")),
            }
        }
        let address = match status["address"].as_str() {
            None | Some("") => None,
            Some(address) => Some(
                address.parse().map_err(|_| format!("status.address {address:?}: not an IP"))?,
            ),
        };
        Ok(Self {
            name: text(&meta["name"]),
            state: text(&status["state"]),
            address,
            ports,
            metadata,
        })
    }

    /// Where clients reach worker `k`: the address and the host port named `prefix<k>`.
    pub fn worker_address(&self, prefix: &str, k: usize) -> Option<SocketAddr> {
        let port = self.ports.get(&format!("{prefix}{k}"))?;
        Some(SocketAddr::new(self.address?, *port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_game_server_is_read_from_the_sdk_json_and_garbage_is_refused() {
        let json = br#"{"result":{"object_meta":{"name":"rally-x","labels":{"a":"1"},
            "annotations":{"rally.dev/room":"42"}},"status":{"state":"Allocated",
            "address":"10.0.0.7","ports":[{"name":"worker-0","port":7301},
            {"name":"worker-1","port":"7302"}]}}}"#;
        let server = GameServer::parse(json).expect("a GameServer");
        assert_eq!(server.state, "Allocated");
        assert_eq!(server.metadata.get("rally.dev/room").map(String::as_str), Some("42"));
        assert_eq!(server.worker_address("worker-", 1), Some("10.0.0.7:7302".parse().unwrap()));
        assert_eq!(server.worker_address("worker-", 2), None);
        for garbage in [
            &b"{\"status\":{\"ports\":[{\"name\":\"w\",\"port\":70000}]}}"[..],
            b"{\"status\":{\"address\":\"node-1\"}}",
            b"[1,2]",
            b"{\"result\":",
        ] {
            assert!(GameServer::parse(garbage).is_err(), "{}", String::from_utf8_lossy(garbage));
        }
    }
}

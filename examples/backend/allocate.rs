//! The backend's two steps, apart from its command line so that a test can run them against a
//! fake allocator: allocate a game server for a room, then issue the connect token naming the
//! worker that hosts the room, at the address and host port Agones gave it.

use rally_app::http_client::{self, Url};
use rally_proto::{ConnectToken, TokenKey};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The GameServerAllocation for `room` in `fleet`: the high-density pattern. Servers already
/// allocated with a `rooms` slot left come first, then ready ones with a slot left; among them
/// the one with the fewest slots left (`Ascending`), so that servers fill before new ones are
/// used. The room id (and scene, if any) rides on the annotations, where Rally's watch reads
/// them.
pub fn allocation(fleet: &str, room: u64, scene: Option<&str>) -> Value {
    let selector = |state: &str| {
        json!({
            "matchLabels": { "agones.dev/fleet": fleet },
            "gameServerState": state,
            "counters": { "rooms": { "minAvailable": 1 } }
        })
    };
    let mut annotations = json!({ "rally.dev/room": room.to_string() });
    if let Some(scene) = scene {
        annotations["rally.dev/scene"] = json!(scene);
    }
    json!({
        "apiVersion": "allocation.agones.dev/v1",
        "kind": "GameServerAllocation",
        "spec": {
            "selectors": [selector("Allocated"), selector("Ready")],
            "scheduling": "Packed",
            "priorities": [{ "type": "Counter", "key": "rooms", "order": "Ascending" }],
            "metadata": { "annotations": annotations }
        }
    })
}

/// Where the room's clients connect: the allocated server's address and the host port of the
/// worker hosting the room (`room % workers`, ports named `worker-<k>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// The GameServer.
    pub game_server: String,
    /// The room's worker's address.
    pub address: SocketAddr,
}

/// POSTs the allocation to `url` and reads where the room lives.
pub fn allocate(url: &str, body: &Value, room: u64) -> Result<Allocated, String> {
    let url = Url::parse(url).map_err(|e| e.to_string())?;
    let body = body.to_string();
    let timeout = Duration::from_secs(10);
    let response =
        http_client::request(&url.authority, "POST", &url.path, body.as_bytes(), timeout)
            .map_err(|e| format!("the allocator: {e}"))?;
    if !response.ok() {
        let text = String::from_utf8_lossy(&response.body);
        return Err(format!("the allocator answered {}: {text}", response.status));
    }
    let answer: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("the allocator's answer is not JSON: {e}"))?;
    placed(&answer["status"], room)
}

/// Reads an allocation's status: `Allocated`, its address and the room's worker's port.
fn placed(status: &Value, room: u64) -> Result<Allocated, String> {
    let state = status["state"].as_str().unwrap_or("");
    if state != "Allocated" {
        return Err(format!("no game server with a room to spare (state {state:?})"));
    }
    let ip: IpAddr = status["address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .ok_or("the allocation has no IP address")?;
    let ports: Vec<(&str, u16)> = status["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["name"].as_str()?, u16::try_from(p["port"].as_u64()?).ok()?)))
        .filter(|(name, _)| name.starts_with("worker-"))
        .collect();
    if ports.is_empty() {
        return Err("the allocation names no worker-<k> ports".into());
    }
    let worker = format!("worker-{}", room % ports.len() as u64);
    let port = ports.iter().find(|(name, _)| *name == worker).map(|(_, p)| *p);
    let port = port.ok_or_else(|| format!("the allocation has no port {worker}"))?;
    let game_server = status["gameServerName"].as_str().unwrap_or("").to_string();
    Ok(Allocated { game_server, address: SocketAddr::new(ip, port) })
}

/// The connect token for `client` in `room` at `allocated`, valid `ttl_s` seconds.
pub fn token(
    key: &TokenKey,
    protocol_id: u64,
    client: u64,
    room: u64,
    allocated: &Allocated,
    ttl_s: u64,
) -> Result<ConnectToken, String> {
    rally_driver::backend::issue(key, protocol_id, client, room, vec![allocated.address], ttl_s)
        .map_err(|e| e.to_string())
}

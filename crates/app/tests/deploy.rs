//! Goal: the deployment files say what Rally needs: one UDP port per worker in the Fleet, each
//! named `worker-<k>` on container port `host.port + k`; the `rooms` and `players` counters
//! with the capacities Rally sets; health checked less often than Rally sends it; a grace
//! period longer than the drain and Shutdown; the autoscaler buffering the `rooms` counter of
//! that fleet; the image running the config the Fleet mounts.
//! Method: deploy/agones/*.yaml read as YAML, deploy/agones/server.toml over the embedded
//! defaults, the Dockerfile as text; each field Rally relies on compared with the config.

use serde_json::Value;

fn file(path: &str) -> String {
    let path = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_norway::from_str(&file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `section.field` of deploy/agones/server.toml, else of the embedded defaults.
fn setting(section: &str, field: &str) -> toml::Value {
    let deployed: toml::Table = file("deploy/agones/server.toml").parse().expect("TOML");
    let defaults: toml::Table = file("crates/app/src/server/default.toml").parse().expect("TOML");
    let of = |t: &toml::Table| t.get(section)?.get(field).cloned();
    of(&deployed).or_else(|| of(&defaults)).unwrap_or_else(|| panic!("{section}.{field}"))
}

fn integer(section: &str, field: &str) -> i64 {
    setting(section, field).as_integer().unwrap_or_else(|| panic!("{section}.{field}"))
}

#[test]
fn the_fleet_has_a_port_per_worker_and_the_counters_rally_keeps() {
    let fleet = yaml("deploy/agones/fleet.yaml");
    assert_eq!(fleet["kind"], "Fleet");
    let spec = &fleet["spec"]["template"]["spec"];
    let workers = integer("host", "workers");
    let port = integer("host", "port");
    assert!(workers > 0, "a fleet's server says how many workers it runs");
    assert_eq!(setting("agones", "enabled").as_bool(), Some(true));
    let prefix = setting("agones", "port_prefix");
    let ports = spec["ports"].as_array().expect("ports");
    assert_eq!(ports.len() as i64, workers, "one port per worker");
    for (k, declared) in ports.iter().enumerate() {
        assert_eq!(declared["name"], format!("{}{k}", prefix.as_str().unwrap()));
        assert_eq!(declared["containerPort"].as_i64(), Some(port + k as i64), "worker {k}");
        assert_eq!(declared["protocol"], "UDP");
        let policy = cap(setting("agones", "port_policy").as_str().expect("a policy"));
        assert_eq!(declared["portPolicy"].as_str(), Some(policy.as_str()));
    }
    let rooms = workers * integer("host", "rooms_per_worker_max");
    let players = workers * integer("host", "connections_per_worker_max");
    assert_eq!(spec["counters"]["rooms"]["capacity"].as_i64(), Some(rooms));
    assert_eq!(spec["counters"]["players"]["capacity"].as_i64(), Some(players));
    let period_ms = spec["health"]["periodSeconds"].as_i64().expect("a health period") * 1000;
    assert!(period_ms > integer("agones", "health_period_ms"), "Health is sent within a period");
    let pod = &spec["template"]["spec"];
    let grace_ms = pod["terminationGracePeriodSeconds"].as_i64().expect("a grace period") * 1000;
    let stop_ms = integer("host", "drain_timeout_ms") + integer("agones", "shutdown_wait_ms");
    assert!(grace_ms > stop_ms, "the drain and Shutdown fit in the grace period");
    let container = &pod["containers"][0];
    let args: Vec<&str> =
        container["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(args, ["server", "--config", "/etc/rally/server.toml", "--agones"]);
    assert_eq!(container["volumeMounts"][0]["mountPath"], "/etc/rally");
    let cpu: i64 = container["resources"]["requests"]["cpu"].as_str().unwrap().parse().unwrap();
    assert_eq!(cpu, workers, "a core per worker");
}

/// `dynamic` as Agones spells it: `Dynamic`.
fn cap(policy: &str) -> String {
    let mut letters = policy.chars();
    letters.next().map(|c| c.to_ascii_uppercase().to_string() + letters.as_str()).unwrap()
}

#[test]
fn the_autoscaler_buffers_rooms_of_the_fleet_and_the_image_runs_its_config() {
    let fleet = yaml("deploy/agones/fleet.yaml");
    let scaler = yaml("deploy/agones/fleetautoscaler.yaml");
    assert_eq!(scaler["kind"], "FleetAutoscaler");
    assert_eq!(scaler["spec"]["fleetName"], fleet["metadata"]["name"]);
    let policy = &scaler["spec"]["policy"];
    assert_eq!(policy["type"], "Counter");
    assert_eq!(policy["counter"]["key"], "rooms");
    let server_rooms = fleet["spec"]["template"]["spec"]["counters"]["rooms"]["capacity"].clone();
    let min = policy["counter"]["minCapacity"].as_i64().unwrap();
    assert!(min >= server_rooms.as_i64().unwrap(), "at least one server");
    assert!(policy["counter"]["bufferSize"].as_i64().unwrap() < min);
    let dockerfile = file("Dockerfile");
    assert!(dockerfile.contains("COPY deploy/agones/server.toml /etc/rally/server.toml"));
    assert!(dockerfile.contains("USER nonroot"), "the image runs unprivileged");
    assert!(dockerfile.contains("-p rally --bin rally"), "the product binary only");
}

//! Goal: the backend example allocates as the high-density pattern says (servers with a
//! `rooms` slot left, allocated ones first, the fullest first) and hands out a token that the
//! allocated server's worker for the room accepts; an allocator with nothing to give, or that
//! answers garbage, is a clear error.
//! Method: the example's own code (examples/backend/allocate.rs) against a fake allocator on
//! loopback that records the request and answers as Kubernetes' API would; the token is opened
//! as the worker at the allocated address and host port opens it.

#[path = "../../../examples/backend/allocate.rs"]
mod allocate;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;

/// Answers one request with `status` and `body`; the request's path and body come back.
fn fake_allocator(
    status: &'static str,
    body: String,
) -> (String, mpsc::Receiver<(String, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!(
        "http://{}/apis/allocation.agones.dev/v1/namespaces/default/gameserverallocations",
        listener.local_addr().unwrap()
    );
    let (sender, requests) = mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("the backend connects");
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut length = 0;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            if header.trim().is_empty() {
                break;
            }
            if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
        }
        let mut request = vec![0; length];
        reader.read_exact(&mut request).unwrap();
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        // A test that does not look at the request has dropped its receiver.
        let _ = sender.send((path, String::from_utf8(request).unwrap()));
        let answer = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        (&stream).write_all(answer.as_bytes()).unwrap();
    });
    (url, requests)
}

#[test]
fn the_backend_allocates_for_a_room_and_its_token_names_the_rooms_worker() {
    let answer = serde_json::json!({
        "kind": "GameServerAllocation",
        "status": {
            "state": "Allocated", "gameServerName": "rally-7xk2p", "address": "203.0.113.9",
            "ports": [
                {"name": "worker-0", "port": 7031}, {"name": "worker-1", "port": 7032},
                {"name": "telemetry", "port": 7033}
            ]
        }
    });
    let (url, requests) = fake_allocator("201 Created", answer.to_string());
    let body = allocate::allocation("rally", 43, Some("sandbox"));
    let allocated = allocate::allocate(&url, &body, 43).expect("allocated");
    // Room 43 of two workers is worker 1's: its host port.
    assert_eq!(allocated.address, "203.0.113.9:7032".parse().unwrap());
    assert_eq!(allocated.game_server, "rally-7xk2p");

    let (path, sent) = requests.recv().expect("one request");
    assert!(path.ends_with("/namespaces/default/gameserverallocations"), "{path}");
    let sent: serde_json::Value = serde_json::from_str(&sent).expect("JSON");
    let spec = &sent["spec"];
    assert_eq!(spec["selectors"][0]["gameServerState"], "Allocated");
    assert_eq!(spec["selectors"][1]["gameServerState"], "Ready");
    for selector in spec["selectors"].as_array().unwrap() {
        assert_eq!(selector["counters"]["rooms"]["minAvailable"], 1);
        assert_eq!(selector["matchLabels"]["agones.dev/fleet"], "rally");
    }
    assert_eq!(spec["priorities"][0]["key"], "rooms");
    assert_eq!(spec["metadata"]["annotations"]["rally.dev/room"], "43");
    assert_eq!(spec["metadata"]["annotations"]["rally.dev/scene"], "sandbox");

    let key = rally_driver::backend::random_key().expect("randomness");
    let token = allocate::token(&key, 5, 77, 43, &allocated, 60).expect("issued");
    let now = token.created_at + 1;
    let open = |server| {
        rally_proto::token::open(
            &key,
            5,
            token.expires_at,
            &token.nonce,
            &token.sealed,
            now,
            server,
        )
    };
    let private = open(allocated.address).expect("worker 1 at its host port takes it");
    assert_eq!((private.grant.room_id, private.grant.client_id), (43, 77));
    assert!(open("203.0.113.9:7031".parse().unwrap()).is_err(), "worker 0 refuses it");
}

#[test]
fn an_allocator_with_nothing_to_give_or_garbage_is_a_clear_error() {
    let body = allocate::allocation("rally", 1, None);
    let none = serde_json::json!({"status": {"state": "UnAllocated"}}).to_string();
    let (url, _) = fake_allocator("201 Created", none);
    let error = allocate::allocate(&url, &body, 1).expect_err("nothing allocated");
    assert!(error.contains("UnAllocated"), "{error}");
    let (url, _) = fake_allocator("201 Created", "<html>".into());
    let error = allocate::allocate(&url, &body, 1).expect_err("garbage");
    assert!(error.contains("not JSON"), "{error}");
    let (url, _) = fake_allocator("403 Forbidden", "{\"reason\":\"Forbidden\"}".into());
    let error = allocate::allocate(&url, &body, 1).expect_err("forbidden");
    assert!(error.contains("403"), "{error}");
}

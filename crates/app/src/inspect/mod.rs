//! `rally inspect`: Rally datagrams in their JSON debug form. One datagram given in hex, or
//! every UDP datagram of a capture file (`tcpdump -i lo -w rally.pcap udp`), one JSON line
//! each: the packet's type and fields, each frame, and each engine message decoded
//! ([`rally_engine::protocol::inspect`]).
//!
//! Packets after a sealed handshake are encrypted. Given the servers' token key (`--key`, or
//! `--key-file` as `rally demo --key-log` writes it), inspect opens each connect token in the
//! capture as the server would, takes the connection's two packet keys from it, and opens the
//! packets of both directions, as Wireshark does with a TLS key log.

pub mod capture;

use capture::Datagram;
use rally_engine::protocol::{inspect as inspect_message, Direction};
use rally_proto::packet::{Frame, Frames, Packet, SealedToken};
use rally_proto::{open_captured, TokenKey};
use rally_wire::SnapshotConfig;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Options of `rally inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// One datagram, in hex (spaces and colons allowed).
    #[arg(value_name = "HEX", conflicts_with = "capture", required_unless_present = "capture")]
    pub hex: Option<String>,
    /// A capture file (pcap or pcapng, as tcpdump or tshark write them) of Rally traffic.
    #[arg(long, value_name = "PATH")]
    pub capture: Option<PathBuf>,
    /// The servers' token key, hex: opens the capture's connect tokens and sealed packets.
    #[arg(long, conflicts_with = "key_file")]
    pub key: Option<String>,
    /// A file holding the token key in hex (as `rally demo --key-log` writes it).
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Only datagrams from or to this UDP port.
    #[arg(long)]
    pub port: Option<u16>,
    /// Which way a lone datagram went (a capture tells by itself): to-server or to-client.
    #[arg(long, value_enum)]
    pub direction: Option<Way>,
}

/// `--direction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Way {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

/// Runs `rally inspect`.
pub fn run(args: &InspectArgs) -> Result<(), Box<dyn Error>> {
    let key = match (&args.key, &args.key_file) {
        (Some(hex), _) => Some(crate::token::key_from_hex(hex)?),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading the key file {}: {e}", path.display()))?;
            Some(crate::token::key_from_hex(&text)?)
        }
        (None, None) => None,
    };
    let mut inspector = Inspector::new(key);
    if let Some(hex) = &args.hex {
        let cleaned: String = hex.chars().filter(|c| !c.is_whitespace() && *c != ':').collect();
        let bytes = rally_wire::hex::decode(&cleaned).map_err(|e| {
            format!("the datagram must be hex digits, two per byte, such as 04a1... ({e})")
        })?;
        let direction = args.direction.map(|way| match way {
            Way::ToServer => Direction::ToServer,
            Way::ToClient => Direction::ToClient,
        });
        let value = inspector.lone(&bytes, direction);
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let path = args.capture.as_ref().ok_or("give a datagram in hex or --capture PATH")?;
    let bytes =
        std::fs::read(path).map_err(|e| format!("reading the capture {}: {e}", path.display()))?;
    let capture = capture::read(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = std::io::stdout().lock();
    let mut shown = 0;
    for datagram in &capture.datagrams {
        if args.port.is_some_and(|p| datagram.from.port() != p && datagram.to.port() != p) {
            continue;
        }
        shown += 1;
        writeln!(out, "{}", serde_json::to_string(&inspector.datagram(datagram))?)?;
    }
    eprintln!(
        "{shown} datagrams shown of {} UDP datagrams; {} other records skipped; {} sealed \
         packets opened, {} left sealed",
        capture.datagrams.len(),
        capture.skipped,
        inspector.opened,
        inspector.unopened
    );
    Ok(())
}

/// What inspect learns as it reads a capture.
struct Inspector {
    key: Option<TokenKey>,
    snapshot: SnapshotConfig,
    /// Addresses seen acting as servers (answering handshakes or receiving them).
    servers: HashSet<SocketAddr>,
    /// Per (client, server): the packet keys from its token, and the largest packet number
    /// opened in each direction.
    sessions: HashMap<(SocketAddr, SocketAddr), Session>,
    /// (client, server) pairs whose handshake carried a connect token: sealed connections.
    sealed: HashSet<(SocketAddr, SocketAddr)>,
    opened: usize,
    unopened: usize,
}

struct Session {
    client_to_server: [u8; 32],
    server_to_client: [u8; 32],
    largest: [Option<u64>; 2],
}

impl Inspector {
    fn new(key: Option<TokenKey>) -> Self {
        Self {
            key,
            snapshot: SnapshotConfig::default(),
            servers: HashSet::new(),
            sessions: HashMap::new(),
            sealed: HashSet::new(),
            opened: 0,
            unopened: 0,
        }
    }

    /// A datagram with no addresses: nothing to open it with, and only `direction` to go by.
    fn lone(&mut self, bytes: &[u8], direction: Option<Direction>) -> Value {
        let packet = match Packet::decode(bytes) {
            Ok(packet) => packet,
            Err(e) => return json!({ "bytes": bytes.len(), "error": e.to_string() }),
        };
        let mut value = self.packet(&packet, None, direction, bytes.len());
        value["bytes"] = json!(bytes.len());
        value
    }

    /// A datagram of a capture, with what is known of its connection.
    fn datagram(&mut self, d: &Datagram) -> Value {
        let mut value = match Packet::decode(&d.payload) {
            Ok(packet) => {
                self.learn(&packet, d);
                let direction = self.direction(d);
                self.packet(&packet, Some(d), direction, d.payload.len())
            }
            Err(e) => json!({ "error": e.to_string() }),
        };
        value["time"] = json!(d.time);
        value["from"] = json!(d.from.to_string());
        value["to"] = json!(d.to.to_string());
        value["bytes"] = json!(d.payload.len());
        value
    }

    /// Handshakes tell which end is the server, and carry the token with the packet keys.
    fn learn(&mut self, packet: &Packet<'_>, d: &Datagram) {
        match packet {
            Packet::ConnectRequest { token, .. } | Packet::ChallengeResponse { token, .. } => {
                self.servers.insert(d.to);
                if token.is_some() {
                    self.sealed.insert((d.from, d.to));
                }
                let Some((key, token)) = self.key.as_ref().zip(token.as_ref()) else { return };
                if self.sessions.contains_key(&(d.from, d.to)) {
                    return;
                }
                if let Ok(private) = open_token(key, token, d.to) {
                    let session = Session {
                        client_to_server: private.client_to_server_key,
                        server_to_client: private.server_to_client_key,
                        largest: [None, None],
                    };
                    self.sessions.insert((d.from, d.to), session);
                }
            }
            Packet::Challenge { .. } => {
                self.servers.insert(d.from);
            }
            _ => {}
        }
    }

    fn direction(&self, d: &Datagram) -> Option<Direction> {
        if self.servers.contains(&d.to) {
            Some(Direction::ToServer)
        } else if self.servers.contains(&d.from) {
            Some(Direction::ToClient)
        } else {
            None
        }
    }

    /// A decoded packet's fields, its frames and their messages.
    fn packet(
        &mut self,
        packet: &Packet<'_>,
        datagram: Option<&Datagram>,
        direction: Option<Direction>,
        len: usize,
    ) -> Value {
        match packet {
            Packet::ConnectRequest { nonce, token } => json!({
                "type": "connect_request",
                "nonce": nonce,
                "token": token.as_ref().map(|t| self.token_json(t, datagram.map(|d| d.to))),
            }),
            Packet::Challenge { nonce, cookie } => json!({
                "type": "challenge", "nonce": nonce, "cookie_expiry_ms": cookie.expiry_ms,
            }),
            Packet::ChallengeResponse { nonce, cookie, token, short_tag } => json!({
                "type": "challenge_response",
                "nonce": nonce,
                "cookie_expiry_ms": cookie.expiry_ms,
                "short_tag": short_tag,
                "token": token.as_ref().map(|t| self.token_json(t, datagram.map(|d| d.to))),
            }),
            Packet::Data { header, frames } => {
                let header_len = len - frames.len();
                let acks = header.acks.map(|a| {
                    let bits = format!("{:032b}", a.bits);
                    json!({ "ack": a.ack, "bits": bits, "delay_us": u64::from(a.delay) * 8 })
                });
                let opened = datagram.and_then(|d| self.open(d, header.seq, header_len));
                // A narrow header carries the sequence's low 8 bits: opening restores it.
                let seq = opened.as_ref().map_or(header.seq, |(_, number)| *number as u16);
                // Whether the packet is sealed is known from its connection's handshake (a
                // token), not from its body: sealed bytes often read as frames, since any
                // byte from 0x80 starts a last-frame form running to the end.
                let known_sealed = datagram.is_some_and(|d| self.is_sealed(d));
                let (sealed, frames) = match opened {
                    Some((body, _)) => (json!("opened"), self.frames(&body, seq, direction)),
                    None if known_sealed => (json!(true), Err(self.sealed_hint())),
                    None => (json!(false), self.frames(frames, seq, direction)),
                };
                let frames = frames.unwrap_or_else(|hint| {
                    self.unopened += 1;
                    json!(hint)
                });
                json!({
                    "type": "data",
                    "seq": seq,
                    "narrow": header.narrow,
                    "acks": acks,
                    "sealed": sealed,
                    "frames": frames,
                })
            }
            Packet::Disconnect { reason } => {
                json!({ "type": "disconnect", "reason": format!("{reason:?}") })
            }
            Packet::DisconnectSealed { reason, seq, .. } => {
                let reason = format!("{reason:?}");
                json!({ "type": "disconnect", "reason": reason, "seq": seq, "sealed": true })
            }
        }
    }

    /// The frames of the body of data packet `seq`; a body that does not parse is taken to be
    /// sealed (a lone datagram has no handshake to tell), and the error says how to open it.
    fn frames(
        &self,
        body: &[u8],
        seq: u16,
        direction: Option<Direction>,
    ) -> Result<Value, &'static str> {
        let parsed: Result<Vec<Frame<'_>>, _> = Frames::new(body, seq).collect();
        let Ok(frames) = parsed else { return Err(self.sealed_hint()) };
        Ok(frames.iter().map(|frame| self.frame(frame, direction)).collect())
    }

    /// What to do about a sealed packet left unopened.
    fn sealed_hint(&self) -> &'static str {
        match self.key {
            Some(_) => "sealed: no connect token for this connection in the capture",
            None => "sealed: pass the servers' token key (--key or --key-file) to open it",
        }
    }

    /// Whether a datagram belongs to a connection whose handshake carried a connect token:
    /// every data packet of it is sealed.
    fn is_sealed(&self, d: &Datagram) -> bool {
        self.sealed.contains(&(d.from, d.to)) || self.sealed.contains(&(d.to, d.from))
    }

    fn frame(&self, frame: &Frame<'_>, direction: Option<Direction>) -> Value {
        match frame {
            Frame::Ping => json!("ping"),
            Frame::Message { channel, seq, payload } => json!({
                "channel": channel,
                "seq": seq,
                "bytes": payload.len(),
                "message": self.message(*channel, direction, payload),
            }),
            Frame::Fragment { channel, seq, index, count, payload } => json!({
                "channel": channel, "seq": seq, "fragment": format!("{} of {count}", index + 1),
                "bytes": payload.len(),
            }),
            Frame::Repair { channel, start, count, seed, data } => json!({
                "channel": channel, "repair": { "start": start, "count": count, "seed": seed },
                "bytes": data.len(),
            }),
            Frame::RepairAck { channel, next, shortfall } => json!({
                "channel": channel, "repair_ack": { "next": next, "shortfall": shortfall },
            }),
        }
    }

    /// An engine message; with no direction known, as a snapshot if it reads as one.
    fn message(&self, channel: u8, direction: Option<Direction>, payload: &[u8]) -> Value {
        if let Some(direction) = direction {
            return inspect_message(channel, direction, payload, &self.snapshot);
        }
        let to_client = inspect_message(channel, Direction::ToClient, payload, &self.snapshot);
        match to_client.get("error") {
            Some(_) => inspect_message(channel, Direction::ToServer, payload, &self.snapshot),
            None => to_client,
        }
    }

    /// Opens a sealed data packet with its session's key for its direction; returns its body
    /// and its packet number.
    fn open(&mut self, d: &Datagram, seq: u16, header_len: usize) -> Option<(Vec<u8>, u64)> {
        let (session, way) = match self.sessions.get_mut(&(d.from, d.to)) {
            Some(session) => (session, 0),
            None => (self.sessions.get_mut(&(d.to, d.from))?, 1),
        };
        let key = if way == 0 { &session.client_to_server } else { &session.server_to_client };
        let (header, sealed) = d.payload.split_at(header_len);
        let (body, number) = open_captured(key, session.largest[way], header, seq, sealed)?;
        session.largest[way] = Some(session.largest[way].map_or(number, |l| l.max(number)));
        self.opened += 1;
        Some((body, number))
    }

    fn token_json(&self, token: &SealedToken<'_>, server: Option<SocketAddr>) -> Value {
        let mut value = json!({ "protocol_id": token.protocol_id, "expires_at": token.expires_at });
        value["grant"] = match (&self.key, server) {
            (Some(key), Some(server)) => match open_token(key, token, server) {
                Ok(private) => {
                    let grant = &private.grant;
                    let servers: Vec<String> =
                        grant.server_addresses.iter().map(|a| a.to_string()).collect();
                    json!({
                        "client_id": grant.client_id,
                        "room_id": grant.room_id,
                        "servers": servers,
                        "timeout_s": grant.timeout_s,
                    })
                }
                Err(e) => json!(format!("does not open: {e}")),
            },
            _ => json!("sealed (pass the servers' token key to open it)"),
        };
        value
    }
}

/// Opens a token as its server would, expiry aside: a capture is read after the fact.
fn open_token(
    key: &TokenKey,
    token: &SealedToken<'_>,
    server: SocketAddr,
) -> Result<rally_proto::PrivateToken, rally_proto::TokenError> {
    rally_proto::token::open(
        key,
        token.protocol_id,
        token.expires_at,
        token.nonce,
        token.sealed,
        0,
        server,
    )
}

#[cfg(test)]
mod tests {
    use super::capture::{read, write_pcap};
    use super::*;
    use rally_engine::{connection_config, ClientConfig, ClientSession, Room, RoomConfig};
    use rally_proto::{Endpoint, EndpointConfig, EndpointRandomness, Event, Instant};
    use rally_sim::sandbox::{HandInput, Sandbox};
    use rally_sim::secure;
    use std::time::Duration;

    /// A sealed session between a real room and a real client session, sans-IO, every
    /// datagram recorded as a capture would: the handshake, the join, inputs and snapshots.
    fn recorded_session() -> Vec<Datagram> {
        let (server_at, client_at) =
            (SocketAddr::from(([127, 0, 0, 1], 7000)), SocketAddr::from(([127, 0, 0, 1], 5555)));
        let config = EndpointConfig { connection: connection_config(), ..Default::default() };
        let seeded = EndpointRandomness::danger_from_seed;
        let mut server =
            Endpoint::new(secure::server_config(config.clone(), server_at), seeded(1)).unwrap();
        let mut client = Endpoint::new(config, seeded(2)).unwrap();
        let mut room = Room::new(RoomConfig::default(), Sandbox::default(), 3).expect("valid");
        Sandbox::populate(room.world_mut(), 3, 4);
        let mut session: ClientSession<HandInput, rally_sim::sandbox::SandboxMessage> =
            ClientSession::new(ClientConfig::default()).expect("valid");
        let mut now = Instant::ZERO;
        client.connect_with_token(now, secure::token(9, 0, server_at)).unwrap();
        let mut captured = Vec::new();
        let mut buf = vec![0u8; 1500];
        for frame in 0..60 {
            now += Duration::from_millis(10);
            while let Some(t) = client.poll_transmit(now, &mut buf) {
                let datagram = buf[..t.len].to_vec();
                server.handle_datagram(now, client_at, &datagram);
                captured.push(Datagram {
                    time: now.as_secs_f64(),
                    from: client_at,
                    to: server_at,
                    payload: datagram,
                });
            }
            while let Some((handle, event)) = server.poll_event() {
                match event {
                    Event::Connected => room.accept(handle),
                    Event::Message { channel, payload } => {
                        room.receive(now, handle, channel, &payload)
                    }
                    Event::Disconnected { reason } => room.disconnected(now, handle, reason),
                }
            }
            room.tick(now, &mut server);
            while let Some(t) = server.poll_transmit(now, &mut buf) {
                let datagram = buf[..t.len].to_vec();
                client.handle_datagram(now, server_at, &datagram);
                captured.push(Datagram {
                    time: now.as_secs_f64(),
                    from: server_at,
                    to: client_at,
                    payload: datagram,
                });
            }
            while let Some((handle, event)) = client.poll_event() {
                match event {
                    Event::Connected => session.connected(handle),
                    Event::Message { channel, payload } => session.receive(now, channel, &payload),
                    Event::Disconnected { .. } => session.disconnected(),
                }
            }
            session.send_input(now, HandInput::on_circle(0, f64::from(frame)));
            session.transmit(&mut client);
            client.handle_timeout(now);
            server.handle_timeout(now);
        }
        captured
    }

    fn inspect_all(key: Option<TokenKey>, datagrams: &[Datagram]) -> (Vec<Value>, Inspector) {
        let mut inspector = Inspector::new(key);
        let values = datagrams.iter().map(|d| inspector.datagram(d)).collect();
        (values, inspector)
    }

    #[test]
    fn with_the_key_a_sealed_session_reads_whole() {
        let datagrams = read(&write_pcap(&recorded_session())).unwrap().datagrams;
        let (values, inspector) = inspect_all(Some(secure::key()), &datagrams);
        let request = &values[0];
        assert_eq!(request["type"], "connect_request");
        assert_eq!(request["token"]["grant"]["client_id"], 9);
        assert_eq!(values[1]["type"], "challenge");
        let data: Vec<&Value> = values.iter().filter(|v| v["type"] == "data").collect();
        assert!(data.len() > 50, "{} data packets", data.len());
        assert!(data.iter().all(|v| v["sealed"] == "opened"), "every data packet opens");
        assert_eq!(inspector.unopened, 0);
        let messages: Vec<&Value> = data
            .iter()
            .filter_map(|v| v["frames"].as_array())
            .flatten()
            .map(|f| &f["message"])
            .collect();
        let has = |kind: &str| messages.iter().any(|m| m.get(kind).is_some());
        assert!(has("hello") && has("welcome"), "the join: {messages:?}");
        assert!(has("input_frame"), "inputs up");
        let snapshot = messages.iter().find(|m| m.get("snapshot").is_some()).expect("a snapshot");
        // Three free bodies and the client's controller.
        let state = &snapshot["snapshot"]["state"];
        let entities = state.get("entities").or(state.get("records")).and_then(Value::as_array);
        assert!(entities.is_some_and(|e| !e.is_empty()), "{state}");
        assert!(messages.iter().all(|m| m.get("error").is_none()), "no message fails");
    }

    #[test]
    fn without_the_key_the_handshake_reads_and_the_rest_says_how_to_open_it() {
        let (values, inspector) = inspect_all(None, &recorded_session());
        assert_eq!(values[0]["token"]["client_id"], Value::Null);
        assert!(values[0]["token"]["grant"].as_str().unwrap().contains("token key"));
        let data: Vec<&Value> = values.iter().filter(|v| v["type"] == "data").collect();
        assert!(inspector.unopened > 0 && inspector.opened == 0);
        // Every one is known sealed from its handshake's token, even those whose ciphertext
        // happens to read as frames (any byte from 0x80 starts a frame running to the end).
        assert!(data.iter().all(|v| v["sealed"] == true), "no sealed body read as frames");
        assert!(data.iter().all(|v| v["frames"].as_str().is_some_and(|s| s.contains("--key"))));
    }

    #[test]
    fn garbage_and_every_truncation_decode_to_errors_not_panics() {
        let session = recorded_session();
        let mut inspector = Inspector::new(Some(secure::key()));
        for d in &session[..6] {
            for cut in 0..d.payload.len() {
                let cut = Datagram { payload: d.payload[..cut].to_vec(), ..d.clone() };
                let _ = inspector.datagram(&cut);
            }
        }
        let value = inspector.lone(&[0xde, 0xad, 0xbe, 0xef], None);
        assert!(value["error"].is_string(), "{value}");
    }
}

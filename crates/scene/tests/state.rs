//! Goal: a scene room relays clients' messages exactly once and in order per sender on the
//! reliable path (at most once on the unreliable one), every client's key-value state
//! converges to the room's (a late joiner's included), a leaver's scope goes everywhere, and
//! each refusal (too large, too fast, a long key, a large value, a full scope, garbage) is
//! counted without disturbing the other players; the room's own keys (avatars, classes, who
//! holds what) reach every client.
//! Method: a scene room and its clients over emulated lossy links (rally-sim's `RoomNet`), in
//! virtual time; the host's part is `handle_event` on every room event, the client's a
//! `SceneState` fed every session event, as the product does.

use glam::Vec3;
use rally_engine::{ClientEvent, ClientId, Delivery, Room, Transform, World, RELIABLE, UNRELIABLE};
use rally_netem::LinkConfig;
use rally_scene::{
    handle_event, relay_from_room, resend_missed, scene_room, write_key, Classes, Hand, Held,
    Holder, RelayTarget, Scene, SceneEvent, SceneMessage, SceneRoom, SceneState, Scope, StateStats,
    WriteScope, XrHand, XrInput, XrPose, AVATAR_KEY, CLASSES_KEY, HELD_KEY,
};
use rally_sim::links::{calm, hostile};
use rally_sim::RoomNet;
use std::collections::BTreeMap;
use std::time::Duration;

/// A room of an empty scene with `extra` scene text, its clients, and the host's and the
/// clients' glue: room events go to `handle_event`, session events to a `SceneState` each.
struct Host {
    net: RoomNet<SceneRoom>,
    mirrors: Vec<SceneState>,
    seen_room: usize,
    seen_clients: Vec<usize>,
    /// Every scene event each mirror yielded, in order.
    events: Vec<Vec<SceneEvent>>,
}

impl Host {
    fn new(extra: &str, clients: usize, link: LinkConfig, seed: u64) -> Self {
        let text = format!("[room]\ntick_rate = 60\n{extra}");
        let scene = Scene::parse("state.toml", &text).unwrap();
        Self::with_room(scene_room(&scene, seed).unwrap(), clients, link, seed)
    }

    fn with_room(room: Room<SceneRoom>, clients: usize, link: LinkConfig, seed: u64) -> Self {
        Self {
            net: RoomNet::new(room, clients, link, seed),
            mirrors: vec![SceneState::new(); clients],
            seen_room: 0,
            seen_clients: vec![0; clients],
            events: vec![Vec::new(); clients],
        }
    }

    fn connect(&mut self, i: usize) {
        self.net.connect(i);
        self.run(Duration::from_millis(500));
        assert!(self.net.sessions[i].client_id().is_some(), "client {i} did not join");
    }

    fn id(&self, i: usize) -> ClientId {
        self.net.sessions[i].client_id().unwrap()
    }

    /// Runs `duration`, a tick at a time, handing events on after each.
    fn run(&mut self, duration: Duration) {
        let end = self.net.net.now + duration;
        let tick = self.net.room.config().dt();
        while self.net.net.now < end {
            self.net.run_for(tick);
            self.route();
            // The host's after-tick hook.
            resend_missed(&mut self.net.room);
            self.net.flush();
        }
    }

    fn route(&mut self) {
        while self.seen_room < self.net.room_events.len() {
            let event = self.net.room_events[self.seen_room].clone();
            self.seen_room += 1;
            handle_event(&mut self.net.room, event);
        }
        for (i, mirror) in self.mirrors.iter_mut().enumerate() {
            let events = &self.net.client_events[i];
            for event in &events[self.seen_clients[i]..] {
                mirror.handle(event);
            }
            self.seen_clients[i] = events.len();
            while let Some(event) = mirror.poll_event() {
                self.events[i].push(event);
            }
        }
        self.net.flush();
    }

    fn send(&mut self, i: usize, message: SceneMessage) {
        let delivery = match message {
            SceneMessage::Relay { reliable: false, .. } => Delivery::Unreliable,
            _ => Delivery::Reliable,
        };
        self.net.sessions[i].send(delivery, &message).unwrap();
    }

    fn stats(&self) -> StateStats {
        self.net.room.simulation().state().stats().clone()
    }

    /// The relayed bytes client `i` got, by sender.
    fn relayed(&self, i: usize) -> BTreeMap<Option<ClientId>, Vec<Vec<u8>>> {
        let mut by_sender: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for event in &self.events[i] {
            if let SceneEvent::Relayed { from, bytes } = event {
                by_sender.entry(*from).or_default().push(bytes.clone());
            }
        }
        by_sender
    }

    /// Asserts that client `i` holds exactly the room's players and values.
    fn assert_mirrors_room(&self, i: usize) {
        let state = self.net.room.simulation().state();
        let mirror = &self.mirrors[i];
        let players: Vec<_> = state.players().collect();
        assert_eq!(mirror.players().collect::<Vec<_>>(), players, "client {i}'s players");
        for scope in std::iter::once(Scope::Room).chain(players.iter().map(|&p| Scope::Player(p))) {
            let room: Vec<_> = state.values(scope).collect();
            let held: Vec<_> = mirror.values(scope).collect();
            assert_eq!(held, room, "client {i}'s values of {scope:?}");
        }
    }
}

fn relay(to: RelayTarget, reliable: bool, bytes: &[u8]) -> SceneMessage {
    SceneState::relay(to, reliable, bytes.to_vec())
}

#[test]
fn relay_messages_arrive_exactly_once_in_order_per_sender_through_loss() {
    for seed in [1, 2] {
        let mut host = Host::new("[relay]\nper_second = 600\nburst = 200\n", 4, hostile(), seed);
        for i in 0..4 {
            host.connect(i);
        }
        let sent = 60u8;
        for n in 0..sent {
            for i in 0..4 {
                host.send(i, relay(RelayTarget::All, true, &[i as u8, n]));
                host.send(i, relay(RelayTarget::Others, false, &[i as u8, n, 0xff]));
            }
            host.run(Duration::from_millis(20));
        }
        host.net.net.set_links(calm());
        host.run(Duration::from_secs(2));
        assert_eq!(host.stats().refused(), 0, "seed {seed}");
        for i in 0..4 {
            let got = host.relayed(i);
            for j in 0..4u8 {
                let from = Some(host.id(j as usize));
                let of_j = got.get(&from).cloned().unwrap_or_default();
                let (reliable, unreliable): (Vec<_>, Vec<_>) =
                    of_j.into_iter().partition(|bytes| bytes.len() == 2);
                let expected: Vec<Vec<u8>> = (0..sent).map(|n| vec![j, n]).collect();
                assert_eq!(reliable, expected, "seed {seed}: client {i} from client {j}");
                // At most once each, never to the sender, and most of them through 10% loss.
                let mut seen: Vec<_> = unreliable.iter().map(|bytes| bytes[1]).collect();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), unreliable.len(), "seed {seed}: an unreliable duplicate");
                if i == j as usize {
                    assert!(unreliable.is_empty(), "seed {seed}: `Others` came back to {i}");
                } else {
                    assert!(unreliable.len() > sent as usize / 2, "seed {seed}: {i} from {j}");
                }
            }
        }
    }
}

#[test]
fn key_value_state_converges_for_every_client_and_a_late_joiner() {
    for seed in [3, 4] {
        let mut host = Host::new("[relay]\nper_second = 600\nburst = 200\n", 4, hostile(), seed);
        for i in 0..3 {
            host.connect(i);
        }
        // Three writers contend for the same room keys and fill their own scopes.
        for n in 0..40u8 {
            for i in 0..3 {
                let key = ["phase", "score", "ball"][(n as usize + i) % 3];
                host.send(i, SceneState::write(WriteScope::Room, key, Some(vec![i as u8, n])));
                let mine = format!("k{}", n % 7);
                let value = (n % 5 != 4).then(|| vec![n; n as usize]);
                host.send(i, SceneState::write(WriteScope::Mine, &mine, value));
            }
            host.run(Duration::from_millis(20));
        }
        // The room's own code writes too.
        write_key(&mut host.net.room, Scope::Room, "round", Some(b"2".to_vec())).unwrap();
        host.run(Duration::from_millis(300));
        host.connect(3);
        host.send(3, SceneState::write(WriteScope::Mine, "name", Some(b"late".to_vec())));
        host.net.net.set_links(calm());
        host.run(Duration::from_secs(2));
        let stats = host.stats();
        assert_eq!(stats.refused(), 0, "seed {seed}");
        assert_eq!(stats.writes, 40 * 6 + 2, "seed {seed}");
        let room = host.net.room.simulation().state();
        assert_eq!(room.get(Scope::Room, "round"), Some(&b"2"[..]));
        assert_eq!(room.values(Scope::Room).count(), 4, "seed {seed}");
        for i in 0..4 {
            host.assert_mirrors_room(i);
        }
        // The late joiner saw the values as changes after its reset.
        let late = &host.events[3];
        assert!(matches!(late.first(), Some(SceneEvent::Reset { client: Some(_) })));
    }
}

#[test]
fn every_client_learns_whose_avatar_is_whose_a_late_joiner_too() {
    // The room writes each joiner's avatar (head, left hand, right hand) in its scope: every
    // client, one that joins later included, finds its own avatar and everyone else's, as the
    // room spawned them, through lossy links.
    let mut host = Host::new("", 4, hostile(), 11);
    for i in 0..3 {
        host.connect(i);
    }
    host.run(Duration::from_millis(500));
    host.connect(3);
    host.net.net.set_links(calm());
    host.run(Duration::from_secs(2));
    let room = host.net.room.simulation();
    let avatars: Vec<_> = (0..4).map(|i| room.avatar(host.id(i)).unwrap()).collect();
    for (i, mirror) in host.mirrors.iter().enumerate() {
        let own = mirror.client().and_then(|me| mirror.avatar(me));
        assert_eq!(own, Some(avatars[i]), "client {i}'s own avatar");
        for (j, avatar) in avatars.iter().enumerate() {
            assert_eq!(mirror.avatar(host.id(j)), Some(*avatar), "client {i} of client {j}");
        }
        host.assert_mirrors_room(i);
    }
    // The room's announcements are not writes, and refuse nothing.
    assert_eq!(host.stats(), StateStats::default());
}

#[test]
fn every_client_learns_each_bodys_class_and_whose_hand_holds_what() {
    // The room writes its bodies' classes once and who holds what after each grab and
    // release, in its own scope: every client, a late joiner too, reads the same table and the
    // same holder through lossy links, and a release removes the key everywhere.
    let bodies = "gravity = [0.0, 0.0, 0.0]\n[[bodies]]\nname = \"block\"\nclass = \"block\"\n\
                  box = [0.1, 0.1, 0.1]\nposition = [0.0, 1.0, -1.0]\ngrabbable = true\n\
                  [[bodies]]\nname = \"ball\"\nclass = \"ball\"\nsphere = 0.1\n\
                  position = [2.0, 1.0, -1.0]\n";
    let mut host = Host::new(bodies, 3, hostile(), 5);
    host.connect(0);
    host.connect(1);
    let game = host.net.room.simulation();
    let (block, ball) = (game.entity("block").unwrap(), game.entity("ball").unwrap());
    let grip = |grip: u8| {
        let at = Transform::from_position(Vec3::new(0.0, 1.0, -1.0));
        let hand = XrHand { pose: XrPose::from_transform(&at), grip, trigger: 0 };
        XrInput { hands: [hand, XrHand::default()], ..XrInput::default() }
    };
    let hold = |host: &mut Host, grip_value: u8| {
        for _ in 0..30 {
            host.net.input(0, grip(grip_value));
            host.run(Duration::from_millis(20));
        }
    };
    hold(&mut host, 255);
    host.connect(2);
    host.net.net.set_links(calm());
    hold(&mut host, 255);
    let holder = Holder { player: host.id(0), hand: Hand::Left };
    for (i, mirror) in host.mirrors.iter().enumerate() {
        let classes = Classes::from_bytes(mirror.get(Scope::Room, CLASSES_KEY).unwrap()).unwrap();
        let class = |id| classes.index(id).map(|k| classes.names()[usize::from(k)].as_str());
        assert_eq!((class(block), class(ball)), (Some("block"), Some("ball")), "client {i}");
        let held = Held::from_bytes(mirror.get(Scope::Room, HELD_KEY).unwrap()).unwrap();
        assert_eq!(held.entries(), [(block, holder)], "client {i}");
    }
    hold(&mut host, 0);
    for (i, mirror) in host.mirrors.iter().enumerate() {
        assert_eq!(mirror.get(Scope::Room, HELD_KEY), None, "client {i}: let go");
        host.assert_mirrors_room(i);
    }
    // The room's roster is not a write, and refuses nothing.
    assert_eq!(host.stats(), StateStats::default());
}

#[test]
fn a_leavers_scope_is_removed_everywhere() {
    let mut host = Host::new("", 3, calm(), 5);
    for i in 0..3 {
        host.connect(i);
    }
    host.send(2, SceneState::write(WriteScope::Mine, "name", Some(b"gone".to_vec())));
    host.run(Duration::from_millis(200));
    let leaver = host.id(2);
    assert_eq!(host.mirrors[0].get(Scope::Player(leaver), "name"), Some(&b"gone"[..]));
    host.net.disconnect(2);
    // The scope outlives the connection: the session may resume.
    host.run(Duration::from_secs(1));
    assert!(host.net.room.simulation().state().players().any(|p| p == leaver));
    host.run(host.net.room.config().resume_window);
    assert!(!host.net.room.simulation().state().players().any(|p| p == leaver));
    for i in 0..2 {
        assert!(host.events[i].contains(&SceneEvent::PlayerLeft(leaver)), "client {i}");
        assert_eq!(host.mirrors[i].get(Scope::Player(leaver), "name"), None, "client {i}");
        host.assert_mirrors_room(i);
    }
}

#[test]
fn a_resumed_client_catches_up_with_what_it_missed() {
    let mut host = Host::new("", 2, hostile(), 9);
    host.connect(0);
    host.connect(1);
    for key in ["a", "b", "c"] {
        host.send(0, SceneState::write(WriteScope::Room, key, Some(key.as_bytes().to_vec())));
    }
    host.run(Duration::from_millis(500));
    let before = host.id(1);
    host.net.disconnect(1);
    // While client 1 is away: a change, a removal and a new key.
    host.send(0, SceneState::write(WriteScope::Room, "a", Some(b"A".to_vec())));
    host.send(0, SceneState::write(WriteScope::Room, "b", None));
    host.send(0, SceneState::write(WriteScope::Room, "d", Some(b"d".to_vec())));
    host.run(Duration::from_millis(500));
    host.connect(1);
    host.net.net.set_links(calm());
    host.run(Duration::from_secs(1));
    assert_eq!(host.id(1), before, "the session resumed");
    assert_eq!(host.events[1].iter().filter(|e| matches!(e, SceneEvent::Reset { .. })).count(), 2);
    for i in 0..2 {
        host.assert_mirrors_room(i);
    }
    let values: Vec<_> = host.mirrors[1].values(Scope::Room).collect();
    assert_eq!(values, vec![("a", &b"A"[..]), ("c", &b"c"[..]), ("d", &b"d"[..])]);
}

#[test]
fn a_client_the_full_outbox_skipped_is_sent_everything_again() {
    // An outbox of 4 messages for 3 players: a burst of relays to all fills it, and the write
    // that follows misses players; after the tick they are sent everything again.
    let scene = Scene::parse("full.toml", "[room]\ntick_rate = 60\nplayers_max = 3\n").unwrap();
    let config = rally_engine::RoomConfig { outbox_max: 4, ..scene.room_config() };
    let game = SceneRoom::new(&scene, &mut World::new(scene.entities_max())).unwrap();
    let room = Room::new(config, game, 10).unwrap();
    let mut host = Host::with_room(room, 3, calm(), 10);
    for i in 0..3 {
        host.connect(i);
    }
    for n in 0..4 {
        host.send(0, relay(RelayTarget::All, true, &[n]));
    }
    host.send(1, SceneState::write(WriteScope::Room, "phase", Some(b"play".to_vec())));
    host.run(Duration::from_millis(300));
    let missed = host.stats().sends_failed;
    assert!(missed > 0, "the outbox overflowed");
    let resets = |host: &Host, i: usize| {
        host.events[i].iter().filter(|e| matches!(e, SceneEvent::Reset { .. })).count()
    };
    assert!((0..3).any(|i| resets(&host, i) > 1), "someone missed a change and was sent all");
    host.send(2, SceneState::write(WriteScope::Mine, "name", Some(b"c".to_vec())));
    host.run(Duration::from_millis(300));
    for i in 0..3 {
        host.assert_mirrors_room(i);
        assert_eq!(host.mirrors[i].get(Scope::Room, "phase"), Some(&b"play"[..]), "client {i}");
    }
}

#[test]
fn refusals_are_counted_and_the_other_players_are_undisturbed() {
    let limits = "[relay]\nmessage_bytes_max = 16\nper_second = 1\nburst = 5\n\
                  [state]\nkey_bytes_max = 8\nvalue_bytes_max = 8\nkeys_per_scope_max = 2\n";
    let mut host = Host::new(limits, 2, calm(), 6);
    host.connect(0);
    host.connect(1);
    let (a, b) = (host.id(0), host.id(1));
    // Client 0 misbehaves, all in one go, so that its bucket (5 messages) does not refill.
    host.send(0, SceneState::write(WriteScope::Mine, "k1", Some(vec![1])));
    host.send(0, SceneState::write(WriteScope::Mine, "k2", Some(vec![2])));
    host.send(0, SceneState::write(WriteScope::Mine, "k3", Some(vec![3]))); // a third key
    host.send(0, SceneState::write(WriteScope::Room, "too-long-key", Some(vec![4])));
    host.send(0, SceneState::write(WriteScope::Room, "big", Some(vec![5; 9])));
    // The room's own key: no client may write it, not even in its own scope.
    host.send(0, SceneState::write(WriteScope::Mine, AVATAR_KEY, Some(vec![0; 12])));
    host.send(0, relay(RelayTarget::All, true, &[6; 17]));
    host.send(0, relay(RelayTarget::One(999), true, &[7]));
    for n in 0..5 {
        host.send(0, relay(RelayTarget::Others, true, &[8, n]));
    }
    // A room's message from a client.
    host.send(0, SceneMessage::PlayerLeft(b));
    host.send(0, SceneMessage::Values { changes: Vec::new() });
    // Client 1 plays by the rules meanwhile.
    host.send(1, relay(RelayTarget::Others, true, b"hello"));
    host.send(1, relay(RelayTarget::One(a), true, b"psst"));
    host.send(1, SceneState::write(WriteScope::Room, "phase", Some(b"play".to_vec())));
    host.run(Duration::from_millis(300));

    let stats = host.stats();
    let expected = StateStats {
        relayed: 3 + 2,
        writes: 2 + 1,
        refused_too_large: 1,
        refused_rate: 2,
        refused_key: 1,
        refused_value: 1,
        refused_scope_full: 1,
        refused_target: 1,
        refused_direction: 2,
        refused_reserved: 1,
        sends_failed: 0,
    };
    assert_eq!(stats, expected);
    // Client 1 got exactly what was accepted of client 0's, and its own went through.
    let to_b: Vec<Vec<u8>> = (0..3).map(|n| vec![8, n]).collect();
    assert_eq!(host.relayed(1).get(&Some(a)), Some(&to_b));
    let from_b = vec![b"hello".to_vec(), b"psst".to_vec()];
    assert_eq!(host.relayed(0).get(&Some(b)), Some(&from_b));
    assert!(host.events[1].iter().all(|e| *e != SceneEvent::PlayerLeft(b)));
    for i in 0..2 {
        host.assert_mirrors_room(i);
        assert_eq!(host.mirrors[i].get(Scope::Room, "phase"), Some(&b"play"[..]));
        // Two keys of client 0's own (the scope's limit) besides the room's avatar key.
        assert_eq!(host.mirrors[i].values(Scope::Player(a)).count(), 2 + 1);
        assert_eq!(host.mirrors[i].avatar(a), host.net.room.simulation().avatar(a));
    }
    // A second later the bucket holds one message again.
    host.run(Duration::from_secs(1));
    host.send(0, relay(RelayTarget::Others, true, &[9]));
    host.run(Duration::from_millis(200));
    assert_eq!(host.stats().relayed, 6);
    // The room's own code is not rate limited, and says who it is: nobody.
    relay_from_room(&mut host.net.room, rally_engine::Target::All, Delivery::Reliable, vec![0])
        .unwrap();
    host.run(Duration::from_millis(200));
    assert_eq!(host.relayed(1).get(&None), Some(&vec![vec![0]]));
}

#[test]
fn garbage_is_counted_and_harms_no_one() {
    let mut host = Host::new("", 2, calm(), 7);
    host.connect(0);
    host.connect(1);
    let dropped = host.net.room.stats().messages_dropped;
    let handle = host.net.net.clients[0].handle.unwrap();
    let junk: [&[u8]; 5] = [&[], &[0xff; 7], &[1, 2, 3], &[0x80; 300], &[3, 0xff, 0xff, 0xff]];
    for channel in [RELIABLE, UNRELIABLE] {
        for bytes in junk {
            let _ = host.net.net.clients[0].endpoint.send(handle, channel, bytes);
        }
    }
    host.net.flush();
    host.run(Duration::from_millis(300));
    assert!(host.net.room.stats().messages_dropped >= dropped + 9);
    // The room still serves both.
    host.send(0, relay(RelayTarget::Others, true, b"still here"));
    host.run(Duration::from_millis(300));
    assert_eq!(host.relayed(1).get(&Some(host.id(0))), Some(&vec![b"still here".to_vec()]));
    // A client mirror fed the room's messages out of order, or a client's, does not panic.
    let mut mirror = SceneState::new();
    let b = host.id(1);
    for message in [
        SceneMessage::PlayerLeft(b),
        SceneMessage::Values {
            changes: vec![rally_scene::Change {
                scope: Scope::Player(b),
                key: "x".into(),
                value: None,
            }],
        },
        relay(RelayTarget::All, true, &[1]),
        SceneMessage::PlayerJoined(b),
        SceneMessage::PlayerJoined(b),
    ] {
        mirror.handle(&ClientEvent::Message(message));
    }
    assert_eq!(mirror.unexpected(), 1);
    assert_eq!(mirror.players().collect::<Vec<_>>(), vec![b]);
}

#[test]
fn out_of_range_limits_in_a_scene_are_refused_with_their_field() {
    let cases = [
        ("[relay]\nmessage_bytes_max = 0\n", "relay.message_bytes_max"),
        ("[relay]\nper_second = 0\n", "relay.per_second"),
        ("[relay]\nburst = 10001\n", "relay.burst"),
        ("[state]\nkey_bytes_max = 257\n", "state.key_bytes_max"),
        ("[state]\nvalue_bytes_max = 16385\n", "state.value_bytes_max"),
        ("[state]\nkeys_per_scope_max = 0\n", "state.keys_per_scope_max"),
    ];
    for (text, field) in cases {
        let error = Scene::parse("limits.toml", text).unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
        assert!(error.to_string().contains("fix: give a value from"), "{error}");
    }
    let error = Scene::parse("limits.toml", "[relay]\nrate = 5\n").unwrap_err();
    assert!(error.to_string().contains("rate"), "an unknown field is named: {error}");
    let scene = Scene::parse("limits.toml", "[relay]\nburst = 3\n").unwrap();
    assert_eq!(scene.state_settings().relay_burst, 3);
    assert_eq!(scene.state_settings().relay_per_second, 60, "the rest keep their defaults");
}

proptest::proptest! {
    /// Any bytes a client sends as a scene message: dropped by the codec, or handled (relayed,
    /// applied or refused and counted) without a panic, and the limits hold.
    #[test]
    fn any_message_bytes_are_handled_within_the_limits(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
    ) {
        let codec = rally_wire::MessageCodec::default();
        let scene = Scene::parse("any.toml", "[state]\nkeys_per_scope_max = 1\n").unwrap();
        let mut room = rally_scene::scene_room(&scene, 1).unwrap();
        handle_event(&mut room, rally_engine::RoomEvent::Joined(1));
        if let Ok(message) = codec.decode::<SceneMessage>(&bytes) {
            for _ in 0..2 {
                let message = message.clone();
                let event = rally_engine::RoomEvent::Message { client: 1, message };
                handle_event(&mut room, event);
            }
        }
        let state = room.simulation().state();
        proptest::prop_assert!(state.values(Scope::Room).count() <= 1);
        proptest::prop_assert!(state.values(Scope::Player(1)).count() <= 1);
        proptest::prop_assert!(state.values(Scope::Player(2)).count() == 0);
    }
}

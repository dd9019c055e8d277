//! The standard XR player end to end, in virtual time over lossy links: players join the
//! sandbox scene, grab a block, hand it from one player's hand to another's and throw it; bad
//! grabs and garbage poses are refused and counted; every client ends with the room's state.

use glam::Vec3;
use rally_engine::{ClientId, EntityId, Room, World};
use rally_netem::{LinkConfig, LossModel};
use rally_scene::{scene_room, Avatar, Scene, SceneRoom, XrHand, XrInput, XrPose, GRIP_HOLD_MIN};
use rally_sim::RoomNet;
use std::time::Duration;

const PLAYERS: usize = 8;
/// A client's frame: 90 Hz, slower than the room's 120 Hz ticks.
const FRAME: Duration = Duration::from_nanos(1_000_000_000 / 90);

fn sandbox() -> Scene {
    let path = format!("{}/../../scenes/sandbox.toml", env!("CARGO_MANIFEST_DIR"));
    Scene::load(path).unwrap()
}

fn lossy() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(10),
        jitter: Duration::from_millis(2),
        reorder: true,
        loss: LossModel::Bernoulli { probability: 0.05 },
        duplicate: 0.01,
        ..LinkConfig::default()
    }
}

/// What each player does with its hands this frame; the head stays where it spawned.
#[derive(Clone, Copy)]
struct Pose {
    at: Vec3,
    grip: bool,
}

/// The players' inputs: every player holds still at its spawn pose unless told otherwise.
struct Players {
    clients: Vec<ClientId>,
    avatars: Vec<Avatar>,
    head: Vec<XrPose>,
    hands: Vec<[Pose; 2]>,
}

impl Players {
    /// The first `count` clients, joined.
    fn new(net: &RoomNet<SceneRoom>, count: usize) -> Self {
        let clients: Vec<ClientId> =
            net.sessions[..count].iter().map(|s| s.client_id().expect("joined")).collect();
        let game = net.room.simulation();
        let avatars: Vec<Avatar> = clients.iter().map(|c| game.avatar(*c).unwrap()).collect();
        let world = net.room.world();
        let at = |id: EntityId| world.get(id).unwrap().transform;
        Self {
            head: avatars.iter().map(|a| XrPose::from_transform(&at(a.head))).collect(),
            hands: avatars
                .iter()
                .map(|a| [a.left, a.right].map(|h| Pose { at: at(h).position, grip: false }))
                .collect(),
            clients,
            avatars,
        }
    }

    fn input(&self, i: usize) -> XrInput {
        let hand = |p: Pose| XrHand {
            pose: XrPose::from_transform(&rally_engine::Transform::from_position(p.at)),
            grip: if p.grip { 255 } else { 0 },
            trigger: 0,
        };
        XrInput { head: self.head[i], hands: self.hands[i].map(hand), ..XrInput::default() }
    }

    /// Every player sends its input, then the net runs one frame.
    fn frame(&self, net: &mut RoomNet<SceneRoom>) {
        for i in 0..self.clients.len() {
            net.input(i, self.input(i));
        }
        net.run_for(FRAME);
    }

    /// Frames until `done` holds, at most `frames_max` (the test fails past it).
    fn until(
        &mut self,
        net: &mut RoomNet<SceneRoom>,
        frames_max: usize,
        what: &str,
        done: impl Fn(&Room<SceneRoom>) -> bool,
    ) {
        for _ in 0..frames_max {
            self.frame(net);
            if done(&net.room) {
                return;
            }
        }
        panic!("not within {frames_max} frames: {what}");
    }
}

fn position(world: &World, id: EntityId) -> Vec3 {
    world.get(id).unwrap().transform.position
}

#[test]
fn eight_players_grab_hand_over_throw_and_converge() {
    for seed in 0..2 {
        run(seed);
    }
}

fn run(seed: u64) {
    let scene = sandbox();
    let room = scene_room(&scene, seed).unwrap();
    let mut net = RoomNet::new(room, PLAYERS, lossy(), seed);
    for i in 0..PLAYERS {
        net.connect(i);
    }
    net.run_for(Duration::from_secs(1));
    let mut players = Players::new(&net, PLAYERS);
    let spawned: Vec<EntityId> = players.avatars.iter().flat_map(|a| a.entities()).collect();
    assert_eq!(spawned.len(), 3 * PLAYERS, "seed {seed}: three entities per player");
    assert_eq!(net.room.simulation().class(players.avatars[0].head), Some("head"));
    assert_eq!(net.room.simulation().class(players.avatars[0].left), Some("hand"));
    let block = net.room.simulation().entity("block-0").unwrap();
    let (giver, taker) = (players.avatars[0], players.avatars[1]);

    // Player 0 reaches over the block (0.06 m above its top: in reach, not touching) and grips.
    let top = position(net.room.world(), block) + Vec3::new(0.0, 0.16, 0.0);
    players.hands[0][1] = Pose { at: top, grip: false };
    players.frame(&mut net);
    players.hands[0][1].grip = true;
    players.until(&mut net, 30, "player 0 holds the block", |room| {
        room.world().grabber_of(block) == Some(giver.right)
    });
    // It carries the block to a meeting point: the block follows the hand.
    let meet = Vec3::new(0.0, 1.2, 0.0);
    for k in 1..=30 {
        players.hands[0][1].at = top.lerp(meet, k as f32 / 30.0);
        players.frame(&mut net);
    }
    let carried = position(net.room.world(), block) - position(net.room.world(), giver.right);
    assert!(carried.length() < 0.2, "seed {seed}: the block stays in the hand: {carried}");

    // Player 1's left hand comes next to it and grips: the block is takeable, it changes hands.
    players.hands[1][0] = Pose { at: meet + Vec3::new(0.0, 0.0, 0.2), grip: true };
    players.until(&mut net, 30, "player 1 takes the block", |room| {
        room.world().grabber_of(block) == Some(taker.left)
    });
    // Player 0 lets go of what it no longer holds: nothing happens to the block.
    players.hands[0][1].grip = false;
    players.frame(&mut net);
    assert_eq!(net.room.world().grabber_of(block), Some(taker.left), "seed {seed}");

    // Player 1 swings at 3 m/s towards open floor and lets go: the block flies on.
    let swing = Vec3::new(0.0, 0.0, 3.0);
    let start = players.hands[1][0].at;
    for k in 1..=20 {
        players.hands[1][0].at = start + swing * (FRAME * k).as_secs_f32();
        players.frame(&mut net);
    }
    // The hand still moves as it opens.
    players.hands[1][0] = Pose { at: start + swing * (FRAME * 21).as_secs_f32(), grip: false };
    players
        .until(&mut net, 30, "player 1 lets go", |room| room.world().grabber_of(block).is_none());
    let thrown = net.room.world().get(block).unwrap().linear_velocity;
    let error = (thrown - swing).length() / swing.length();
    assert!(error < 0.2, "seed {seed}: thrown at the hand's velocity: {thrown} vs {swing}");
    let released_at = position(net.room.world(), block);
    net.run_for(Duration::from_millis(200));
    let flown = position(net.room.world(), block) - released_at;
    assert!(flown.z > 0.3, "seed {seed}: the block flew on: {flown}");

    // Refusals: a grip in empty air, a grip over the kinematic platform (not grabbable), and
    // garbage poses from player 4.
    let platform = net.room.simulation().entity("platform").unwrap();
    players.hands[2][0] = Pose { at: Vec3::new(0.0, 2.5, 6.0), grip: true };
    players.hands[3][0] =
        Pose { at: position(net.room.world(), platform) + Vec3::new(0.0, 0.1, 0.0), grip: true };
    let before = net.room.simulation().stats();
    let head_before = position(net.room.world(), players.avatars[4].head);
    for garbage in [f32::NAN, f32::INFINITY, 1e30, -1e9] {
        players.head[4] = XrPose { position: [garbage; 3], rotation: [0.0, 0.0, 0.0, 1.0] };
        players.frame(&mut net);
    }
    players.head[4] = XrPose { position: [0.0, 1.0, 0.0], rotation: [0.0; 4] };
    players.frame(&mut net);
    let mut forged = players.input(5);
    forged.hands[0].pose.rotation = [f32::NAN, 1.0, 0.0, 0.0];
    forged.hands[1].grip = GRIP_HOLD_MIN;
    forged.hands[1].pose.position = [f32::NAN; 3];
    net.input(5, forged);
    net.run_for(FRAME * 10);
    let stats = net.room.simulation().stats();
    // Player 2's grip, and player 5's right grip where its bad pose left the hand (its spawn).
    assert_eq!(stats.grabs_out_of_reach - before.grabs_out_of_reach, 2, "seed {seed}");
    assert_eq!(stats.grabs_not_grabbable - before.grabs_not_grabbable, 1, "seed {seed}");
    assert!(stats.bad_poses - before.bad_poses >= 7, "seed {seed}: {stats:?}");
    assert_eq!(position(net.room.world(), players.avatars[4].head), head_before, "seed {seed}");
    assert_eq!(stats.grabs, 2, "seed {seed}: the grab and the handoff: {stats:?}");
    assert_eq!(stats.releases, 1, "seed {seed}: the throw");

    // Everything settles; on a healed link every client ends with the room's state exactly
    // (after quantization).
    net.net.set_links(LinkConfig { delay: Duration::from_millis(10), ..LinkConfig::default() });
    net.run_for(Duration::from_secs(4));
    let server = net.room.snapshot().entities();
    for (i, session) in net.sessions.iter().enumerate() {
        assert_eq!(session.snapshot().unwrap().entities(), server, "seed {seed}: client {i}");
    }
}

#[test]
fn leaving_releases_and_despawns_the_avatar() {
    // Goal: a player who leaves for good lets go of what it holds and its avatar goes, and the
    // spawn point it stood on is the next player's. Method: one player grabs a block, then its
    // connection closes and the resume window passes.
    let scene = sandbox();
    let room = scene_room(&scene, 3).unwrap();
    let mut net = RoomNet::new(room, 2, LinkConfig::default(), 3);
    net.connect(0);
    net.run_for(Duration::from_millis(500));
    let mut players = Players::new(&net, 1);
    let avatar = players.avatars[0];
    let block = net.room.simulation().entity("block-3").unwrap();
    let over = position(net.room.world(), block) + Vec3::new(0.0, 0.15, 0.0);
    players.hands[0][0] = Pose { at: over, grip: true };
    players.until(&mut net, 30, "the block is held", |room| {
        room.world().grabber_of(block) == Some(avatar.left)
    });
    let head_at = position(net.room.world(), avatar.head);
    net.disconnect(0);
    let window = net.room.config().resume_window;
    net.run_for(window + Duration::from_secs(1));
    let game = net.room.simulation();
    assert!(game.avatar(players.clients[0]).is_none());
    assert!(avatar.entities().iter().all(|id| net.room.world().get(*id).is_none()));
    assert_eq!(net.room.world().grabber_of(block), None);
    assert!(position(net.room.world(), block).y < 0.2, "the block fell back to the floor");
    net.connect(1);
    net.run_for(Duration::from_millis(500));
    let client = net.sessions[1].client_id().unwrap();
    let next = net.room.simulation().avatar(client).unwrap();
    assert_eq!(position(net.room.world(), next.head), head_at, "the first spawn point is free");
}

#[test]
fn the_fast_path_sends_both_hands_and_what_they_hold_between_ticks() {
    // Goal: with the fast pipeline one input's message carries the head, both hands and what
    // they hold, before any tick. Method: player 0 holds a block in its left hand; the room
    // stops ticking; player 0 moves both hands; player 1 sees both hands and the block where
    // the input put them.
    let scene = sandbox();
    let room = scene_room(&scene, 5).unwrap();
    let link = LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() };
    let mut net = RoomNet::new(room, 2, link, 5);
    net.connect(0);
    net.connect(1);
    net.run_for(Duration::from_millis(500));
    let mut players = Players::new(&net, 2);
    let avatar = players.avatars[0];
    let block = net.room.simulation().entity("block-5").unwrap();
    let over = position(net.room.world(), block) + Vec3::new(0.0, 0.15, 0.0);
    players.hands[0][0] = Pose { at: over, grip: true };
    players.until(&mut net, 30, "the block is held", |room| {
        room.world().grabber_of(block) == Some(avatar.left)
    });
    players.frame(&mut net);
    net.run_for(Duration::from_millis(100));
    let far = net.net.now + Duration::from_secs(3600);
    net.set_tick_schedule(far, Duration::from_secs(3600));
    let ticks = net.room.stats().ticks;
    let before = position(net.room.world(), block);
    let lift = Vec3::new(0.0, 0.5, 0.0);
    players.hands[0][0].at += lift;
    players.hands[0][1].at += lift;
    net.input(0, players.input(0));
    net.run_for(Duration::from_millis(20));
    assert_eq!(net.room.stats().ticks, ticks, "no tick ran");
    let seen =
        |id: EntityId| net.sessions[1].entities().find(|e| e.id == id).map(|e| e.position).unwrap();
    for (id, at) in [(avatar.left, players.hands[0][0].at), (avatar.right, players.hands[0][1].at)]
    {
        assert!((seen(id) - at).length() < 0.002, "hand {id} at {} not {at}", seen(id));
    }
    let expected = position(net.room.world(), block);
    assert!((expected - before - lift).length() < 0.001, "the block moved with the hand");
    assert!((seen(block) - expected).length() < 0.002, "the held block came with its hand");
}

/// Records what the hooks heard.
#[derive(Default)]
struct Heard {
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rally_scene::SceneHooks for Heard {
    fn joined(&mut self, _: &mut World, client: ClientId, _: Avatar) {
        self.log.lock().unwrap().push(format!("joined {client}"));
    }
    fn left(&mut self, _: &mut World, client: ClientId, _: Avatar) {
        self.log.lock().unwrap().push(format!("left {client}"));
    }
    fn grabbed(&mut self, _: &mut World, client: ClientId, hand: rally_scene::Hand, id: EntityId) {
        self.log.lock().unwrap().push(format!("grabbed {client} {hand:?} {id}"));
    }
    fn released(&mut self, _: &mut World, client: ClientId, hand: rally_scene::Hand, id: EntityId) {
        self.log.lock().unwrap().push(format!("released {client} {hand:?} {id}"));
    }
    fn contact(&mut self, _: &mut World, a: EntityId, b: EntityId) {
        self.log.lock().unwrap().push(format!("contact {a} {b}"));
    }
    fn input(&mut self, _: &mut World, client: ClientId, input: &XrInput) {
        self.log.lock().unwrap().push(format!("input {client} {}", input.hands[1].grip));
    }
}

#[test]
fn hooks_hear_joins_grabs_releases_inputs_contacts_and_leaves() {
    // Goal: a Rust game wrapping the room hears each event once, with the right ids, and each
    // input after the room applied it. Method:
    // drive a SceneRoom directly (no network): a player joins, grabs ball-0 with its right
    // hand, drops it onto the floor, leaves.
    use rally_engine::Simulation;
    use rally_proto::Instant;
    let scene = sandbox();
    let mut world = World::new(scene.entities_max());
    let mut room = SceneRoom::new(&scene, &mut world).unwrap();
    world.set_grab_rule(Box::new(room.grab_rule()));
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    room.set_hooks(Box::new(Heard { log: log.clone() }));
    let dt = Duration::from_secs(1) / 120;
    for _ in 0..240 {
        room.step(&mut world, dt);
    }
    log.lock().unwrap().clear();
    room.joined(&mut world, 7);
    let avatar = room.avatar(7).unwrap();
    let ball = room.entity("ball-0").unwrap();
    let floor = room.entity("floor").unwrap();
    let over = position(&world, ball) + Vec3::new(0.0, 0.2, 0.0);
    let head = XrPose::from_transform(&world.get(avatar.head).unwrap().transform);
    let mut input = XrInput { head, ..XrInput::default() };
    input.hands[1].pose = XrPose::from_transform(&rally_engine::Transform::from_position(over));
    input.hands[1].grip = 255;
    input.hands[0].pose = input.hands[1].pose;
    input.hands[0].pose.position[0] += 1.0;
    // Grab, lift, let go, each followed by ticks as a room would run them.
    let tick = |room: &mut SceneRoom, world: &mut World, ticks: u32| {
        for _ in 0..ticks {
            world.propagate_grabs();
            room.step(world, dt);
        }
    };
    room.apply_input_at(&mut world, 7, &input, Instant::ZERO);
    tick(&mut room, &mut world, 2);
    input.hands[1].pose.position[1] += 1.0;
    room.apply_input_at(&mut world, 7, &input, Instant::ZERO + 2 * dt);
    tick(&mut room, &mut world, 2);
    input.hands[1].grip = 0;
    room.apply_input_at(&mut world, 7, &input, Instant::ZERO + 4 * dt);
    tick(&mut room, &mut world, 240);
    room.left(&mut world, 7);
    let log = log.lock().unwrap().clone();
    let (a, b) = (floor.min(ball), floor.max(ball));
    let expected = [
        "joined 7".to_string(),
        format!("grabbed 7 Right {ball}"),
        "input 7 255".to_string(),
        "input 7 255".to_string(),
        format!("released 7 Right {ball}"),
        "input 7 0".to_string(),
    ];
    assert_eq!(&log[..6], &expected, "{log:?}");
    // The thrown ball lands (it may brush the hand that let it go on its way).
    assert!(log[6..].contains(&format!("contact {a} {b}")), "{log:?}");
    assert_eq!(log.last().unwrap(), "left 7");
    assert!(room.avatar(7).is_none());
}

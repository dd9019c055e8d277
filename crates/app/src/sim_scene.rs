//! `rally sim`'s scene scenarios: the sandbox scene (`scenes/sandbox.toml`) with standard XR
//! players over a lossy link, checked end to end.
//!
//! A seed decides the players (two to eight), the link (loss up to 10%, jitter up to 3 ms,
//! reordering) and what each player reaches for. Every player reaches over a grabbable body
//! (two may pick the same one: the second takes it), grips, swings for a second, lets go; one
//! player sends garbage poses throughout. Then the link heals, the room settles and stops
//! ticking, and the checkers run:
//!
//! - every player got an avatar, and nothing is held once every grip is open;
//! - the room counted every garbage pose and no grab it did not refuse was lost (grabs minus
//!   releases is what is still held: nothing);
//! - every client's snapshot equals the room's, entity for entity, bit for bit after
//!   quantization.

use glam::Vec3;
use rally_engine::{EntityId, Transform};
use rally_netem::{LinkConfig, LossModel};
use rally_scene::{scene_room, Grab, Scene, XrHand, XrInput, XrPose};
use rally_sim::RoomNet;
use std::time::Duration;

/// The sandbox scene, built into the binary so that `rally sim` runs from anywhere.
const SANDBOX: &str = include_str!("../../../scenes/sandbox.toml");
/// A client's frame: 90 Hz.
const FRAME: Duration = Duration::from_nanos(1_000_000_000 / 90);

/// What one scene seed did and found.
#[derive(Debug, Clone, Default)]
pub struct SceneOutcome {
    /// Players.
    pub players: usize,
    /// Loss on each link, percent.
    pub loss_percent: u32,
    /// Grabs the room made (handoffs included).
    pub grabs: u64,
    /// Garbage poses the room refused and counted.
    pub bad_poses: u64,
    /// The first broken invariant, if any.
    pub failure: Option<String>,
}

/// A small seeded generator (splitmix64): the scenario needs a few numbers, not a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs the scene scenario of `seed`.
pub fn run(seed: u64) -> SceneOutcome {
    let mut outcome = SceneOutcome::default();
    if let Err(failure) = play(seed, &mut outcome) {
        outcome.failure = Some(failure);
    }
    outcome
}

fn play(seed: u64, outcome: &mut SceneOutcome) -> Result<(), String> {
    let mut rng = Rng(seed ^ 0x5CE1_E000);
    let scene = Scene::parse("scenes/sandbox.toml", SANDBOX).map_err(|e| e.to_string())?;
    let room = scene_room(&scene, seed).map_err(|e| e.to_string())?;
    let players = 2 + rng.below(7) as usize;
    let loss = rng.below(11) as u32;
    (outcome.players, outcome.loss_percent) = (players, loss);
    let link = LinkConfig {
        delay: Duration::from_millis(5 + rng.below(20)),
        jitter: Duration::from_micros(rng.below(3000)),
        reorder: true,
        loss: LossModel::Bernoulli { probability: f64::from(loss) / 100.0 },
        ..LinkConfig::default()
    };
    let mut net = RoomNet::new(room, players, link, seed);
    for i in 0..players {
        net.connect(i);
    }
    net.run_for(Duration::from_secs(1));
    let game = net.room.simulation();
    let mut avatars = Vec::new();
    for session in &net.sessions {
        let client = session.client_id().ok_or("a player did not join")?;
        avatars.push(game.avatar(client).ok_or("a player has no avatar")?);
    }
    let grabbable: Vec<EntityId> = game.bodies().filter(|id| game.grab(*id) != Grab::No).collect();
    let world = net.room.world();
    let pose = |id: EntityId| world.get(id).map(|e| e.transform).ok_or("an entity is missing");
    let mut heads = Vec::new();
    let mut reach = Vec::new();
    for avatar in &avatars {
        heads.push(XrPose::from_transform(&pose(avatar.head)?));
        let target = grabbable[rng.below(grabbable.len() as u64) as usize];
        reach.push(pose(target)?.position + Vec3::new(0.0, 0.12, 0.0));
    }
    let hand = |at: Vec3, grip: bool| XrHand {
        pose: XrPose::from_transform(&Transform::from_position(at)),
        grip: if grip { 255 } else { 0 },
        trigger: 0,
    };
    let garbage = [f32::NAN, f32::INFINITY, -1e20, 5e4];
    let mut sent_garbage = 0u64;
    let frames: usize = 150;
    for k in 0..frames {
        for i in 0..players {
            // Reach, grip from the 10th frame, lift and swing from the 15th, open the hand 20
            // frames before the end.
            let t = k.saturating_sub(15) as f32 * FRAME.as_secs_f32();
            let swing = if k < 15 {
                Vec3::ZERO
            } else {
                Vec3::new(0.3 * (3.0 * t).sin(), (2.0 * t).min(0.5), 0.3 * (3.0 * t).cos() - 0.3)
            };
            let grip = (10..frames - 20).contains(&k);
            let mut input = XrInput {
                head: heads[i],
                hands: [hand(reach[i] + swing, grip), hand(reach[i] + swing, false)],
                ..XrInput::default()
            };
            if i == players - 1 {
                // The last player's head is garbage on every other frame.
                if k % 2 == 0 {
                    let g = garbage[(k / 2) % garbage.len()];
                    input.head.position = [g, 1.0, g];
                    sent_garbage += 1;
                }
            }
            net.input(i, input);
        }
        net.run_for(FRAME);
    }
    // Heal, settle, stop the ticks, and let what is in flight land.
    net.net.set_links(LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() });
    net.run_for(Duration::from_secs(3));
    let far = net.net.now + Duration::from_secs(3600);
    net.set_tick_schedule(far, Duration::from_secs(3600));
    net.run_for(Duration::from_millis(200));

    let stats = net.room.simulation().stats();
    (outcome.grabs, outcome.bad_poses) = (stats.grabs, stats.bad_poses);
    if stats.avatars_spawned != players as u64 {
        return Err(format!("{} avatars for {players} players", stats.avatars_spawned));
    }
    if stats.bad_poses != sent_garbage {
        return Err(format!("{} bad poses counted, {sent_garbage} sent", stats.bad_poses));
    }
    let held: Vec<EntityId> =
        grabbable.iter().copied().filter(|id| net.room.world().grabber_of(*id).is_some()).collect();
    if !held.is_empty() {
        return Err(format!("bodies {held:?} are still held with every hand open"));
    }
    if stats.grabs == 0 {
        return Err("no player grabbed anything".into());
    }
    let server = net.room.snapshot().entities();
    for (i, session) in net.sessions.iter().enumerate() {
        let Some(snapshot) = session.snapshot() else {
            return Err(format!("client {i} has no snapshot"));
        };
        if snapshot.entities() != server {
            return Err(format!("client {i}'s snapshot differs from the room's"));
        }
    }
    Ok(())
}

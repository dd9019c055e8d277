//! W2 in a scene room: the sandbox scene (`scenes/sandbox.toml`), whose standard XR player
//! grips a block and swings it in a circle. The player's session meters each input as for the
//! paddles; with the fast pipeline, the input's fast message carries the head, both hands and
//! the held block.

use super::{unit, Judged, Setup, DRIFT_PPM};
use glam::Vec3;
use rally_engine::{LatencyModel, Room, Transform, World};
use rally_netem::LinkConfig;
use rally_proto::Instant;
use rally_scene::{Scene, SceneRoom, XrHand, XrInput, XrPose};
use rally_sim::RoomNet;
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use std::error::Error;
use std::time::Duration;

/// The scene measured, from the repository's root (the benchmarks run from it).
pub(super) const SCENE: &str = "scenes/sandbox.toml";

/// The sandbox scene, read from [`SCENE`] under the workspace.
fn sandbox() -> Result<Scene, Box<dyn Error>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(SCENE);
    Ok(Scene::load(path)?)
}

/// The right hand's input at `pose`, gripping or not.
fn input(head: XrPose, left: Vec3, right: Vec3, grip: bool) -> XrInput {
    let hand = |at: Vec3, grip: u8| XrHand {
        pose: XrPose::from_transform(&Transform::from_position(at)),
        grip,
        trigger: 0,
    };
    XrInput {
        head,
        hands: [hand(left, 0), hand(right, if grip { 255 } else { 0 })],
        ..XrInput::default()
    }
}

/// One player (and a second one watching, so the fast message has somewhere to go) in the
/// sandbox for `seconds` after a warm-up in which the player's right hand takes hold of a
/// block; returns the player's samples, each with the model of the round trip it saw.
pub(super) fn measure(
    setup: &Setup,
    seconds: u64,
    seed: u64,
) -> Result<Vec<Judged>, Box<dyn Error>> {
    let Setup { pipeline, hz, rtt_ms, jitter_ms, .. } = *setup;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let scene = sandbox()?;
    let mut config = scene.room_config();
    config.tick_rate = hz;
    config.pipeline = pipeline;
    // The room needs a game before it has a world: a throwaway one holds the place.
    let placeholder = SceneRoom::new(&scene, &mut World::new(scene.entities_max()))?;
    let mut room = Room::new(config, placeholder, seed)?;
    let game = SceneRoom::new(&scene, room.world_mut())?;
    room.world_mut().set_grab_rule(Box::new(game.grab_rule()));
    *room.simulation_mut() = game;
    let one_way = Duration::from_secs_f64(rtt_ms / 2000.0);
    let jitter = Duration::from_secs_f64(jitter_ms / 1000.0);
    let link = LinkConfig { delay: one_way, jitter, reorder: false, ..LinkConfig::default() };
    let mut net = RoomNet::new(room, 2, link, seed);
    let nominal = 1.0 / f64::from(hz);
    let mut drifted = || nominal * (1.0 + (unit(&mut rng) * 2.0 - 1.0) * DRIFT_PPM * 1e-6);
    let (server_dt, player_dt) = (drifted(), drifted());
    let server_phase = Duration::from_secs_f64(unit(&mut rng) * nominal);
    let player_phase = unit(&mut rng) * nominal;
    net.set_tick_schedule(Instant::ZERO + server_phase, Duration::from_secs_f64(server_dt));
    net.connect(0);
    net.connect(1);
    net.run_for(Duration::from_secs(1));
    let player = net.sessions[0].client_id().ok_or("the player did not join")?;
    let avatar = net.room.simulation().avatar(player).ok_or("the player has no avatar")?;
    let block = net.room.simulation().entity("block-0").ok_or("no block-0 in the sandbox")?;
    let world = net.room.world();
    let pose = |id| world.get(id).map(|e| e.transform).ok_or("an avatar entity is missing");
    let head = XrPose::from_transform(&pose(avatar.head)?);
    let left = pose(avatar.left)?.position;
    // Over the block, in reach: the swing's centre.
    let centre = world.get(block).ok_or("no block")?.transform.position + Vec3::new(0.0, 0.16, 0.0);
    let start = net.net.now.as_secs_f64();
    let warmup = start + 0.5;
    let end = warmup + seconds as f64;
    let mut k = 0u64;
    loop {
        let at = start + player_phase + k as f64 * player_dt;
        if at >= end {
            break;
        }
        let t = Instant::ZERO + Duration::from_secs_f64(at);
        net.run_until(t);
        net.sessions[0].present(t);
        if at < warmup {
            net.sessions[0].latency_mut().take_samples();
        }
        // Grip from the second frame on, then lift the block and swing it round.
        let angle = ((at - start) * 4.0) as f32;
        let lift = Vec3::new(0.2 * angle.cos() - 0.2, 0.3, 0.2 * angle.sin());
        let right = if k < 2 { centre } else { centre + lift };
        net.input(0, input(head, left, right, k >= 1));
        k += 1;
    }
    if net.room.world().grabber_of(block) != Some(avatar.right) {
        return Err("the player's hand does not hold the block".into());
    }
    let nominal = Duration::from_secs_f64(rtt_ms / 1000.0);
    let (frame, tick) = (Duration::from_secs_f64(player_dt), Duration::from_secs_f64(server_dt));
    Ok(net.sessions[0]
        .latency_mut()
        .take_samples()
        .into_iter()
        .map(|s| (s, LatencyModel::new(s.round_trip.unwrap_or(nominal), frame, tick)))
        .collect())
}

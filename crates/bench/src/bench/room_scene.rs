//! The scene cases of `rally-bench room` (rally-scene, the scene issue's targets): the example
//! sandbox with 64 bodies in motion, timed beside the W3 reference room; and 256 dynamic
//! bodies, settled, against the per-client byte budget. The scenes are generated here from
//! `scenes/sandbox.toml` (embedded at build time) so that the bench needs no file beside it.

use super::room::{measure, print, report, Bench, Report};
use rally_scene::{scene_room, Scene, SceneRoom, XrHand, XrInput, XrPose};
use serde::Serialize;
use std::error::Error;
use std::fmt::Write as _;

/// The example sandbox, as shipped.
const SANDBOX: &str = include_str!("../../../../scenes/sandbox.toml");
/// Players in both cases, as in the reference room.
const PLAYERS: usize = 10;
/// Bodies kept in motion in the sandbox case.
const BOUNCING: usize = 64;
/// Bodies in the settled case.
const SETTLED: usize = 256;
/// The settled case's byte budget per client per tick (the sandbox's, the engine's default).
const BUDGET_BYTES: u32 = 1100;

/// The sandbox with a pad of restitution 1 and 64 balls of restitution 1 over it, from heights
/// 1 to 1.7 m. Rapier averages two restitutions, so the balls bounce back as high as they fell
/// and keep moving (and touching the pad) for the whole run: 64 moving bodies whatever the
/// players do (their avatars, 3 entities each, move too).
fn sandbox_64_text() -> String {
    let mut text = SANDBOX.to_string();
    text.push_str(
        "\n# rally-bench room: a bouncy pad and 64 balls over it.\n[[colliders]]\n\
         name = \"bench-pad\"\nbox = [8.0, 0.1, 8.0]\nposition = [0.0, 0.05, 5.5]\n\
         restitution = 1.0\n",
    );
    for k in 0..BOUNCING {
        let (i, j) = (k % 8, k / 8);
        let (x, z, y) = (-3.5 + i as f32, 2.0 + j as f32, 1.0 + 0.1 * ((i + j) % 8) as f32);
        let _ = write!(
            text,
            "\n[[bodies]]\nname = \"bench-ball-{k}\"\nclass = \"ball\"\nsphere = 0.1\n\
             mass_kg = 0.4\nposition = [{x}, {y}, {z}]\nrestitution = 1.0\ngrabbable = true\n\
             respawn = {{ below_y = -5 }}\n"
        );
    }
    text
}

/// 256 boxes resting on a floor in a 16 by 16 grid, 10 players, the budget above.
fn settled_256_text() -> String {
    let mut text = format!(
        "[room]\ntick_rate = 120\npipeline = \"fast\"\nplayers_max = {PLAYERS}\n\
         client_bytes_per_tick_max = {BUDGET_BYTES}\n\n[[colliders]]\nname = \"floor\"\n\
         plane = [0, 1, 0]\n"
    );
    for k in 0..SETTLED {
        let (i, j) = (k % 16, k / 16);
        let (x, z) = (-4.0 + 0.5 * i as f32, -4.0 + 0.5 * j as f32);
        let _ = write!(
            text,
            "\n[[bodies]]\nclass = \"block\"\nbox = [0.2, 0.2, 0.2]\nmass_kg = 0.8\n\
             position = [{x}, 0.11, {z}]\ngrabbable = true\n"
        );
    }
    text
}

/// Player `i` at `t` seconds: standing on a ring, looking around, hands circling, the right
/// grip pressed half of each second (the room moves each player's avatar, head and hands, to
/// these poses, and a grip grabs whatever grabbable body is within reach then).
fn xr_input(i: usize, t: f64) -> XrInput {
    let angle = i as f32 * std::f32::consts::TAU / PLAYERS as f32;
    let (s, c) = angle.sin_cos();
    let phase = (t as f32) * 2.0 + angle;
    let pose = |x: f32, y: f32, z: f32| XrPose {
        position: [x, y, z],
        rotation: glam::Quat::from_rotation_y(phase).to_array(),
    };
    let hand = |side: f32, grip: u8| XrHand {
        pose: pose(3.0 * s + 0.3 * side + 0.2 * phase.cos(), 1.1, 3.0 * c + 0.2 * phase.sin()),
        grip,
        trigger: 0,
    };
    let grip = if (t + i as f64 * 0.1).fract() < 0.5 { 255 } else { 0 };
    XrInput {
        head: pose(3.0 * s, 1.6, 3.0 * c),
        hands: [hand(-1.0, 0), hand(1.0, grip)],
        game: Default::default(),
    }
}

/// A room of `scene` with its players joined and sending inputs.
fn bench(name: &str, text: &str) -> Result<(Scene, Bench<SceneRoom>), Box<dyn Error>> {
    let scene = Scene::parse(name, text)?;
    let room = scene_room(&scene, 1)?;
    Ok((scene.clone(), Bench::new(room, PLAYERS, xr_input)?))
}

/// The sandbox with 64 bodies in motion on `pipeline` ("fast", the sandbox's own, or
/// "greedy"), `seconds` of ticks measured after one of warm-up.
pub(super) fn sandbox_64(seconds: usize, pipeline: &str) -> Result<Report, Box<dyn Error>> {
    let text =
        sandbox_64_text().replacen("pipeline = \"fast\"", &format!("pipeline = \"{pipeline}\""), 1);
    let (scene, mut bench) = bench("sandbox-64", &text)?;
    let hz = scene.settings().tick_rate;
    let ticks = seconds * hz as usize;
    let samples = measure(&mut bench, ticks, hz as usize)?;
    let sizes = (PLAYERS, scene.bodies().len(), BOUNCING);
    Ok(report(&format!("sandbox-64 scene, {pipeline}"), hz, &samples, ticks, sizes))
}

/// The settled case's figures.
#[derive(Debug, Serialize)]
pub(super) struct Settled {
    /// The room's figures over the measured ticks (after the settling ones).
    room: Report,
    /// Ticks run before measuring, for the boxes to come to rest.
    settling_ticks: usize,
    /// The scene's byte budget per client per tick.
    budget_bytes: u32,
    /// The furthest any client's view of a body was from the room's, metres, at the end.
    view_error_max_m: f32,
    /// Bodies some client did not hold at the end.
    missing: usize,
}

/// 256 boxes dropped 1 cm onto a floor, given `seconds` to settle, then `seconds` measured.
pub(super) fn settled_256(seconds: usize) -> Result<Settled, Box<dyn Error>> {
    let (scene, mut bench) = bench("settled-256", &settled_256_text())?;
    let hz = scene.settings().tick_rate as usize;
    let (settling_ticks, ticks) = (seconds * hz, seconds * hz);
    let samples = measure(&mut bench, ticks, settling_ticks)?;
    let room = report("settled-256 scene", hz as u32, &samples, ticks, (PLAYERS, SETTLED, 0));
    let (mut view_error_max_m, mut missing) = (0.0f32, 0);
    let bodies: Vec<_> = bench.room.simulation().bodies().collect();
    for session in &bench.sessions {
        let view: std::collections::BTreeMap<u32, glam::Vec3> =
            session.entities().map(|e| (e.id, e.position)).collect();
        for id in &bodies {
            let at = bench.room.world().get(*id).map(|e| e.transform.position);
            match (view.get(id), at) {
                (Some(seen), Some(at)) => {
                    view_error_max_m = view_error_max_m.max(seen.distance(at))
                }
                _ => missing += 1,
            }
        }
    }
    Ok(Settled { room, settling_ticks, budget_bytes: BUDGET_BYTES, view_error_max_m, missing })
}

/// The settled case's table.
pub(super) fn print_settled(settled: &Settled) {
    print(&settled.room);
    let bytes = &settled.room.snapshot_bytes_per_client;
    let verdict = if bytes.max <= f64::from(settled.budget_bytes) { "within" } else { "OVER" };
    println!(
        "scene target: {SETTLED} dynamic bodies, settled after {} ticks: snapshot bytes per \
         client per tick mean {:.1}, p99 {:.0}, max {:.0}: {verdict} the budget of {} bytes; \
         every client's view of every body within {:.4} m of the room's ({} missing)",
        settled.settling_ticks,
        bytes.mean,
        bytes.p99,
        bytes.max,
        settled.budget_bytes,
        settled.view_error_max_m,
        settled.missing
    );
    println!();
}

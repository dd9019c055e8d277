//! The demo's players: each a real client session on its own UDP socket and thread, at the
//! room's frame rate, whose hand moves as a player's would: it waits at its end of the table
//! swaying a little, reaches for where the ball will cross its strike line, draws the paddle
//! back and swings through the ball. It sees the ball as the replicated state shows it, a
//! round trip late, as a player would.

use super::table::{lock, Roles, STRIKE_Z, TABLE_TOP};
use glam::{Quat, Vec3};
use rally_driver::UdpDriver;
use rally_engine::{ClientConfig, ClientSession, LatencySample};
use rally_proto::{ConnectToken, EndpointConfig, Instant};
use rally_sim::sandbox::HandInput;
use serde::Serialize;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How often a bot reports to the collector.
pub const REPORT_EVERY: Duration = Duration::from_millis(100);
/// How long before each frame a bot stops sleeping and polls.
pub const SPIN: Duration = Duration::from_micros(200);
/// How far from its paddle a player holds the paddle's handle (the grab offset), metres.
const GRIP: f32 = 0.1;
/// The fastest a hand moves, m/s.
const HAND_SPEED_MAX: f32 = 6.0;
/// How long before the ball reaches the strike line the forward swing starts, seconds.
const SWING_LEAD: f32 = 0.12;
/// How fast a swing moves the paddle through the ball, m/s (a gentle push, not a smash).
const SWING_SPEED: f32 = 1.5;
/// How far a swing opens the paddle's face, radians.
const SWING_TILT: f32 = 0.5;
/// The share of its vertical speed a ball keeps off the table, as a player expects it.
const BOUNCE: f32 = 0.8;

/// What a bot tells the collector every [`REPORT_EVERY`].
#[derive(Debug, Default)]
pub struct BotReport {
    /// Which bot.
    pub bot: usize,
    /// Its latency samples since its last report.
    pub samples: Vec<LatencySample>,
    /// Its connection's smoothed RTT.
    pub rtt: Duration,
    /// Its connection's loss rate, 0 to 1.
    pub loss: f64,
    /// Its client id in the room, once welcomed.
    pub client: Option<u32>,
    /// The replicated world as this bot sees it now (only bot 0 sends it).
    pub entities: Vec<EntityView>,
}

/// One entity as a client sees it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct EntityView {
    /// The entity's id.
    pub id: u32,
    /// Position, metres.
    pub position: [f32; 3],
    /// Turn about the vertical axis, radians.
    pub yaw: f32,
}

/// Where a player stands and how its hand moves.
#[derive(Debug, Clone)]
pub struct Player {
    /// -1 at the near end, +1 at the far end.
    side: f32,
    /// Its share of its end, as the x where it waits.
    lane: f32,
    /// The lanes of its side, its own included: the player nearest the ball takes it.
    lanes: Vec<f32>,
    /// Where its paddle is now.
    paddle: Vec3,
}

impl Player {
    /// Bot `bot` of `bots`: even bots at the near end, odd ones at the far end, a side's
    /// players spread across it.
    pub fn new(bot: usize, bots: usize) -> Self {
        let side = if bot % 2 == 0 { -1.0 } else { 1.0 };
        let per_side = bots.div_ceil(2).max(1);
        let lane_of = |k: usize| (k as f32 + 0.5) / per_side as f32 * 1.2 - 0.6;
        let lanes = (0..bots).filter(|b| b % 2 == bot % 2).map(|b| lane_of(b / 2)).collect();
        let lane = lane_of(bot / 2);
        let paddle = Vec3::new(lane, TABLE_TOP + 0.3, side * (STRIKE_Z + 0.1));
        Self { side, lane, lanes, paddle }
    }

    /// The hand pose for the frame at `t` seconds, `dt` after the last one, given where the
    /// ball is and how it moves (as replicated).
    pub fn frame(&mut self, t: f32, dt: f32, ball: Option<(Vec3, Vec3)>) -> HandInput {
        let (target, tilt, speed) = self.aim(t, ball);
        let step = target - self.paddle;
        self.paddle += step.clamp_length_max(speed * dt);
        // Facing the net; the paddle's face opens as it swings, to lift the ball over the net.
        let yaw = if self.side < 0.0 { std::f32::consts::PI } else { 0.0 };
        let rotation = Quat::from_rotation_y(yaw) * Quat::from_rotation_x(tilt);
        let hand = self.paddle - rotation * Vec3::new(0.0, 0.0, -GRIP);
        HandInput { position: hand.into(), rotation: rotation.into() }
    }

    /// Where the paddle should go now, how far its face opens, and how fast it may move.
    fn aim(&self, t: f32, ball: Option<(Vec3, Vec3)>) -> (Vec3, f32, f32) {
        let sway = Vec3::new((t * 1.7 + self.lane * 5.0).sin() * 0.05, (t * 2.3).sin() * 0.03, 0.0);
        let home = Vec3::new(self.lane, TABLE_TOP + 0.3, self.side * (STRIKE_Z + 0.1)) + sway;
        let wait = (home, 0.0, HAND_SPEED_MAX);
        let Some((at, velocity)) = ball else { return wait };
        let coming = velocity.z * self.side > 0.5 && at.z * self.side < STRIKE_Z + 0.2;
        if !coming {
            return wait;
        }
        let (meet, flight) = predict(at, velocity, self.side * STRIKE_Z);
        let nearest = self
            .lanes
            .iter()
            .copied()
            .min_by(|a, b| (a - meet.x).abs().total_cmp(&(b - meet.x).abs()));
        if nearest != Some(self.lane) {
            return wait;
        }
        let meet = meet.clamp(Vec3::new(-1.5, TABLE_TOP - 0.1, -3.0), Vec3::new(1.5, 2.0, 3.0));
        if flight > SWING_LEAD {
            // Reach, with the paddle drawn back behind the strike line.
            (Vec3::new(meet.x, meet.y - 0.05, self.side * (STRIKE_Z + 0.2)), 0.0, HAND_SPEED_MAX)
        } else {
            // Swing through the ball, forward and up, the face open to lift it over the net.
            let through = Vec3::new(meet.x, meet.y + 0.3, self.side * (STRIKE_Z - 0.3));
            (through, SWING_TILT, SWING_SPEED)
        }
    }
}

/// Where a ball at `at` moving at `velocity` crosses `z`, and how soon (seconds, at most 1.5):
/// its flight under gravity, bouncing off the table's top as a player judges it.
fn predict(at: Vec3, velocity: Vec3, z: f32) -> (Vec3, f32) {
    const STEP: f32 = 0.005;
    let (mut p, mut v, mut t) = (at, velocity, 0.0);
    while t < 1.5 && (z - p.z) * v.z.signum() > 0.0 {
        v.y -= 9.81 * STEP;
        p += v * STEP;
        let over_table =
            p.x.abs() < super::table::TABLE_HALF[0] && p.z.abs() < super::table::TABLE_HALF[1];
        if over_table && p.y < TABLE_TOP + 0.02 && v.y < 0.0 {
            v.y = -v.y * BOUNCE;
        }
        t += STEP;
    }
    (p, t)
}

/// A bot's thread: joins with `token`, then plays a frame every `1 / hz` until `stop`.
#[allow(clippy::too_many_arguments)] // one thread's whole setup, passed once
pub fn play(
    bot: usize,
    bots: usize,
    token: ConnectToken,
    config: EndpointConfig,
    hz: u32,
    roles: Arc<Mutex<Roles>>,
    stop: Arc<AtomicBool>,
    reports: mpsc::Sender<BotReport>,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut player = Player::new(bot, bots);
    let session: ClientSession<HandInput, ()> = ClientSession::new(ClientConfig::default())?;
    run_frames(bot, token, config, hz, session, stop, reports, |session, now, frame| {
        let ball = lock(&roles).ball.and_then(|id| {
            session.entities().find(|e| e.id == id).map(|e| (e.position, e.linear_velocity))
        });
        player.frame(now.as_secs_f64() as f32, frame.as_secs_f32(), ball)
    })
}

/// Any bot's thread after its setup: joins with `token`, then every `1 / hz` until `stop`
/// takes in what arrived, presents, sends the input `input` makes of the session's state (at
/// once: the input is sampled now), and sends a report every [`REPORT_EVERY`].
#[allow(clippy::too_many_arguments)] // one thread's whole setup, passed once
pub fn run_frames<I: Serialize, M: Serialize + serde::de::DeserializeOwned>(
    bot: usize,
    token: ConnectToken,
    config: EndpointConfig,
    hz: u32,
    mut session: ClientSession<I, M>,
    stop: Arc<AtomicBool>,
    reports: mpsc::Sender<BotReport>,
    mut input: impl FnMut(&ClientSession<I, M>, Instant, Duration) -> I,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut driver = UdpDriver::bind("127.0.0.1:0", config)?;
    // Frames start on time: sleep, then poll the last stretch (short: four bots and the
    // host share this machine's cores, and a spinning bot takes a core from the host).
    driver.set_spin(SPIN);
    driver.connect_with_token(token)?;
    let clock = driver.clock();
    let frame = Duration::from_secs(1) / hz;
    let mut next_frame = driver.now();
    let mut last_report = driver.now();
    while !stop.load(Ordering::Relaxed) {
        let wait = next_frame.saturating_duration_since(driver.now());
        driver.run_for(wait, |_, connection, event| {
            session.handle_event(clock.now(), connection, event);
        })?;
        let now = driver.now();
        session.present(now);
        let sample = input(&session, now, frame);
        session.send_input(now, sample);
        session.transmit(driver.endpoint());
        next_frame += frame;
        if now - last_report >= REPORT_EVERY {
            last_report = now;
            let _ = reports.send(report(bot, &mut session, &mut driver));
        }
    }
    Ok(())
}

/// What the bot measured since its last report (any game's bot: the table's or a scene's).
pub fn report<I: Serialize, M: Serialize + serde::de::DeserializeOwned>(
    bot: usize,
    session: &mut ClientSession<I, M>,
    driver: &mut UdpDriver,
) -> BotReport {
    let stats = session.connection_stats(driver.endpoint());
    let entities = if bot == 0 {
        session
            .entities()
            .map(|e| {
                let (axis, angle) = e.rotation.to_axis_angle();
                EntityView { id: e.id, position: e.position.into(), yaw: axis.y.signum() * angle }
            })
            .collect()
    } else {
        Vec::new()
    };
    BotReport {
        bot,
        samples: session.latency_mut().take_samples(),
        rtt: stats.as_ref().map(|s| s.rtt).unwrap_or_default(),
        loss: stats.as_ref().map_or(0.0, |s| s.loss),
        client: session.client_id(),
        entities,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ball served to the far end, as the room serves it.
    fn incoming(z: f32) -> (Vec3, Vec3) {
        (Vec3::new(0.2, TABLE_TOP + 0.2, z), Vec3::new(0.0, 1.0, 3.6))
    }

    #[test]
    fn a_player_reaches_for_the_ball_then_swings_through_it() {
        let mut far = Player::new(1, 2);
        let dt = 1.0 / 120.0;
        // Ball far away: the paddle goes to meet its line, drawn back.
        for k in 0..60 {
            far.frame(k as f32 * dt, dt, Some(incoming(-0.5)));
        }
        assert!((far.paddle.x - 0.2).abs() < 0.01, "reached to x {}", far.paddle.x);
        assert!(far.paddle.z > STRIKE_Z + 0.15, "drawn back: z {}", far.paddle.z);
        // Ball about to arrive: the paddle moves towards the net, through the strike line.
        let before = far.paddle;
        for k in 0..12 {
            far.frame(k as f32 * dt, dt, Some(incoming(STRIKE_Z - 0.2)));
        }
        let swing = far.paddle - before;
        assert!(swing.z < -0.08 && swing.y > 0.04, "swung forward and up: {swing}");
    }

    #[test]
    fn the_hand_moves_no_faster_than_a_hand() {
        let mut near = Player::new(0, 4);
        let dt = 1.0 / 120.0;
        let mut last = near.paddle;
        for k in 0..240 {
            // The ball jumps about: the hand must still move smoothly.
            let z = if k % 20 < 10 { 0.0 } else { -1.0 };
            let ball = (Vec3::new(k as f32 % 3.0 - 1.0, 1.0, z), Vec3::new(0.0, 0.0, -4.0));
            near.frame(k as f32 * dt, dt, Some(ball));
            assert!((near.paddle - last).length() <= HAND_SPEED_MAX * dt + 1e-4);
            last = near.paddle;
        }
    }

    #[test]
    fn only_the_partner_nearest_the_ball_takes_it() {
        let (mut left, mut right) = (Player::new(0, 4), Player::new(2, 4));
        let ball = Some((Vec3::new(-0.5, 1.0, 0.5), Vec3::new(0.0, 0.0, -3.0)));
        let dt = 1.0 / 120.0;
        for k in 0..60 {
            left.frame(k as f32 * dt, dt, ball);
            right.frame(k as f32 * dt, dt, ball);
        }
        assert!((left.paddle.x + 0.5).abs() < 0.01, "left reached: {}", left.paddle.x);
        assert!((right.paddle.x - right.lane).abs() < 0.1, "right stayed: {}", right.paddle.x);
    }

    #[test]
    fn the_paddle_sits_a_grip_ahead_of_the_hand_on_either_side() {
        for bot in [0, 1] {
            let mut player = Player::new(bot, 2);
            let hand = player.frame(0.0, 1.0 / 120.0, None);
            let (at, turn) = (Vec3::from(hand.position), Quat::from_array(hand.rotation));
            // The room puts the paddle at the grab offset in the hand's frame.
            let paddle = at + turn * Vec3::new(0.0, 0.0, -GRIP);
            assert!((paddle - player.paddle).length() < 1e-5);
            // ... which is towards the net from the hand.
            assert!(paddle.z.abs() < at.z.abs(), "bot {bot}: paddle {paddle} hand {at}");
        }
    }
}

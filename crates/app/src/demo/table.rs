//! The demo's game: table tennis in a rapier3d world. Each player's controller holds a paddle
//! through the grab graph ([`Paddles`]); the room serves the ball from alternate ends whenever
//! it is out of play, and counts serves and paddle hits.
//!
//! The table's long axis is z: the end at negative z is the near end, the other the far end.
//! [`Roles`] tells the dashboard and the bots which entity is which, as a game would tell its
//! clients in a spawn message.

use crate::game::Paddles;
use glam::{Quat, Vec3};
use rally_driver::host::Game;
use rally_engine::{ClientId, Entity, EntityId, Room, RoomConfig, Simulation, Transform, World};
use rally_physics::Body;
use rally_sim::sandbox::HandInput;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Half the table's width (x) and length (z), metres (a regulation table is 1.525 x 2.74).
pub const TABLE_HALF: [f32; 2] = [0.76, 1.37];
/// Height of the table's top, metres.
pub const TABLE_TOP: f32 = 0.72;
/// Where a player's paddle meets the ball, as a distance from the net along z.
pub const STRIKE_Z: f32 = 1.5;

/// Ticks the ball must be out of play before the next serve (0.6 s at 120 Hz).
const SERVE_PAUSE_TICKS: u32 = 72;
/// A rally longer than this is ended and served again (10 s at 120 Hz).
const RALLY_TICKS_MAX: u32 = 1200;

/// Which entity plays which part, for drawing and for the bots.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Roles {
    /// The table.
    pub table: Option<EntityId>,
    /// The net.
    pub net: Option<EntityId>,
    /// The ball.
    pub ball: Option<EntityId>,
    /// Each client's controller (its hand) and the paddle it holds.
    pub players: BTreeMap<ClientId, (EntityId, EntityId)>,
    /// Serves so far.
    pub serves: u64,
    /// Times a paddle sent the ball back towards the net.
    pub hits: u64,
    /// The end that served last: -1 near, +1 far.
    pub serving: i8,
}

/// The demo's rooms: table tennis, one table per room.
#[derive(Debug, Clone)]
pub struct TableTennis {
    config: RoomConfig,
    roles: Arc<Mutex<Roles>>,
}

impl TableTennis {
    /// A game whose rooms tick with `config`; `roles` is filled in as the room plays.
    pub fn new(config: RoomConfig, roles: Arc<Mutex<Roles>>) -> Self {
        Self { config, roles }
    }
}

impl Game for TableTennis {
    type Simulation = Table;

    fn open(&self, room_id: u64) -> Room<Table> {
        let mut table =
            Table { paddles: Paddles::new(1), play: Play::default(), roles: self.roles.clone() };
        let room = Room::new(self.config.clone(), Table::default(), room_id + 1);
        let mut room = room.expect("the demo's room config is valid");
        if let Err(e) = table.set(room.world_mut()) {
            // An empty room still ticks; the dashboard shows no table and says nothing worse.
            eprintln!("demo: the table could not be set: {e}");
        }
        *room.simulation_mut() = table;
        room
    }
}

/// A room's simulation: the paddles' physics, then the referee.
#[derive(Default)]
pub struct Table {
    paddles: Paddles,
    play: Play,
    roles: Arc<Mutex<Roles>>,
}

/// What the referee keeps between ticks: the rally's clock and the ball's last heading.
#[derive(Debug, Default)]
struct Play {
    dead_ticks: u32,
    rally_ticks: u32,
    heading: f32,
}

impl Simulation for Table {
    type Input = HandInput;
    type Message = ();

    fn apply_input(&mut self, world: &mut World, client: ClientId, input: &HandInput) {
        self.paddles.apply_input(world, client, input);
    }

    fn step(&mut self, world: &mut World, dt: Duration) {
        self.paddles.step(world, dt);
        self.referee(world);
    }

    fn driven(&self, client: ClientId) -> Option<EntityId> {
        self.paddles.driven(client)
    }

    fn joined(&mut self, world: &mut World, client: ClientId) {
        self.paddles.joined(world, client);
        let Some(&hand) = self.paddles.controllers.get(&client) else { return };
        if let Some(&paddle) = world.chain_of(hand).last() {
            lock(&self.roles).players.insert(client, (hand, paddle));
        }
    }

    fn left(&mut self, world: &mut World, client: ClientId) {
        self.paddles.left(world, client);
        lock(&self.roles).players.remove(&client);
    }
}

impl Table {
    /// The table, its net and a ball resting on it, waiting for the first serve.
    fn set(&mut self, world: &mut World) -> Result<(), Box<dyn std::error::Error>> {
        let [hx, hz] = TABLE_HALF;
        let top = Vec3::new(0.0, TABLE_TOP - 0.02, 0.0);
        let table = self.fixed(world, top, [hx, 0.02, hz])?;
        let net =
            self.fixed(world, Vec3::new(0.0, TABLE_TOP + 0.076, 0.0), [hx + 0.15, 0.076, 0.005])?;
        let at = Transform::from_position(Vec3::new(0.0, TABLE_TOP + 0.02, -0.5));
        let ball = world.spawn(Entity { priority: 8.0, ..Entity::at(at) })?;
        self.paddles.physics.add(world, ball, ball_body())?;
        self.paddles.ball = Some(ball);
        let mut roles = lock(&self.roles);
        *roles = Roles {
            table: Some(table),
            net: Some(net),
            ball: Some(ball),
            serving: 1,
            ..Roles::default()
        };
        Ok(())
    }

    fn fixed(
        &mut self,
        world: &mut World,
        at: Vec3,
        half: [f32; 3],
    ) -> Result<EntityId, Box<dyn std::error::Error>> {
        let id = world.spawn(Entity::at(Transform { position: at, rotation: Quat::IDENTITY }))?;
        self.paddles.physics.add(world, id, Body::fixed_cuboid(Vec3::from_array(half)))?;
        Ok(id)
    }

    /// Counts hits, and serves again once the ball has been out of play for a moment.
    fn referee(&mut self, world: &mut World) {
        let Some(ball) = self.paddles.ball else { return };
        let Some(state) = world.get(ball) else { return };
        let (position, velocity) = (state.transform.position, state.linear_velocity);
        let mut roles = lock(&self.roles);
        let play = &mut self.play;
        // The ball turned back towards the net near an end: a paddle hit it.
        let heading = velocity.z.signum();
        let near_end = position.z.abs() > STRIKE_Z - 0.4;
        if near_end && heading != play.heading && heading == -position.z.signum() {
            roles.hits += 1;
        }
        play.heading = heading;
        play.rally_ticks += 1;
        // Out of play: fallen, flown off, resting (before the first serve), or too long.
        let out = position.y < TABLE_TOP - 0.3
            || velocity.length() < 0.05
            || position.z.abs() > 3.0
            || position.x.abs() > 2.0
            || play.rally_ticks > RALLY_TICKS_MAX;
        play.dead_ticks = if out { play.dead_ticks + 1 } else { 0 };
        if play.dead_ticks < SERVE_PAUSE_TICKS {
            return;
        }
        let end = if roles.serving < 0 { 1.0 } else { -1.0 };
        // A little sideways spread from serve to serve, so that both players of a side play.
        let spread = [-0.25f32, 0.1, 0.3, -0.1][(roles.serves % 4) as usize];
        let at = Vec3::new(spread, TABLE_TOP + 0.33, end * (TABLE_HALF[1] - 0.07));
        // Clears the net, bounces once on the far half, rises to paddle height at the far end.
        let launch = Vec3::new(-spread * 0.35, 1.4, -end * 3.6);
        if serve(&mut self.paddles, world, ball, at, launch).is_ok() {
            roles.serving = end as i8;
            roles.serves += 1;
            *play = Play { heading: launch.z.signum(), ..Play::default() };
        }
    }
}

/// Puts the ball at `at` moving at `velocity`: rapier's body is made anew, as
/// [`rally_physics::Physics::add`] takes the world's pose and velocity.
fn serve(
    paddles: &mut Paddles,
    world: &mut World,
    ball: EntityId,
    at: Vec3,
    velocity: Vec3,
) -> Result<(), Box<dyn std::error::Error>> {
    paddles.physics.remove(ball);
    let entity = world.get_mut(ball).ok_or("the ball is gone")?;
    entity.transform = Transform::from_position(at);
    entity.linear_velocity = velocity;
    entity.angular_velocity = Vec3::ZERO;
    paddles.physics.add(world, ball, ball_body())?;
    Ok(())
}

/// A ping-pong ball: light, bouncy, and slick enough that a bounce keeps most of its speed.
fn ball_body() -> Body {
    Body { friction: 0.05, ..Body::dynamic_ball(0.02) }
}

/// Locks the roles; a thread that panicked holding them left them whole (plain data).
pub fn lock(roles: &Mutex<Roles>) -> std::sync::MutexGuard<'_, Roles> {
    roles.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::bots::Player;

    /// Plays `seconds` of the table with `bots` players who see the ball as it is (no
    /// network), tick by tick as a room runs its phases; returns the roles at the end.
    fn rally(bots: usize, seconds: f32) -> Roles {
        let roles = Arc::new(Mutex::new(Roles::default()));
        let mut table = Table { roles: roles.clone(), ..Table::default() };
        let mut world = World::new(64);
        table.set(&mut world).expect("the table fits");
        let mut players: Vec<Player> = (0..bots).map(|b| Player::new(b, bots)).collect();
        for client in 0..bots as ClientId {
            table.joined(&mut world, client);
        }
        let dt = 1.0 / 120.0;
        for tick in 0..(seconds / dt) as u32 {
            let ball = world.get(table.paddles.ball.expect("a ball")).expect("the ball");
            let seen = (ball.transform.position, ball.linear_velocity);
            for (client, player) in players.iter_mut().enumerate() {
                let input = player.frame(tick as f32 * dt, dt, Some(seen));
                table.apply_input(&mut world, client as ClientId, &input);
            }
            world.propagate_grabs();
            table.step(&mut world, Duration::from_secs_f32(dt));
        }
        let roles = lock(&roles).clone();
        roles
    }

    #[test]
    fn the_room_serves_and_the_players_hit_the_ball_back() {
        let roles = rally(2, 30.0);
        eprintln!("{} serves, {} hits", roles.serves, roles.hits);
        assert!(roles.serves >= 5, "serves: {}", roles.serves);
        assert!(roles.hits >= roles.serves / 2, "hits {} of {} serves", roles.hits, roles.serves);
        assert_eq!(roles.players.len(), 2);
    }
}

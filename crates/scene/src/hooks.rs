//! Hooks for a Rust game that wraps a scene room: callbacks on the standard XR player's joins,
//! leaves, grabs and releases, on contacts between bodies, and on each input and tick, with the
//! world to change. Every method does nothing unless the game overrides it.

use crate::input::{Hand, XrInput};
use crate::player::Avatar;
use rally_engine::{ClientId, EntityId, World};
use std::time::Duration;

/// What a Rust game hears from a [`SceneRoom`](crate::SceneRoom): give one to
/// [`SceneRoom::set_hooks`](crate::SceneRoom::set_hooks). Each method runs inside the room's
/// call that caused it (an input's arrival, a tick), so it must be quick and must not panic on
/// what a client sent.
///
/// ```
/// use rally_engine::{ClientId, EntityId, World};
/// use rally_scene::{Hand, SceneHooks};
///
/// /// Counts the grabs of each player.
/// #[derive(Default)]
/// struct Score(std::collections::BTreeMap<ClientId, u32>);
///
/// impl SceneHooks for Score {
///     fn grabbed(&mut self, _world: &mut World, client: ClientId, _hand: Hand, _id: EntityId) {
///         *self.0.entry(client).or_default() += 1;
///     }
/// }
/// ```
pub trait SceneHooks: Send {
    /// `client` joined and its avatar was spawned (not called when the room had no room for
    /// it).
    fn joined(&mut self, _world: &mut World, _client: ClientId, _avatar: Avatar) {}

    /// `client` left for good; its hands have let go and its avatar is gone.
    fn left(&mut self, _world: &mut World, _client: ClientId, _avatar: Avatar) {}

    /// `client`'s `hand` took hold of `entity` (from the scene or from another hand).
    fn grabbed(&mut self, _world: &mut World, _client: ClientId, _hand: Hand, _entity: EntityId) {}

    /// `client`'s `hand` let go of `entity` (a grip released, or the player left).
    fn released(&mut self, _world: &mut World, _client: ClientId, _hand: Hand, _entity: EntityId) {}

    /// Two entities' bodies started touching in the last physics step (a ball hit a block, a
    /// hand pushed a cup); each pair once per touch, the lower id first.
    fn contact(&mut self, _world: &mut World, _a: EntityId, _b: EntityId) {}

    /// `client`'s input, after the room moved its avatar and acted on its grips: the place for
    /// the game's own bytes ([`XrInput::game`]).
    fn input(&mut self, _world: &mut World, _client: ClientId, _input: &XrInput) {}

    /// After each tick's physics step and respawns.
    fn step(&mut self, _world: &mut World, _dt: Duration) {}
}

/// The hooks of a room nobody wraps.
#[derive(Debug, Default)]
pub(crate) struct NoHooks;

impl SceneHooks for NoHooks {}

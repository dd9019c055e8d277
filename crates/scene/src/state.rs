//! Game state and events without server code: a relay for clients' opaque messages and
//! replicated key-value state per player and per room, for names, colours, scores and game
//! phases. [`SceneMessage`] is a scene room's [`Simulation::Message`](rally_engine::Simulation)
//! in both directions; [`handle_event`] is the room's side, which the host calls with every
//! room event; [`SceneState`](crate::SceneState) is the client's mirror.
//!
//! The room orders writes: each accepted write is applied in the order the room received it
//! (last writer wins) and broadcast reliably to every client, so every client applies the same
//! writes in the same order. A joiner first gets [`SceneMessage::Present`] and then every
//! current value. A player's scope goes when the player leaves for good
//! ([`RoomEvent::Left`], after the resume window), not when its connection drops.
//!
//! Everything from a client is untrusted: sizes, rates and scopes are checked against
//! [`StateSettings`], and each refusal is counted in [`StateStats`] and affects no one else.

use crate::limits::{
    KEYS_PER_SCOPE_DEFAULT, KEY_BYTES_DEFAULT, RELAY_BURST_DEFAULT, RELAY_BYTES_DEFAULT,
    RELAY_PER_SECOND_DEFAULT, VALUES_BATCH_BYTES, VALUE_BYTES_DEFAULT,
};
use crate::{Avatar, SceneRoom};
use rally_engine::{ClientId, Delivery, Room, RoomEvent, RpcError, Target};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Keys that start with this are the room's own: the room writes them, and a client's write of
/// one is refused ([`StateError::ReservedKey`]).
pub const RESERVED_KEY_PREFIX: &str = "rally.";

/// The key under which the room writes each player's avatar in the player's scope when it
/// joins: the entity ids of its head, left hand and right hand ([`Avatar::to_bytes`]), so that
/// a client knows which hands are its own and whose the others are. Not counted against the
/// scene's `[state]` limits, which bound what clients write.
pub const AVATAR_KEY: &str = "rally.avatar";

/// A scene room's message, both ways. Clients send [`Relay`](Self::Relay) and
/// [`Write`](Self::Write); the room sends the rest. A client that sends a room's variant is
/// refused and counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SceneMessage {
    /// Client to room: pass `bytes` on to `to`, stamped with the sender's id.
    Relay {
        /// Who gets it.
        to: RelayTarget,
        /// Reliable (resent until acknowledged, in order) or not (at most once).
        reliable: bool,
        /// Opaque to the room; at most [`StateSettings::relay_bytes_max`].
        bytes: Vec<u8>,
    },
    /// Client to room: set `key` in `scope` to `value`, or remove it if `value` is `None`.
    Write {
        /// The room's scope or the writer's own.
        scope: WriteScope,
        /// At most [`StateSettings::key_bytes_max`] bytes of UTF-8.
        key: String,
        /// At most [`StateSettings::value_bytes_max`] opaque bytes; `None` removes the key.
        value: Option<Vec<u8>>,
    },
    /// Room to client: relayed bytes.
    Relayed {
        /// The sending client, or `None` for the room's own code.
        from: Option<ClientId>,
        /// What it sent.
        bytes: Vec<u8>,
    },
    /// Room to client, first after joining or resuming: the players in the room now. Forget
    /// every value held: the current ones follow as [`Values`](Self::Values).
    Present {
        /// Every player, this one included.
        players: Vec<ClientId>,
    },
    /// Room to client: values changed, in the room's order.
    Values {
        /// The changes, to apply in order.
        changes: Vec<Change>,
    },
    /// Room to client: a player joined.
    PlayerJoined(ClientId),
    /// Room to client: a player left for good; its scope is gone.
    PlayerLeft(ClientId),
}

/// Who a relayed message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelayTarget {
    /// Every connected player, the sender included.
    All,
    /// Every connected player but the sender.
    Others,
    /// One player (the sender may name itself).
    One(ClientId),
}

/// Where a client writes: the room's scope, or its own player's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteScope {
    /// Shared by the room: anyone may write it (game phase, score).
    Room,
    /// The writer's own scope (name, colour), removed when it leaves.
    Mine,
}

/// A scope as the room names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// The room's.
    Room,
    /// A player's.
    Player(ClientId),
}

/// One accepted write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Whose.
    pub scope: Scope,
    /// Which key.
    pub key: String,
    /// The new value, or `None`: removed.
    pub value: Option<Vec<u8>>,
}

/// The limits of the relay and the key-value state; a scene's `[relay]` and `[state]`
/// sections set them (docs/scene.md), within the ranges of [`crate::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSettings {
    /// A relayed message's bytes at most.
    pub relay_bytes_max: u32,
    /// Relay messages and writes a client may send per second, on average.
    pub relay_per_second: u32,
    /// Relay messages and writes a client may send at once after a quiet spell.
    pub relay_burst: u32,
    /// A key's bytes at most.
    pub key_bytes_max: u32,
    /// A value's bytes at most.
    pub value_bytes_max: u32,
    /// Keys in one scope (the room's, or one player's) at most.
    pub keys_per_scope_max: u32,
}

impl Default for StateSettings {
    fn default() -> Self {
        Self {
            relay_bytes_max: RELAY_BYTES_DEFAULT,
            relay_per_second: RELAY_PER_SECOND_DEFAULT,
            relay_burst: RELAY_BURST_DEFAULT,
            key_bytes_max: KEY_BYTES_DEFAULT,
            value_bytes_max: VALUE_BYTES_DEFAULT,
            keys_per_scope_max: KEYS_PER_SCOPE_DEFAULT,
        }
    }
}

/// Why a relay message or a write was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A relayed message over [`StateSettings::relay_bytes_max`].
    #[error("a relay message of {len} bytes is over the limit of {max}")]
    RelayTooLarge {
        /// Its bytes.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// The sender's relay and write rate ([`StateSettings::relay_per_second`]) is used up.
    #[error("client {0} sends faster than the relay rate allows")]
    RateLimited(ClientId),
    /// A key over [`StateSettings::key_bytes_max`].
    #[error("a key of {len} bytes is over the limit of {max}")]
    KeyTooLong {
        /// Its bytes.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// A value over [`StateSettings::value_bytes_max`].
    #[error("a value of {len} bytes is over the limit of {max}")]
    ValueTooLarge {
        /// Its bytes.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// A new key in a scope that holds [`StateSettings::keys_per_scope_max`] keys.
    #[error("the scope already holds its {max} keys")]
    ScopeFull {
        /// The limit.
        max: u32,
    },
    /// A relay to, or a write in the scope of, a player not in the room.
    #[error("player {0} is not in the room")]
    NoSuchPlayer(ClientId),
    /// A client sent what only the room sends, or a request.
    #[error("a client sent a message only the room sends")]
    WrongDirection,
    /// A client wrote a key the room keeps for itself ([`RESERVED_KEY_PREFIX`]).
    #[error("keys starting with {RESERVED_KEY_PREFIX:?} are the room's")]
    ReservedKey,
    /// The room could not queue the message.
    #[error(transparent)]
    Send(#[from] RpcError),
}

/// What the relay and the state counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateStats {
    /// Relay messages passed on.
    pub relayed: u64,
    /// Writes accepted and broadcast.
    pub writes: u64,
    /// Relay messages refused: over the size limit.
    pub refused_too_large: u64,
    /// Relay messages and writes refused: over the sender's rate.
    pub refused_rate: u64,
    /// Writes refused: the key is too long.
    pub refused_key: u64,
    /// Writes refused: the value is too large.
    pub refused_value: u64,
    /// Writes refused: a new key in a full scope.
    pub refused_scope_full: u64,
    /// Relay messages refused: to a player not in the room (or not connected).
    pub refused_target: u64,
    /// Messages refused: a room's variant, or a request, from a client.
    pub refused_direction: u64,
    /// Writes refused: a key the room keeps for itself ([`RESERVED_KEY_PREFIX`]).
    pub refused_reserved: u64,
    /// Messages the room could not queue (its outbox was full).
    pub sends_failed: u64,
}

impl StateStats {
    /// Every refusal of a client's message (not counting failed sends).
    pub fn refused(&self) -> u64 {
        self.refused_too_large
            + self.refused_rate
            + self.refused_key
            + self.refused_value
            + self.refused_scope_full
            + self.refused_target
            + self.refused_direction
            + self.refused_reserved
    }

    fn count(&mut self, error: &StateError) {
        let counter = match error {
            StateError::RelayTooLarge { .. } => &mut self.refused_too_large,
            StateError::RateLimited(_) => &mut self.refused_rate,
            StateError::KeyTooLong { .. } => &mut self.refused_key,
            StateError::ValueTooLarge { .. } => &mut self.refused_value,
            StateError::ScopeFull { .. } => &mut self.refused_scope_full,
            StateError::NoSuchPlayer(_) | StateError::Send(RpcError::NotConnected(_)) => {
                &mut self.refused_target
            }
            StateError::WrongDirection => &mut self.refused_direction,
            StateError::ReservedKey => &mut self.refused_reserved,
            StateError::Send(_) => &mut self.sends_failed,
        };
        *counter += 1;
    }
}

/// A client's token bucket, in room ticks: it gains `relay_per_second` credits a tick, holds
/// at most `relay_burst * tick_rate`, and a message costs `tick_rate`. Integers, so that the
/// same ticks give the same refusals everywhere.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    credit: u64,
    tick: u32,
}

/// A scope's keys and values.
type Values = BTreeMap<String, Vec<u8>>;

/// The room's side: the values, the players, their buckets, and what was counted. Held by the
/// [`SceneRoom`]; [`handle_event`] drives it.
#[derive(Debug, Clone, Default)]
pub struct RoomState {
    settings: StateSettings,
    room: Values,
    players: BTreeMap<ClientId, (Values, Bucket)>,
    /// Players that missed a change (the room's outbox was full): sent everything again at the
    /// next event. Bounded by the players.
    stale: BTreeSet<ClientId>,
    stats: StateStats,
    /// The room's grabs and releases when the roster last looked ([`crate::roster`]).
    held_moves: u64,
}

/// What a handled event asks the room to send.
type Outgoing = Vec<(Target, Delivery, SceneMessage)>;

impl RoomState {
    /// No values and no players, with `settings`.
    pub fn new(settings: StateSettings) -> Self {
        Self { settings, ..Self::default() }
    }

    /// The limits in force.
    pub fn settings(&self) -> &StateSettings {
        &self.settings
    }

    /// What was counted.
    pub fn stats(&self) -> &StateStats {
        &self.stats
    }

    /// The value of `key` in `scope`.
    pub fn get(&self, scope: Scope, key: &str) -> Option<&[u8]> {
        self.scope(scope)?.get(key).map(Vec::as_slice)
    }

    /// Every key and value of `scope`, in key order.
    pub fn values(&self, scope: Scope) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let values = self.scope(scope).into_iter().flatten();
        values.map(|(key, value)| (key.as_str(), value.as_slice()))
    }

    /// The players in the room (joined, not yet left), in id order.
    pub fn players(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.players.keys().copied()
    }

    fn scope(&self, scope: Scope) -> Option<&Values> {
        match scope {
            Scope::Room => Some(&self.room),
            Scope::Player(id) => self.players.get(&id).map(|(values, _)| values),
        }
    }

    /// Handles one room event at `now` (the room's tick, and its ticks per second), adding
    /// what to send to `out`.
    fn on_event(&mut self, event: RoomEvent<SceneMessage>, now: (u32, u32), out: &mut Outgoing) {
        match event {
            RoomEvent::Joined(client) => {
                let bucket = self.full_bucket(now);
                self.players.insert(client, (Values::new(), bucket));
                out.push((
                    Target::AllBut(client),
                    Delivery::Reliable,
                    SceneMessage::PlayerJoined(client),
                ));
                self.sync(client, out);
            }
            // The connection may have lost what was sent while it was down: start it again.
            RoomEvent::Resumed(client) => self.sync(client, out),
            RoomEvent::Left(client) => {
                self.stale.remove(&client);
                if self.players.remove(&client).is_some() {
                    out.push((Target::All, Delivery::Reliable, SceneMessage::PlayerLeft(client)));
                }
            }
            RoomEvent::Message { client, message } => {
                if let Err(error) = self.client_message(client, message, now, out) {
                    self.stats.count(&error);
                }
            }
            RoomEvent::Request { .. } | RoomEvent::Response { .. } => {
                self.stats.count(&StateError::WrongDirection)
            }
            RoomEvent::Disconnected(..) | RoomEvent::RequestTimedOut { .. } => {}
        }
    }

    fn client_message(
        &mut self,
        client: ClientId,
        message: SceneMessage,
        now: (u32, u32),
        out: &mut Outgoing,
    ) -> Result<(), StateError> {
        match message {
            SceneMessage::Relay { to, reliable, bytes } => {
                let max = self.settings.relay_bytes_max;
                if bytes.len() > max as usize {
                    return Err(StateError::RelayTooLarge { len: bytes.len(), max });
                }
                let target = match to {
                    RelayTarget::All => Target::All,
                    RelayTarget::Others => Target::AllBut(client),
                    RelayTarget::One(id) if self.players.contains_key(&id) => Target::One(id),
                    RelayTarget::One(id) => return Err(StateError::NoSuchPlayer(id)),
                };
                self.spend(client, now)?;
                let delivery = if reliable { Delivery::Reliable } else { Delivery::Unreliable };
                out.push((target, delivery, SceneMessage::Relayed { from: Some(client), bytes }));
                self.stats.relayed += 1;
                Ok(())
            }
            SceneMessage::Write { scope, key, value } => {
                let scope = match scope {
                    WriteScope::Room => Scope::Room,
                    WriteScope::Mine => Scope::Player(client),
                };
                if key.starts_with(RESERVED_KEY_PREFIX) {
                    return Err(StateError::ReservedKey);
                }
                self.check(scope, &key, value.as_deref())?;
                self.spend(client, now)?;
                out.push(self.apply(Change { scope, key, value }));
                Ok(())
            }
            _ => Err(StateError::WrongDirection),
        }
    }

    /// Whether `key` may take `value` in `scope` now.
    fn check(&self, scope: Scope, key: &str, value: Option<&[u8]>) -> Result<(), StateError> {
        let settings = &self.settings;
        if key.len() > settings.key_bytes_max as usize {
            return Err(StateError::KeyTooLong { len: key.len(), max: settings.key_bytes_max });
        }
        if let Some(value) = value.filter(|v| v.len() > settings.value_bytes_max as usize) {
            let max = settings.value_bytes_max;
            return Err(StateError::ValueTooLarge { len: value.len(), max });
        }
        let values = match scope {
            Scope::Room => &self.room,
            Scope::Player(id) => &self.players.get(&id).ok_or(StateError::NoSuchPlayer(id))?.0,
        };
        let new_key = value.is_some() && !values.contains_key(key);
        // The room's own keys (avatar, roster) are not the players' to count.
        let held = values.len() - reserved_keys(values);
        if new_key && held >= settings.keys_per_scope_max as usize {
            return Err(StateError::ScopeFull { max: settings.keys_per_scope_max });
        }
        Ok(())
    }

    /// Applies a checked change, counts it, and says how to broadcast it.
    fn apply(&mut self, change: Change) -> (Target, Delivery, SceneMessage) {
        self.stats.writes += 1;
        self.apply_uncounted(change)
    }

    /// Writes `client`'s avatar in its scope ([`AVATAR_KEY`]) and says how to broadcast it:
    /// the room's announcement, not a write of a client or of the room's code.
    fn announce_avatar(
        &mut self,
        client: ClientId,
        avatar: Avatar,
    ) -> (Target, Delivery, SceneMessage) {
        let value = Some(avatar.to_bytes().to_vec());
        self.apply_uncounted(Change { scope: Scope::Player(client), key: AVATAR_KEY.into(), value })
    }

    /// Records the room's grab and release count; whether it moved since the last call.
    pub(crate) fn held_moves(&mut self, moves: u64) -> bool {
        std::mem::replace(&mut self.held_moves, moves) != moves
    }

    pub(crate) fn apply_uncounted(&mut self, change: Change) -> (Target, Delivery, SceneMessage) {
        let values = match change.scope {
            Scope::Room => Some(&mut self.room),
            Scope::Player(id) => self.players.get_mut(&id).map(|(values, _)| values),
        };
        if let Some(values) = values {
            match &change.value {
                Some(value) => values.insert(change.key.clone(), value.clone()),
                None => values.remove(&change.key),
            };
        }
        (Target::All, Delivery::Reliable, SceneMessage::Values { changes: vec![change] })
    }

    fn full_bucket(&self, (tick, tick_rate): (u32, u32)) -> Bucket {
        Bucket { credit: u64::from(self.settings.relay_burst) * u64::from(tick_rate), tick }
    }

    /// Takes one message's cost from `client`'s bucket, or refuses.
    fn spend(&mut self, client: ClientId, (tick, tick_rate): (u32, u32)) -> Result<(), StateError> {
        let settings = self.settings;
        let Some((_, bucket)) = self.players.get_mut(&client) else {
            return Err(StateError::NoSuchPlayer(client));
        };
        let cap = u64::from(settings.relay_burst) * u64::from(tick_rate);
        let elapsed = u64::from(tick.wrapping_sub(bucket.tick));
        bucket.credit = cap.min(bucket.credit + elapsed * u64::from(settings.relay_per_second));
        bucket.tick = tick;
        let cost = u64::from(tick_rate);
        if bucket.credit < cost {
            return Err(StateError::RateLimited(client));
        }
        bucket.credit -= cost;
        Ok(())
    }

    /// Sends `client` the players and every current value, in batches of about
    /// [`VALUES_BATCH_BYTES`].
    fn sync(&self, client: ClientId, out: &mut Outgoing) {
        let to = Target::One(client);
        let players = self.players.keys().copied().collect();
        out.push((to, Delivery::Reliable, SceneMessage::Present { players }));
        let scopes = std::iter::once((Scope::Room, &self.room))
            .chain(self.players.iter().map(|(id, (values, _))| (Scope::Player(*id), values)));
        let mut batch = Vec::new();
        let mut bytes = 0;
        for (scope, values) in scopes {
            for (key, value) in values {
                if bytes + key.len() + value.len() > VALUES_BATCH_BYTES && !batch.is_empty() {
                    let changes = std::mem::take(&mut batch);
                    out.push((to, Delivery::Reliable, SceneMessage::Values { changes }));
                    bytes = 0;
                }
                bytes += key.len() + value.len();
                batch.push(Change { scope, key: key.clone(), value: Some(value.clone()) });
            }
        }
        if !batch.is_empty() {
            out.push((to, Delivery::Reliable, SceneMessage::Values { changes: batch }));
        }
    }
}

/// The room's side of the relay and the state: call it with every event the room reports
/// ([`Room::poll_event`]). It passes relay messages on, applies and broadcasts writes, greets
/// joiners with the players and the current values, tells everyone a joiner's avatar
/// ([`AVATAR_KEY`]), and removes a leaver's scope. A refused message is counted in
/// [`StateStats`] ([`SceneRoom::state`]) and goes nowhere.
pub fn handle_event(room: &mut Room<SceneRoom>, event: RoomEvent<SceneMessage>) {
    let now = (room.tick_number(), room.config().tick_rate);
    // The avatar spawned when the room took the player in, before this event.
    let avatar = match event {
        RoomEvent::Joined(client) => room.simulation().avatar(client).map(|a| (client, a)),
        _ => None,
    };
    let mut out = Outgoing::new();
    let state = room.simulation_mut().state_mut();
    state.on_event(event, now, &mut out);
    if let Some((client, avatar)) = avatar {
        out.push(state.announce_avatar(client, avatar));
    }
    // A player that missed a change gets everything again, after this event's own messages.
    for client in std::mem::take(&mut state.stale) {
        state.sync(client, &mut out);
    }
    send(room, out);
}

/// Sends everything again to the players that missed a change because the room's outbox was
/// full: call it after each tick (the driver's `Game::after_tick`), when the tick has emptied
/// the outbox. [`handle_event`] does it too, so a host that cannot call this still catches up
/// at the next event. It also publishes who holds what ([`HELD_KEY`](crate::HELD_KEY)) if a
/// hand grabbed or let go since the last call.
pub fn resend_missed(room: &mut Room<SceneRoom>) {
    if let Some(change) = crate::roster::held_change(room) {
        let (to, _, message) = room.simulation_mut().state_mut().apply_uncounted(change);
        send_state(room, to, &message);
    }
    let state = room.simulation_mut().state_mut();
    if state.stale.is_empty() {
        return;
    }
    let mut out = Outgoing::new();
    for client in std::mem::take(&mut state.stale) {
        state.sync(client, &mut out);
    }
    send(room, out);
}

/// Sends relayed `bytes` from the room's own code to `to` (a [`Target`] of the engine), stamped
/// as from no client. Not rate limited: the room's code is trusted; the codec's size limit
/// holds.
pub fn relay_from_room(
    room: &mut Room<SceneRoom>,
    to: Target,
    delivery: Delivery,
    bytes: Vec<u8>,
) -> Result<(), StateError> {
    room.send(to, delivery, &SceneMessage::Relayed { from: None, bytes })?;
    Ok(())
}

/// Writes `key` in `scope` from the room's own code (any scope, a player's included), or
/// removes it (`value` `None`), and broadcasts the change. The key, value and scope limits
/// hold as for clients, so that clients can rely on them; the rate does not. A player the
/// room's full outbox skips is sent everything again at the next event.
pub fn write_key(
    room: &mut Room<SceneRoom>,
    scope: Scope,
    key: &str,
    value: Option<Vec<u8>>,
) -> Result<(), StateError> {
    let state = room.simulation_mut().state_mut();
    state.check(scope, key, value.as_deref())?;
    let (to, _, message) = state.apply(Change { scope, key: key.to_owned(), value });
    // Accepted: a player the full outbox skips is sent everything again at the next event.
    send_state(room, to, &message);
    Ok(())
}

/// How many of `values`' keys are the room's own ([`RESERVED_KEY_PREFIX`]): they sort
/// together, so this reads only them.
fn reserved_keys(values: &Values) -> usize {
    let from = (std::ops::Bound::Included(RESERVED_KEY_PREFIX), std::ops::Bound::Unbounded);
    values.range::<str, _>(from).take_while(|(k, _)| k.starts_with(RESERVED_KEY_PREFIX)).count()
}

fn send(room: &mut Room<SceneRoom>, out: Outgoing) {
    for (to, delivery, message) in out {
        if let SceneMessage::Relayed { from, .. } = message {
            if let Err(error) = room.send(to, delivery, &message) {
                let stats = &mut room.simulation_mut().state_mut().stats;
                // A relay to one player whose connection is down: refused, not relayed.
                if from.is_some() && matches!(error, RpcError::NotConnected(_)) {
                    stats.relayed -= 1;
                }
                stats.count(&StateError::Send(error));
            }
            continue;
        }
        send_state(room, to, &message);
    }
}

/// Sends a change of the players or the values to each player of `to` on its own, so that a
/// player the room's full outbox skipped is known, marked stale and sent everything again.
/// One whose connection is down is not: it is sent everything when it resumes.
fn send_state(room: &mut Room<SceneRoom>, to: Target, message: &SceneMessage) {
    let state = room.simulation().state();
    let players: Vec<ClientId> = match to {
        Target::One(client) => vec![client],
        Target::All => state.players().collect(),
        Target::AllBut(skip) => state.players().filter(|p| *p != skip).collect(),
    };
    for player in players {
        match room.send(Target::One(player), Delivery::Reliable, message) {
            Ok(()) | Err(RpcError::NotConnected(_)) => {}
            Err(error) => {
                let state = room.simulation_mut().state_mut();
                state.stats.count(&StateError::Send(error));
                if state.players.contains_key(&player) {
                    state.stale.insert(player);
                }
            }
        }
    }
}

//! The client's side of the relay and the key-value state: [`SceneState`], a sans-IO mirror
//! that takes a session's [`ClientEvent`]s and holds the players and the current values, and
//! yields [`SceneEvent`]s ("a player joined, left; a relay message; a value changed") in the
//! room's order, for a game loop or a client library to hand on.

use crate::state::{Change, RelayTarget, SceneMessage, Scope, WriteScope, AVATAR_KEY};
use crate::Avatar;
use rally_engine::{ClientEvent, ClientId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Events a [`SceneState`] holds for [`SceneState::poll_event`] at most; more are dropped and
/// counted ([`SceneState::events_dropped`]). A game that polls every frame holds a few.
pub const MIRROR_EVENTS_MAX: usize = 65_536;

/// Keys a [`SceneState`] holds in all scopes together at most: the room bounds each scope, but
/// a client does not know the room's limits, so it bounds what it holds itself. A new key past
/// this is dropped and counted.
pub const MIRROR_KEYS_MAX: usize = 1 << 20;

/// What a client learns from the room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SceneEvent {
    /// This session joined (or resumed) as `client`; every value held before is forgotten, and
    /// the current ones follow as [`SceneEvent::Changed`].
    Reset {
        /// This client's id.
        client: Option<ClientId>,
    },
    /// A player is in the room (on joining, one for each player already there).
    PlayerJoined(ClientId),
    /// A player left for good; its values are gone.
    PlayerLeft(ClientId),
    /// A relayed message, in the order its sender sent it (on the reliable path).
    Relayed {
        /// The sender, or `None` for the room's own code.
        from: Option<ClientId>,
        /// What it sent.
        bytes: Vec<u8>,
    },
    /// A value changed (or was removed: `value` `None`).
    Changed(Change),
}

/// A client's mirror of the room's players and values. Feed it every [`ClientEvent`] of the
/// session ([`SceneState::handle`]); read values with [`SceneState::get`]; poll what changed
/// with [`SceneState::poll_event`]. Build what to send with [`SceneState::relay`] and
/// [`SceneState::write`] and pass it to `ClientSession::send`.
#[derive(Debug, Clone, Default)]
pub struct SceneState {
    client: Option<ClientId>,
    players: BTreeSet<ClientId>,
    values: BTreeMap<Scope, BTreeMap<String, Vec<u8>>>,
    keys: usize,
    events: VecDeque<SceneEvent>,
    events_dropped: u64,
    keys_dropped: u64,
    unexpected: u64,
}

impl SceneState {
    /// Nothing known yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one of the session's events; only joins and the room's messages matter here.
    pub fn handle(&mut self, event: &ClientEvent<SceneMessage>) {
        match event {
            ClientEvent::Joined { client, .. } => self.client = Some(*client),
            ClientEvent::Message(message) => self.message(message),
            _ => {}
        }
    }

    fn message(&mut self, message: &SceneMessage) {
        match message {
            SceneMessage::Present { players } => {
                self.values.clear();
                self.keys = 0;
                self.players.clear();
                self.push(SceneEvent::Reset { client: self.client });
                for &player in players {
                    self.players.insert(player);
                    self.push(SceneEvent::PlayerJoined(player));
                }
            }
            SceneMessage::PlayerJoined(player) => {
                if self.players.insert(*player) {
                    self.push(SceneEvent::PlayerJoined(*player));
                }
            }
            SceneMessage::PlayerLeft(player) => {
                self.players.remove(player);
                if let Some(values) = self.values.remove(&Scope::Player(*player)) {
                    self.keys -= values.len();
                }
                self.push(SceneEvent::PlayerLeft(*player));
            }
            SceneMessage::Relayed { from, bytes } => {
                self.push(SceneEvent::Relayed { from: *from, bytes: bytes.clone() })
            }
            SceneMessage::Values { changes } => {
                for change in changes {
                    self.apply(change);
                }
            }
            SceneMessage::Relay { .. } | SceneMessage::Write { .. } => self.unexpected += 1,
        }
    }

    fn apply(&mut self, change: &Change) {
        match &change.value {
            Some(value) => {
                let values = self.values.entry(change.scope).or_default();
                let new = !values.contains_key(&change.key);
                if new && self.keys >= MIRROR_KEYS_MAX {
                    self.keys_dropped += 1;
                    return;
                }
                values.insert(change.key.clone(), value.clone());
                self.keys += usize::from(new);
            }
            None => {
                let values = self.values.get_mut(&change.scope);
                if values.and_then(|values| values.remove(&change.key)).is_some() {
                    self.keys -= 1;
                }
            }
        }
        self.push(SceneEvent::Changed(change.clone()));
    }

    fn push(&mut self, event: SceneEvent) {
        if self.events.len() >= MIRROR_EVENTS_MAX {
            self.events_dropped += 1;
            return;
        }
        self.events.push_back(event);
    }

    /// `client`'s avatar, as the room told it ([`AVATAR_KEY`](crate::AVATAR_KEY)): this
    /// client's own with [`SceneState::client`], to tell its hands from the others'.
    pub fn avatar(&self, client: ClientId) -> Option<Avatar> {
        Avatar::from_bytes(self.get(Scope::Player(client), AVATAR_KEY)?)
    }

    /// The next thing that happened, in the room's order.
    pub fn poll_event(&mut self) -> Option<SceneEvent> {
        self.events.pop_front()
    }

    /// This session's client id, once joined.
    pub fn client(&self) -> Option<ClientId> {
        self.client
    }

    /// The players in the room, in id order.
    pub fn players(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.players.iter().copied()
    }

    /// The value of `key` in `scope`.
    pub fn get(&self, scope: Scope, key: &str) -> Option<&[u8]> {
        self.values.get(&scope)?.get(key).map(Vec::as_slice)
    }

    /// Every key and value of `scope`, in key order.
    pub fn values(&self, scope: Scope) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let values = self.values.get(&scope).into_iter().flatten();
        values.map(|(key, value)| (key.as_str(), value.as_slice()))
    }

    /// Events dropped because [`MIRROR_EVENTS_MAX`] waited.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped
    }

    /// New keys dropped past [`MIRROR_KEYS_MAX`].
    pub fn keys_dropped(&self) -> u64 {
        self.keys_dropped
    }

    /// Messages only a client sends, received from the room: ignored.
    pub fn unexpected(&self) -> u64 {
        self.unexpected
    }

    /// The message that relays `bytes` to `to`.
    pub fn relay(to: RelayTarget, reliable: bool, bytes: Vec<u8>) -> SceneMessage {
        SceneMessage::Relay { to, reliable, bytes }
    }

    /// The message that sets `key` in `scope` to `value`, or removes it.
    pub fn write(scope: WriteScope, key: &str, value: Option<Vec<u8>>) -> SceneMessage {
        SceneMessage::Write { scope, key: key.to_owned(), value }
    }
}

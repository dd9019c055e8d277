//! The room's roster in its own scope: what class each entity is ([`CLASSES_KEY`]) and which
//! player's hand holds what ([`HELD_KEY`]), so that a client (the C library among them) can
//! show both without server code. With each player's avatar ([`AVATAR_KEY`]) these keys tell
//! a client everything the snapshots do not carry.
//!
//! Both are room writes: clients cannot write them (keys starting
//! [`RESERVED_KEY_PREFIX`](crate::RESERVED_KEY_PREFIX) are the room's), the scene's `[state]`
//! limits do not count them, and their sizes are bounded by the scene's own limits instead
//! ([`CLASSES_BYTES_MAX`], [`HELD_BYTES_MAX`]). Like every value they reach a late joiner in
//! its first batch and are resent to a client the room's full outbox skipped.
//!
//! [`AVATAR_KEY`]: crate::AVATAR_KEY

use crate::input::Hand;
use crate::limits::{BODIES_MAX, NAME_BYTES_MAX, PLAYERS, VALUES_BATCH_BYTES, VALUE_BYTES};
use crate::player::{HAND_CLASS, HEAD_CLASS};
use crate::state::{Change, Scope};
use crate::SceneRoom;
use rally_engine::{ClientId, EntityId, Room};

/// The room's key for the class table ([`Classes`]): written once when the room is built (a
/// scene's bodies keep their ids for the room's life: a respawn moves a body, it does not
/// replace it); absent in a scene without bodies.
pub const CLASSES_KEY: &str = "rally.classes";

/// The room's key for who holds what ([`Held`]): rewritten after a tick in which a hand
/// grabbed or let go (`resend_missed`, the host's after-tick call), removed when nothing is
/// held.
pub const HELD_KEY: &str = "rally.held";

/// Class names in a table at most: an index is a byte. A scene with more distinct classes
/// leaves the bodies of the extra ones out of the table (their class reads as unknown).
pub const CLASSES_MAX: usize = 255;

/// The class of every avatar's head: index 0 of every table.
pub const HEAD_CLASS_INDEX: u8 = 0;
/// The class of every avatar's hands: index 1 of every table.
pub const HAND_CLASS_INDEX: u8 = 1;

/// The class table's bytes at most: every name and every body.
pub const CLASSES_BYTES_MAX: usize = 1 + CLASSES_MAX * (1 + NAME_BYTES_MAX) + 2 + BODIES_MAX * 5;
/// Who-holds-what's bytes at most: two hands per player.
pub const HELD_BYTES_MAX: usize = *PLAYERS.end() as usize * 2 * HELD_ENTRY_BYTES;
const HELD_ENTRY_BYTES: usize = 9;

// Each goes out whole in one batch of values, and fits the largest value a client may write.
const _: () = assert!(CLASSES_BYTES_MAX + CLASSES_KEY.len() <= VALUES_BATCH_BYTES);
const _: () = assert!(HELD_BYTES_MAX + HELD_KEY.len() <= VALUES_BATCH_BYTES);
const _: () = assert!(CLASSES_BYTES_MAX <= *VALUE_BYTES.end() as usize);
const _: () = assert!(BODIES_MAX <= u16::MAX as usize);

/// The class of each of a scene's bodies, by entity id, as indices into a table of class
/// names. The table starts with [`HEAD_CLASS`] and [`HAND_CLASS`], the classes of avatars'
/// entities (a client finds those from each player's avatar key).
///
/// Bytes: the name count (one byte), each name as its length (one byte) and its ASCII bytes;
/// then the body count (u16, little-endian) and each body as its entity id (u32,
/// little-endian) and its class index (one byte), ids ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    names: Vec<String>,
    of: Vec<(EntityId, u8)>,
}

impl Default for Classes {
    fn default() -> Self {
        Self { names: vec![HEAD_CLASS.into(), HAND_CLASS.into()], of: Vec::new() }
    }
}

impl Classes {
    /// The table of `bodies` (entity id, class name), in any order.
    pub fn new<'a>(bodies: impl IntoIterator<Item = (EntityId, &'a str)>) -> Self {
        let mut classes = Self::default();
        for (id, class) in bodies {
            let index = match classes.names.iter().position(|n| n == class) {
                Some(index) => index,
                None if classes.names.len() < CLASSES_MAX && class.len() <= NAME_BYTES_MAX => {
                    classes.names.push(class.into());
                    classes.names.len() - 1
                }
                None => continue,
            };
            classes.of.push((id, index as u8));
        }
        classes.of.sort_unstable();
        classes.of.dedup_by_key(|(id, _)| *id);
        classes
    }

    /// The class names, by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The class index of body `id`, if the table has it (avatars' entities it has not).
    pub fn index(&self, id: EntityId) -> Option<u8> {
        let at = self.of.binary_search_by_key(&id, |(id, _)| *id).ok()?;
        Some(self.of[at].1)
    }

    /// Every body and its class index, ids ascending.
    pub fn bodies(&self) -> &[(EntityId, u8)] {
        &self.of
    }

    /// The table's bytes (see the type's docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.names.len() as u8];
        for name in &self.names {
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
        }
        out.extend_from_slice(&(self.of.len() as u16).to_le_bytes());
        for (id, index) in &self.of {
            out.extend_from_slice(&id.to_le_bytes());
            out.push(*index);
        }
        debug_assert!(out.len() <= CLASSES_BYTES_MAX);
        out
    }

    /// Reads a table back; `None` for anything [`Classes::to_bytes`] does not write (an index
    /// past the names, ids out of order, bytes left over).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let mut reader = Reader(bytes);
        let count = reader.take(1)?[0];
        let mut names = Vec::with_capacity(count.into());
        for _ in 0..count {
            let len = reader.take(1)?[0];
            names.push(std::str::from_utf8(reader.take(len.into())?).ok()?.to_owned());
        }
        let bodies = u16::from_le_bytes(reader.take(2)?.try_into().ok()?);
        let mut of: Vec<(EntityId, u8)> = Vec::with_capacity(bodies.into());
        for _ in 0..bodies {
            let id = reader.u32()?;
            let index = reader.take(1)?[0];
            let ascending = of.last().is_none_or(|(last, _)| *last < id);
            if usize::from(index) >= names.len() || !ascending {
                return None;
            }
            of.push((id, index));
        }
        reader.0.is_empty().then_some(Self { names, of })
    }
}

/// Who holds an entity: a player's hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The player.
    pub player: ClientId,
    /// Which of its hands.
    pub hand: Hand,
}

/// What players' hands hold, by entity id.
///
/// Bytes: for each held entity, ids ascending, its id and its holder's client id (u32,
/// little-endian) and hand (0 left, 1 right): nine bytes each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held(Vec<(EntityId, Holder)>);

impl Held {
    /// What `holds` say (entity, holder), in any order.
    pub fn new(holds: impl IntoIterator<Item = (EntityId, Holder)>) -> Self {
        let mut held: Vec<_> = holds.into_iter().collect();
        held.sort_unstable_by_key(|(id, _)| *id);
        held.dedup_by_key(|(id, _)| *id);
        Self(held)
    }

    /// Who holds `id`, if a hand does.
    pub fn holder(&self, id: EntityId) -> Option<Holder> {
        let at = self.0.binary_search_by_key(&id, |(id, _)| *id).ok()?;
        Some(self.0[at].1)
    }

    /// Every held entity and its holder, ids ascending.
    pub fn entries(&self) -> &[(EntityId, Holder)] {
        &self.0
    }

    /// The bytes (see the type's docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() * HELD_ENTRY_BYTES);
        for (id, holder) in &self.0 {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&holder.player.to_le_bytes());
            out.push(holder.hand as u8);
        }
        out
    }

    /// Reads the bytes back; `None` for anything [`Held::to_bytes`] does not write.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() % HELD_ENTRY_BYTES != 0 || bytes.len() > HELD_BYTES_MAX {
            return None;
        }
        let mut reader = Reader(bytes);
        let mut held: Vec<(EntityId, Holder)> = Vec::with_capacity(bytes.len() / 9);
        while !reader.0.is_empty() {
            let id = reader.u32()?;
            let player = reader.u32()?;
            let hand = match reader.take(1)?[0] {
                0 => Hand::Left,
                1 => Hand::Right,
                _ => return None,
            };
            if held.last().is_some_and(|(last, _)| *last >= id) {
                return None;
            }
            held.push((id, Holder { player, hand }));
        }
        Some(Self(held))
    }
}

/// Bytes read front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// Puts the class table of `room`'s bodies in its room scope: called once, as it is built,
/// before any player can be there to be told. A scene without bodies writes none: an absent
/// key reads as [`Classes::default`].
pub(crate) fn write_classes(room: &mut SceneRoom) {
    let classes = Classes::new(room.bodies().filter_map(|id| Some((id, room.class(id)?))));
    if classes.of.is_empty() {
        return;
    }
    let value = Some(classes.to_bytes());
    let change = Change { scope: Scope::Room, key: CLASSES_KEY.into(), value };
    // No player yet: the message to broadcast goes to no one.
    let _ = room.state_mut().apply_uncounted(change);
}

/// The change of [`HELD_KEY`] if a hand grabbed or let go since the last call (the room's grab
/// and release counters moved) and what the hands hold differs from the key's value; `None`
/// otherwise, so that a tick with no grab costs two comparisons.
pub(crate) fn held_change(room: &mut Room<SceneRoom>) -> Option<Change> {
    let stats = room.simulation().stats();
    if !room.simulation_mut().state_mut().held_moves(stats.grabs + stats.releases) {
        return None;
    }
    let held = room.simulation().held(room.world());
    let value = (!held.0.is_empty()).then(|| held.to_bytes());
    if room.simulation().state().get(Scope::Room, HELD_KEY) == value.as_deref() {
        return None;
    }
    Some(Change { scope: Scope::Room, key: HELD_KEY.into(), value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_table_reads_back_from_its_bytes_and_nothing_else_reads_as_one() {
        let classes = Classes::new([(9, "ball"), (4, "block"), (5, "block"), (7, HAND_CLASS)]);
        assert_eq!(classes.names(), [HEAD_CLASS, HAND_CLASS, "ball", "block"]);
        assert_eq!(classes.bodies(), [(4, 3), (5, 3), (7, HAND_CLASS_INDEX), (9, 2)]);
        let bytes = classes.to_bytes();
        assert_eq!(Classes::from_bytes(&bytes), Some(classes.clone()));
        assert_eq!(Classes::from_bytes(&bytes[..bytes.len() - 1]), None, "cut short");
        assert_eq!(Classes::from_bytes(&[bytes.as_slice(), &[0]].concat()), None, "left over");
        let mut past = bytes.clone();
        *past.last_mut().unwrap() = 4;
        assert_eq!(Classes::from_bytes(&past), None, "an index past the names");
        assert_eq!(classes.index(6), None);
    }

    #[test]
    fn a_table_of_more_classes_than_an_index_holds_leaves_the_extra_bodies_out() {
        let names: Vec<String> = (0..300).map(|k| format!("c{k}")).collect();
        let classes = Classes::new(names.iter().enumerate().map(|(k, n)| (k as u32, n.as_str())));
        assert_eq!(classes.names().len(), CLASSES_MAX);
        assert_eq!(classes.bodies().len(), CLASSES_MAX - 2);
        assert_eq!(classes.index(299), None);
        assert!(classes.to_bytes().len() <= CLASSES_BYTES_MAX);
    }

    #[test]
    fn who_holds_what_reads_back_from_its_bytes_and_nothing_else_reads_as_one() {
        let left = Holder { player: 3, hand: Hand::Left };
        let right = Holder { player: 0x0102_0304, hand: Hand::Right };
        let held = Held::new([(12, right), (8, left)]);
        let bytes = held.to_bytes();
        assert_eq!(bytes[..9], [8, 0, 0, 0, 3, 0, 0, 0, 0], "little-endian, ids ascending");
        assert_eq!(Held::from_bytes(&bytes), Some(held.clone()));
        assert_eq!(held.holder(12), Some(right));
        assert_eq!(held.holder(9), None);
        assert_eq!(Held::from_bytes(&bytes[..17]), None, "cut short");
        let mut hand = bytes.clone();
        hand[8] = 2;
        assert_eq!(Held::from_bytes(&hand), None, "a third hand");
        let swapped = [&bytes[9..], &bytes[..9]].concat();
        assert_eq!(Held::from_bytes(&swapped), None, "ids out of order");
        assert_eq!(Held::from_bytes(&vec![0; HELD_BYTES_MAX + 9]), None, "over the bound");
    }
}

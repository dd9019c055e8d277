//! The room's sessions by client id, in one vector kept in ascending order of id: a message
//! finds its session at the slot its connection remembers (an index, checked against the id)
//! instead of searching the ids for every input, and the walks over every session (a tick's
//! replication, the fast path's copies) read one contiguous run in the order of the ids.

use super::{ClientId, Session};
use rally_proto::ConnectionHandle;

/// A joined connection's client and the slot its session was in when the connection joined:
/// a hint, checked on use (a session that leaves moves every later one down a slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Joined {
    pub(super) client: ClientId,
    pub(super) slot: usize,
}

/// A map kept as two vectors in ascending order of its keys, the keys apart from the values:
/// a look-up is a binary search over packed keys (a room's client ids fit a cache line), a
/// walk reads the values in order, and a value's own layout decides which of its lines are
/// hot ([`Session`]'s), not a key before it. Both of the room's maps are small (a room's
/// clients) and walked or looked up far more often than changed.
#[derive(Debug)]
struct SortedMap<K, V> {
    /// Ascending; `keys[k]` is the key of `values[k]`.
    keys: Vec<K>,
    values: Vec<V>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self { keys: Vec::new(), values: Vec::new() }
    }
}

impl<K: Ord + Copy, V> SortedMap<K, V> {
    #[inline]
    fn find(&self, key: K) -> Result<usize, usize> {
        self.keys.binary_search(&key)
    }

    #[inline]
    fn get(&self, key: K) -> Option<&V> {
        let at = self.find(key).ok()?;
        self.values.get(at)
    }

    fn get_mut(&mut self, key: K) -> Option<&mut V> {
        let at = self.find(key).ok()?;
        self.values.get_mut(at)
    }

    /// Adds `key`'s value, or replaces the one it had.
    fn insert(&mut self, key: K, value: V) {
        match self.find(key) {
            Ok(at) => self.values[at] = value,
            Err(at) => {
                self.keys.insert(at, key);
                self.values.insert(at, value);
            }
        }
    }

    fn remove(&mut self, key: K) -> Option<V> {
        let at = self.find(key).ok()?;
        self.keys.remove(at);
        Some(self.values.remove(at))
    }
}

/// Every session of a room, ascending by client id.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    map: SortedMap<ClientId, Session>,
}

impl Sessions {
    pub(super) fn len(&self) -> usize {
        self.map.keys.len()
    }

    /// Where `client`'s session is now.
    pub(super) fn joined(&self, client: ClientId) -> Option<Joined> {
        let slot = self.map.find(client).ok()?;
        Some(Joined { client, slot })
    }

    pub(super) fn get(&self, client: &ClientId) -> Option<&Session> {
        self.map.get(*client)
    }

    pub(super) fn get_mut(&mut self, client: &ClientId) -> Option<&mut Session> {
        self.map.get_mut(*client)
    }

    /// The session of `joined`'s client: at its slot if it is still there (no search), else
    /// wherever it moved; none if the client has no session. Never another client's.
    // Inline: called for every message, a call costs what the search saves.
    #[inline]
    pub(super) fn at_mut(&mut self, joined: Joined) -> Option<&mut Session> {
        let still = self.map.keys.get(joined.slot) == Some(&joined.client);
        let slot = if still { joined.slot } else { self.map.find(joined.client).ok()? };
        self.map.values.get_mut(slot)
    }

    /// Adds `client`'s session, or replaces the one it had (ids are handed out in ascending
    /// order: a new one goes at the end).
    pub(super) fn insert(&mut self, client: ClientId, session: Session) {
        self.map.insert(client, session);
    }

    pub(super) fn remove(&mut self, client: &ClientId) -> Option<Session> {
        self.map.remove(*client)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&ClientId, &Session)> {
        self.map.keys.iter().zip(&self.map.values)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Session> {
        self.map.values.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Session> {
        self.map.values.iter_mut()
    }
}

impl std::ops::Index<&ClientId> for Sessions {
    type Output = Session;

    fn index(&self, client: &ClientId) -> &Session {
        self.get(client).expect("a session for the client")
    }
}

/// Slots of [`Connections`]' cache: a room's connections are mostly neighbouring slots of its
/// endpoint (handles handed out in turn), each in a cache slot of its own.
const CACHED: usize = 16;

/// The room's connections, ascending by handle, and the client each joined one is; a message
/// finds its connection in a cache indexed by the handle's low bits (one probe), else by a
/// binary search. No more entries than connections, and a fixed cache.
#[derive(Debug, Default)]
pub(super) struct Connections {
    map: SortedMap<ConnectionHandle, Option<Joined>>,
    /// Some of `map`'s entries, each at its handle modulo [`CACHED`]: whatever is here is
    /// there too.
    cache: [Option<(ConnectionHandle, Option<Joined>)>; CACHED],
}

impl Connections {
    fn cached(connection: ConnectionHandle) -> usize {
        connection.0 % CACHED
    }

    // Inline: called for every message, a call costs what the search saves.
    #[inline]
    pub(super) fn get(&self, connection: &ConnectionHandle) -> Option<&Option<Joined>> {
        if let Some((handle, joined)) = &self.cache[Self::cached(*connection)] {
            if handle == connection {
                return Some(joined);
            }
        }
        self.map.get(*connection)
    }

    #[cfg(test)]
    pub(super) fn contains_key(&self, connection: &ConnectionHandle) -> bool {
        self.map.find(*connection).is_ok()
    }

    /// Adds `connection`, or replaces what it was; it takes its cache slot.
    pub(super) fn insert(&mut self, connection: ConnectionHandle, joined: Option<Joined>) {
        self.map.insert(connection, joined);
        self.cache[Self::cached(connection)] = Some((connection, joined));
    }

    pub(super) fn remove(&mut self, connection: &ConnectionHandle) -> Option<Option<Joined>> {
        let slot = &mut self.cache[Self::cached(*connection)];
        if slot.is_some_and(|(handle, _)| handle == *connection) {
            *slot = None;
        }
        self.map.remove(*connection)
    }
}

#[cfg(test)]
impl std::ops::Index<&ConnectionHandle> for Connections {
    type Output = Option<Joined>;

    fn index(&self, connection: &ConnectionHandle) -> &Option<Joined> {
        self.get(connection).expect("a connection of the room")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_sharing_a_cache_slot_each_find_their_own_entry() {
        // Goal: the cache never answers for another connection, nor for one that left.
        // Method: handles 3, 3 + CACHED and 4 (two share a cache slot) joined, replaced and
        // removed in turn, each looked up after each step.
        let joined = |client| Some(Joined { client, slot: 0 });
        let (a, b, c) = (ConnectionHandle(3), ConnectionHandle(3 + CACHED), ConnectionHandle(4));
        let mut connections = Connections::default();
        connections.insert(a, joined(1));
        connections.insert(b, joined(2));
        connections.insert(c, None);
        assert_eq!(connections.get(&a), Some(&joined(1)));
        assert_eq!(connections.get(&b), Some(&joined(2)));
        assert_eq!(connections.get(&c), Some(&None));
        connections.insert(c, joined(3));
        assert_eq!(connections.get(&c), Some(&joined(3)));
        assert_eq!(connections.remove(&b), Some(joined(2)));
        assert_eq!((connections.get(&a), connections.get(&b)), (Some(&joined(1)), None));
        assert_eq!(connections.remove(&a), Some(joined(1)));
        assert_eq!(connections.get(&a), None);
        assert_eq!(connections.remove(&a), None);
        assert_eq!(connections.get(&c), Some(&joined(3)));
    }
}

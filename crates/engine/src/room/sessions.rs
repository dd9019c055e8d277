//! The room's sessions by client id, in one vector kept in ascending order of id: a message
//! finds its session at the slot its connection remembers (an index, checked against the id)
//! instead of searching the ids for every input, and the walks over every session (a tick's
//! replication, the fast path's copies) read one contiguous run in the order of the ids.

use super::{ClientId, Session};

/// A joined connection's client and the slot its session was in when the connection joined:
/// a hint, checked on use (a session that leaves moves every later one down a slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Joined {
    pub(super) client: ClientId,
    pub(super) slot: usize,
}

/// Every session of a room, ascending by client id.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    entries: Vec<(ClientId, Session)>,
}

impl Sessions {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    fn find(&self, client: ClientId) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&client, |(id, _)| *id)
    }

    /// Where `client`'s session is now.
    pub(super) fn joined(&self, client: ClientId) -> Option<Joined> {
        let slot = self.find(client).ok()?;
        Some(Joined { client, slot })
    }

    pub(super) fn get(&self, client: &ClientId) -> Option<&Session> {
        let slot = self.find(*client).ok()?;
        Some(&self.entries[slot].1)
    }

    pub(super) fn get_mut(&mut self, client: &ClientId) -> Option<&mut Session> {
        let slot = self.find(*client).ok()?;
        Some(&mut self.entries[slot].1)
    }

    /// The session of `joined`'s client: at its slot if it is still there (no search), else
    /// wherever it moved; none if the client has no session. Never another client's.
    pub(super) fn at_mut(&mut self, joined: Joined) -> Option<&mut Session> {
        let still = self.entries.get(joined.slot).is_some_and(|(id, _)| *id == joined.client);
        let slot = if still { joined.slot } else { self.find(joined.client).ok()? };
        Some(&mut self.entries[slot].1)
    }

    /// Adds `client`'s session, or replaces the one it had.
    pub(super) fn insert(&mut self, client: ClientId, session: Session) {
        match self.find(client) {
            Ok(slot) => self.entries[slot].1 = session,
            // Ids are handed out in ascending order: this is a push at the end.
            Err(slot) => self.entries.insert(slot, (client, session)),
        }
    }

    pub(super) fn remove(&mut self, client: &ClientId) -> Option<Session> {
        let slot = self.find(*client).ok()?;
        Some(self.entries.remove(slot).1)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&ClientId, &Session)> {
        self.entries.iter().map(|(id, session)| (id, session))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Session> {
        self.entries.iter().map(|(_, session)| session)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Session> {
        self.entries.iter_mut().map(|(_, session)| session)
    }
}

impl std::ops::Index<&ClientId> for Sessions {
    type Output = Session;

    fn index(&self, client: &ClientId) -> &Session {
        self.get(client).expect("a session for the client")
    }
}

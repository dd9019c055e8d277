//! What the snapshots do not carry: each entity's class and who holds it, read from the scene
//! room's own keys (`rally.classes`, `rally.held`, each player's `rally.avatar`; see
//! docs/scene.md) into a table sorted by entity id, rebuilt only when one of them changes.

use crate::types::{RallyEntity, RALLY_HAND_NONE, RALLY_NONE};
use rally_scene::{
    Classes, Held, SceneEvent, SceneState, Scope, CLASSES_KEY, HAND_CLASS_INDEX, HEAD_CLASS_INDEX,
    HELD_KEY, RESERVED_KEY_PREFIX,
};

/// One entity's class and holder, as `RallyEntity` carries them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tag {
    id: u32,
    class: u32,
    holder: u32,
    hand: u8,
}

/// The class names and each tagged entity, ids ascending.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    names: Vec<String>,
    tags: Vec<Tag>,
    stale: bool,
}

impl Roster {
    /// Whether `event` changes the roster: a room key changed, or the values were reset.
    pub(crate) fn note(&mut self, event: &SceneEvent) {
        self.stale |= match event {
            SceneEvent::Changed(change) => change.key.starts_with(RESERVED_KEY_PREFIX),
            SceneEvent::Reset { .. } | SceneEvent::PlayerLeft(_) => true,
            SceneEvent::PlayerJoined(_) | SceneEvent::Relayed { .. } => false,
        };
    }

    /// The class names, by index.
    pub(crate) fn names(&mut self, scene: &SceneState) -> &[String] {
        self.refresh(scene);
        &self.names
    }

    /// A tagger for one read of the entities, with the roster brought up to date.
    pub(crate) fn tagger(&mut self, scene: &SceneState) -> Tagger<'_> {
        self.refresh(scene);
        Tagger { tags: &self.tags, at: 0 }
    }

    /// The table brought up to date, ids ascending: for a copy a [`Tagger`] reads elsewhere.
    pub(crate) fn tags(&mut self, scene: &SceneState) -> &[Tag] {
        self.refresh(scene);
        &self.tags
    }

    fn refresh(&mut self, scene: &SceneState) {
        if !std::mem::take(&mut self.stale) && !self.names.is_empty() {
            return;
        }
        let room = |key| scene.get(Scope::Room, key);
        let classes = room(CLASSES_KEY).and_then(Classes::from_bytes).unwrap_or_default();
        let held = room(HELD_KEY).and_then(Held::from_bytes).unwrap_or_default();
        let tag = |id, class: u8| Tag {
            id,
            class: class.into(),
            holder: RALLY_NONE,
            hand: RALLY_HAND_NONE,
        };
        self.tags.clear();
        self.tags.extend(classes.bodies().iter().map(|(id, class)| tag(*id, *class)));
        for avatar in scene.players().filter_map(|player| scene.avatar(player)) {
            self.tags.push(tag(avatar.head, HEAD_CLASS_INDEX));
            self.tags.push(tag(avatar.left, HAND_CLASS_INDEX));
            self.tags.push(tag(avatar.right, HAND_CLASS_INDEX));
        }
        self.tags.sort_unstable_by_key(|t| t.id);
        for (id, holder) in held.entries() {
            let at = self.tags.partition_point(|t| t.id < *id);
            if self.tags.get(at).is_none_or(|t| t.id != *id) {
                let tag = Tag { id: *id, class: RALLY_NONE, holder: 0, hand: 0 };
                self.tags.insert(at, tag);
            }
            self.tags[at].holder = holder.player;
            self.tags[at].hand = holder.hand as u8;
        }
        self.names = classes.names().to_vec();
    }
}

/// Fills the class and holder of entities, one at a time.
pub(crate) struct Tagger<'a> {
    tags: &'a [Tag],
    at: usize,
}

impl<'a> Tagger<'a> {
    /// A tagger over a table [`Roster::tags`] gave.
    pub(crate) fn over(tags: &'a [Tag]) -> Self {
        Self { tags, at: 0 }
    }

    /// Fills `entity`'s class and holder. Entities in ascending ids (as snapshots give them)
    /// take one pass over the roster; any order works, at a search each.
    pub(crate) fn tag(&mut self, entity: &mut RallyEntity) {
        let tags = self.tags;
        if tags.get(self.at).is_none_or(|t| t.id != entity.id) {
            self.at = tags.partition_point(|t| t.id < entity.id);
        }
        match tags.get(self.at).filter(|t| t.id == entity.id) {
            Some(tag) => {
                entity.class_index = tag.class;
                (entity.holder, entity.hand) = (tag.holder, tag.hand);
                self.at += 1;
            }
            None => (entity.class_index, entity.holder, entity.hand) = untagged(),
        }
    }
}

/// Class, holder and hand of an entity the room said nothing about.
fn untagged() -> (u32, u32, u8) {
    (RALLY_NONE, RALLY_NONE, RALLY_HAND_NONE)
}

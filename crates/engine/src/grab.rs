//! The grab graph: which entity holds which, at what offset.
//!
//! Each grabbable has at most one grabber; a grabber may hold many grabbables and may itself be
//! held, so holds form chains of any depth (a hand holds a paddle that holds a ball). The graph
//! is a forest: a grab that would close a cycle is refused. Poses propagate root first, in an
//! order computed when the graph changes, not every tick.

use crate::world::{EntityId, Transform, World};
use std::collections::BTreeMap;

/// Why a grab was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrabError {
    /// No entity has this id.
    #[error("no entity {0}")]
    UnknownEntity(EntityId),
    /// The grabbable already holds the grabber, directly or down a chain (or they are the same
    /// entity): the grab would make a cycle.
    #[error("entity {grabber} grabbing {grabbable} would close a cycle")]
    Cycle {
        /// The would-be grabber.
        grabber: EntityId,
        /// The would-be grabbable.
        grabbable: EntityId,
    },
    /// The room's grab rule refused it.
    #[error("the grab rule refuses entity {grabber} grabbing {grabbable}")]
    NotAllowed {
        /// The would-be grabber.
        grabber: EntityId,
        /// The would-be grabbable.
        grabbable: EntityId,
    },
}

/// A room's permission rule for grabs: who may hold what.
pub trait GrabRule: Send {
    /// Whether `grabber` may take hold of `grabbable` in `world`.
    fn allow(&self, world: &World, grabber: EntityId, grabbable: EntityId) -> bool;
}

impl<F: Fn(&World, EntityId, EntityId) -> bool + Send> GrabRule for F {
    fn allow(&self, world: &World, grabber: EntityId, grabbable: EntityId) -> bool {
        self(world, grabber, grabbable)
    }
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    grabber: EntityId,
    offset: Transform,
}

/// Holds by grabbable, and the order to propagate them in.
#[derive(Default)]
pub(crate) struct GrabGraph {
    holds: BTreeMap<EntityId, Hold>,
    /// (grabber, grabbable, offset), every grabber before what it holds; rebuilt when stale.
    order: Vec<(EntityId, EntityId, Transform)>,
    stale: bool,
    rule: Option<Box<dyn GrabRule>>,
}

impl std::fmt::Debug for GrabGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.holds.iter().map(|(g, h)| (g, h.grabber))).finish()
    }
}

impl GrabGraph {
    pub(crate) fn set_rule(&mut self, rule: Box<dyn GrabRule>) {
        self.rule = Some(rule);
    }

    pub(crate) fn check_rule(
        &self,
        world: &World,
        grabber: EntityId,
        grabbable: EntityId,
    ) -> Result<(), GrabError> {
        match &self.rule {
            Some(rule) if !rule.allow(world, grabber, grabbable) => {
                Err(GrabError::NotAllowed { grabber, grabbable })
            }
            _ => Ok(()),
        }
    }

    /// Records the hold unless it would close a cycle.
    pub(crate) fn insert(
        &mut self,
        grabber: EntityId,
        grabbable: EntityId,
        offset: Transform,
    ) -> Result<(), GrabError> {
        // Walk up from the grabber: meeting the grabbable means it already holds the grabber.
        // The walk ends within holds.len() steps because the graph is kept acyclic.
        let mut up = Some(grabber);
        while let Some(id) = up {
            if id == grabbable {
                return Err(GrabError::Cycle { grabber, grabbable });
            }
            up = self.holds.get(&id).map(|h| h.grabber);
        }
        self.holds.insert(grabbable, Hold { grabber, offset });
        self.stale = true;
        Ok(())
    }

    pub(crate) fn remove(&mut self, grabbable: EntityId) -> bool {
        let held = self.holds.remove(&grabbable).is_some();
        self.stale |= held;
        held
    }

    /// Forgets every hold that involves `id`.
    pub(crate) fn remove_entity(&mut self, id: EntityId) {
        let before = self.holds.len();
        self.holds.retain(|grabbable, hold| *grabbable != id && hold.grabber != id);
        self.stale |= self.holds.len() != before;
    }

    /// `root` and everything held under it, grabbers before what they hold.
    pub(crate) fn chain_of(&mut self, root: EntityId) -> Vec<EntityId> {
        let mut chain = Vec::new();
        self.chain_into(root, &mut chain);
        chain
    }

    /// Appends `root`'s chain to `out` ([`GrabGraph::chain_of`] without allocating when `out`
    /// has room: the fast path lists chains on every input).
    pub(crate) fn chain_into(&mut self, root: EntityId, out: &mut Vec<EntityId>) {
        if self.stale {
            self.rebuild_order();
        }
        let start = out.len();
        out.push(root);
        for (grabber, grabbable, _) in &self.order {
            if out[start..].contains(grabber) {
                out.push(*grabbable);
            }
        }
    }

    pub(crate) fn grabber_of(&self, grabbable: EntityId) -> Option<EntityId> {
        self.holds.get(&grabbable).map(|h| h.grabber)
    }

    /// Calls `f(grabber, grabbable, offset)` for every hold, each grabber before what it holds.
    pub(crate) fn for_each_in_order(&mut self, mut f: impl FnMut(EntityId, EntityId, &Transform)) {
        if self.stale {
            self.rebuild_order();
        }
        for (grabber, grabbable, offset) in &self.order {
            f(*grabber, *grabbable, offset);
        }
    }

    /// Sorts holds by depth (a hold whose grabber is free has depth 1), which puts every
    /// grabber's own hold first.
    fn rebuild_order(&mut self) {
        let depth = |mut id: EntityId| {
            let mut depth = 0usize;
            while let Some(hold) = self.holds.get(&id) {
                depth += 1;
                id = hold.grabber;
            }
            depth
        };
        let mut order: Vec<(usize, EntityId, EntityId, Transform)> = self
            .holds
            .iter()
            .map(|(grabbable, hold)| (depth(*grabbable), hold.grabber, *grabbable, hold.offset))
            .collect();
        order.sort_by_key(|(depth, _, grabbable, _)| (*depth, *grabbable));
        self.order = order.into_iter().map(|(_, a, b, offset)| (a, b, offset)).collect();
        self.stale = false;
        debug_assert!(self.is_topological(), "a grabber propagated after what it holds");
    }

    /// Whether every held grabber's own hold comes before the holds it makes: what
    /// propagating a chain of any depth in one pass relies on.
    fn is_topological(&self) -> bool {
        self.order.iter().enumerate().all(|(i, (grabber, _, _))| {
            !self.holds.contains_key(grabber)
                || self.order[..i].iter().any(|(_, held, _)| held == grabber)
        })
    }
}

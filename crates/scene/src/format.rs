//! The scene file as TOML gives it: every field optional or spanned, so that the checks in
//! [`crate::scene`] can say where a bad value is. Nothing here is trusted; nothing leaves the
//! crate.

use crate::limits::{BODIES_MAX, COLLIDERS_MAX, SPAWNS_MAX};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::marker::PhantomData;
use toml::Spanned;

/// A position, a size or a direction: three numbers.
pub(crate) type Vector = Spanned<[f32; 3]>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScene {
    pub room: Option<Spanned<RawRoom>>,
    pub colliders: Option<List<Spanned<RawCollider>, COLLIDERS_MAX>>,
    pub bodies: Option<List<Spanned<RawBody>, BODIES_MAX>>,
    pub spawns: Option<List<Spanned<RawSpawn>, SPAWNS_MAX>>,
    pub relay: Option<RawRelay>,
    pub state: Option<RawState>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRelay {
    pub message_bytes_max: Option<Spanned<u32>>,
    pub per_second: Option<Spanned<u32>>,
    pub burst: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawState {
    pub key_bytes_max: Option<Spanned<u32>>,
    pub value_bytes_max: Option<Spanned<u32>>,
    pub keys_per_scope_max: Option<Spanned<u32>>,
}

/// A list that stops decoding one entry past `MAX`, so that a hostile file cannot make the
/// checker hold more than `MAX` entries however many it lists: each raw entry is hundreds of
/// bytes, a `{}` in the file is three.
#[derive(Debug)]
pub(crate) struct List<T, const MAX: usize>(pub Vec<T>);

/// The start of the error a [`List`] gives, which [`crate::error`] recognizes.
pub(crate) const LIST_OVER: &str = "more entries than the limit of ";

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for List<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ListVisitor::<T, MAX>(PhantomData))
    }
}

struct ListVisitor<T, const MAX: usize>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for ListVisitor<T, MAX> {
    type Value = List<T, MAX>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a list of at most {MAX} entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = seq.next_element()? {
            if entries.len() == MAX {
                return Err(serde::de::Error::custom(format!("{LIST_OVER}{MAX}")));
            }
            entries.push(entry);
        }
        Ok(List(entries))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoom {
    pub tick_rate: Option<Spanned<u32>>,
    pub pipeline: Option<Spanned<RawPipeline>>,
    pub gravity: Option<Vector>,
    pub players_max: Option<Spanned<u32>>,
    pub client_bytes_per_tick_max: Option<Spanned<u32>>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawPipeline {
    Naive,
    Greedy,
    Fast,
}

/// The shape keys a collider or a body may give; exactly one of them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCapsule {
    pub radius: Spanned<f32>,
    pub height: Spanned<f32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCollider {
    pub name: Option<Spanned<String>>,
    #[serde(rename = "box")]
    pub cuboid: Option<Vector>,
    pub sphere: Option<Spanned<f32>>,
    pub capsule: Option<Spanned<RawCapsule>>,
    pub plane: Option<Vector>,
    pub hull: Option<Spanned<toml::Value>>,
    pub position: Option<Vector>,
    pub rotation_deg: Option<Vector>,
    pub friction: Option<Spanned<f32>>,
    pub restitution: Option<Spanned<f32>>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawKind {
    Dynamic,
    Kinematic,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRespawn {
    pub below_y: Spanned<f32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBody {
    pub name: Option<Spanned<String>>,
    pub kind: Option<Spanned<RawKind>>,
    #[serde(rename = "box")]
    pub cuboid: Option<Vector>,
    pub sphere: Option<Spanned<f32>>,
    pub capsule: Option<Spanned<RawCapsule>>,
    pub plane: Option<Vector>,
    pub hull: Option<Spanned<toml::Value>>,
    pub position: Option<Vector>,
    pub rotation_deg: Option<Vector>,
    pub mass_kg: Option<Spanned<f32>>,
    pub friction: Option<Spanned<f32>>,
    pub restitution: Option<Spanned<f32>>,
    pub linear_damping: Option<Spanned<f32>>,
    pub angular_damping: Option<Spanned<f32>>,
    pub class: Option<Spanned<String>>,
    pub priority: Option<Spanned<f32>>,
    pub grabbable: Option<Spanned<bool>>,
    pub takeable: Option<Spanned<bool>>,
    pub respawn: Option<Spanned<RawRespawn>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSpawn {
    pub position: Vector,
    pub yaw_deg: Option<Spanned<f32>>,
}

/// The shape keys of one collider or body, gathered to check that exactly one is given.
pub(crate) struct RawShape<'a> {
    pub cuboid: &'a Option<Vector>,
    pub sphere: &'a Option<Spanned<f32>>,
    pub capsule: &'a Option<Spanned<RawCapsule>>,
    pub plane: &'a Option<Vector>,
    pub hull: &'a Option<Spanned<toml::Value>>,
}

impl RawCollider {
    pub fn shape(&self) -> RawShape<'_> {
        RawShape {
            cuboid: &self.cuboid,
            sphere: &self.sphere,
            capsule: &self.capsule,
            plane: &self.plane,
            hull: &self.hull,
        }
    }
}

impl RawBody {
    pub fn shape(&self) -> RawShape<'_> {
        RawShape {
            cuboid: &self.cuboid,
            sphere: &self.sphere,
            capsule: &self.capsule,
            plane: &self.plane,
            hull: &self.hull,
        }
    }
}

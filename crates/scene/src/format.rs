//! The scene file as TOML gives it: every field optional or spanned, so that the checks in
//! [`crate::scene`] can say where a bad value is. Nothing here is trusted; nothing leaves the
//! crate.

use serde::Deserialize;
use toml::Spanned;

/// A position, a size or a direction: three numbers.
pub(crate) type Vector = Spanned<[f32; 3]>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScene {
    pub room: Option<Spanned<RawRoom>>,
    pub colliders: Option<Spanned<Vec<Spanned<RawCollider>>>>,
    pub bodies: Option<Spanned<Vec<Spanned<RawBody>>>>,
    pub spawns: Option<Spanned<Vec<Spanned<RawSpawn>>>>,
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

//! # rally-physics
//!
//! rapier3d rigid-body physics for a Rally room, in its own crate so that the engine does not
//! depend on a physics engine. A [`Physics`] keeps a rapier body for each entity you add and,
//! in [`Physics::step`] (call it from your [`Simulation::step`](rally_engine::Simulation)),
//! keeps the two worlds in step:
//!
//! - before the step, kinematic entities (controllers, hands) and every entity a grab holds
//!   become kinematic bodies moved to the world's pose, so that a held paddle hits the ball with
//!   the hand's motion;
//! - an entity released since the last step turns dynamic again with the velocity its grabber
//!   gave it, so what is thrown flies on; so does a dynamic entity the game moved since the
//!   last step wrote it back (grabbed and released between two steps, or placed by hand);
//! - after the step, dynamic bodies write their poses and velocities back to the world; bodies
//!   of despawned entities are removed.
//!
//! Contacts are off until [`Physics::record_contacts`] turns them on: then each step records
//! the pairs of entities whose bodies started touching ([`Physics::contacts`]), up to a limit
//! per step past which they are counted and dropped.
//!
//! ```
//! use glam::Vec3;
//! use rally_engine::{Entity, Transform, World};
//! use rally_physics::{Body, Physics};
//! use std::time::Duration;
//!
//! let mut world = World::new(16);
//! let mut physics = Physics::new(Vec3::new(0.0, -9.81, 0.0));
//! let floor = world.spawn(Entity::at(Transform::IDENTITY)).unwrap();
//! physics.add(&world, floor, Body::fixed_cuboid(Vec3::new(5.0, 0.1, 5.0))).unwrap();
//! let ball = world.spawn(Entity::at(Transform::from_position(Vec3::new(0.0, 1.0, 0.0)))).unwrap();
//! physics.add(&world, ball, Body::dynamic_ball(0.02)).unwrap();
//! for _ in 0..256 {
//!     physics.step(&mut world, Duration::from_secs(1) / 128);
//!     let y = world.get(ball).unwrap().transform.position.y;
//!     assert!(y > 0.11, "the ball stays on the floor's top (0.1) plus its radius: {y}");
//! }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use glam::Vec3;
use rally_engine::{EntityId, World};
use rapier3d::prelude::*;
use std::sync::Mutex;
use std::time::Duration;

/// How a body moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Motion {
    /// Moved by forces and contacts; written back to the world after each step.
    Dynamic,
    /// Moved by the game (inputs): follows the world's pose, pushes dynamic bodies.
    Kinematic,
    /// Never moves (floors, tables, walls).
    Fixed,
}

/// A body's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// A sphere of this radius, metres.
    Ball(f32),
    /// A box with these half extents, metres.
    Cuboid(Vec3),
    /// A capsule along the body's Y axis: the segment between its two sphere centres is
    /// `2 * half_height` long, metres.
    Capsule {
        /// Half the length of the segment between the two sphere centres, metres.
        half_height: f32,
        /// The radius of the spheres and of the cylinder between them, metres.
        radius: f32,
    },
    /// Everything on one side of a plane through the body's origin, whose outward normal is
    /// this unit vector in the body's frame: an endless floor. For [`Motion::Fixed`] bodies
    /// only (it has no finite mass).
    HalfSpace(Vec3),
}

/// What to give an entity's body.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Body {
    /// How it moves.
    pub motion: Motion,
    /// Its shape.
    pub shape: Shape,
    /// Bounciness, 0 to 1.
    pub restitution: f32,
    /// Friction coefficient.
    pub friction: f32,
    /// Kilograms per cubic metre.
    pub density: f32,
}

impl Body {
    /// A dynamic ball (a ping-pong ball is 0.02 m), bouncy.
    pub fn dynamic_ball(radius: f32) -> Self {
        Self {
            motion: Motion::Dynamic,
            shape: Shape::Ball(radius),
            restitution: 0.8,
            friction: 0.3,
            density: 80.0,
        }
    }

    /// A fixed box (a table, the floor).
    pub fn fixed_cuboid(half_extents: Vec3) -> Self {
        Self {
            motion: Motion::Fixed,
            shape: Shape::Cuboid(half_extents),
            restitution: 0.8,
            friction: 0.5,
            density: 1000.0,
        }
    }

    /// A kinematic box (a paddle in a hand, a controller).
    pub fn kinematic_cuboid(half_extents: Vec3) -> Self {
        Self {
            motion: Motion::Kinematic,
            shape: Shape::Cuboid(half_extents),
            restitution: 0.8,
            friction: 0.5,
            density: 1000.0,
        }
    }
}

/// Whether the world's `entity` differs from what the last step wrote back from `body`.
fn moved(body: &RigidBody, entity: &rally_engine::Entity) -> bool {
    let pose = body.position();
    pose.translation != entity.transform.position
        || pose.rotation != entity.transform.rotation
        || body.linvel() != entity.linear_velocity
        || body.angvel() != entity.angular_velocity
}

/// Why a body could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PhysicsError {
    /// The world has no such entity.
    #[error("no entity {0}")]
    UnknownEntity(EntityId),
    /// The entity has a body already.
    #[error("entity {0} has a body already")]
    AlreadyAdded(EntityId),
}

/// The rapier world of one room.
pub struct Physics {
    gravity: Vec3,
    parameters: IntegrationParameters,
    pipeline: PhysicsPipeline,
    islands: IslandManager,
    broad_phase: BroadPhaseBvh,
    narrow_phase: NarrowPhase,
    bodies: RigidBodySet,
    colliders: ColliderSet,
    impulse_joints: ImpulseJointSet,
    multibody_joints: MultibodyJointSet,
    soft_bodies: SoftBodySet,
    ccd: CCDSolver,
    /// Each entity's body, ascending by id: walked twice a step, where a tree's walk and its
    /// look-ups cost more than the rows' work.
    handles: Vec<Handle>,
    contacts: ContactRecorder,
    /// The last step's started contacts, taken from the recorder.
    started: Vec<(EntityId, EntityId)>,
    /// Entities whose bodies a step found despawned, kept for its allocation.
    gone: Vec<EntityId>,
}

/// An entity's body and how it moves.
#[derive(Debug, Clone, Copy)]
struct Handle {
    id: EntityId,
    body: RigidBodyHandle,
    motion: Motion,
    /// A grab held the entity when the step began (the step changes no grab): set for dynamic
    /// bodies by [`Physics::drive_kinematic`], read by [`Physics::write_back`].
    held: bool,
}

/// Collects rapier's collision events during a step (rapier hands them over through a shared
/// reference, so behind a lock), bounded by `max`.
#[derive(Debug, Default)]
struct ContactRecorder {
    max: usize,
    started: Mutex<Vec<(EntityId, EntityId)>>,
    dropped: std::sync::atomic::AtomicU64,
}

impl EventHandler for ContactRecorder {
    fn handle_collision_event(
        &self,
        _bodies: &RigidBodySet,
        colliders: &ColliderSet,
        event: CollisionEvent,
        _contact_pair: Option<&ContactPair>,
    ) {
        let CollisionEvent::Started(a, b, _) = event else { return };
        let id = |h| colliders.get(h).map(|c: &Collider| c.user_data as EntityId);
        let (Some(a), Some(b)) = (id(a), id(b)) else { return };
        // A poisoned lock means a panic elsewhere in this step; drop the contact.
        let Ok(mut started) = self.started.lock() else { return };
        if started.len() >= self.max {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        started.push((a.min(b), a.max(b)));
    }

    fn handle_contact_force_event(
        &self,
        _dt: Real,
        _bodies: &RigidBodySet,
        _colliders: &ColliderSet,
        _contact_pair: &ContactPair,
        _total_force_magnitude: Real,
    ) {
    }

    fn handle_soft_body_tear_event(&self, _soft_bodies: &SoftBodySet, _event: &SoftBodyTearEvent) {}
}

impl std::fmt::Debug for Physics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Physics").field("bodies", &self.handles.len()).finish()
    }
}

impl Physics {
    /// An empty physics world with `gravity` (metres per second squared).
    pub fn new(gravity: Vec3) -> Self {
        Self {
            gravity,
            parameters: IntegrationParameters::default(),
            pipeline: PhysicsPipeline::new(),
            islands: IslandManager::new(),
            broad_phase: BroadPhaseBvh::new(),
            narrow_phase: NarrowPhase::new(),
            bodies: RigidBodySet::new(),
            colliders: ColliderSet::new(),
            impulse_joints: ImpulseJointSet::new(),
            multibody_joints: MultibodyJointSet::new(),
            soft_bodies: SoftBodySet::new(),
            ccd: CCDSolver::new(),
            handles: Vec::new(),
            contacts: ContactRecorder::default(),
            started: Vec::new(),
            gone: Vec::new(),
        }
    }

    /// Records, from the next step on, the pairs of entities whose bodies start touching, at
    /// most `max` per step (past it they are counted in [`Physics::contacts_dropped`]); 0 turns
    /// recording off. Off by default: it costs rapier an event per touch.
    pub fn record_contacts(&mut self, max: usize) {
        self.contacts.max = max;
        let events = if max > 0 { ActiveEvents::COLLISION_EVENTS } else { ActiveEvents::empty() };
        for (_, collider) in self.colliders.iter_mut() {
            collider.set_active_events(events);
        }
    }

    /// The pairs of entities (lower id first) whose bodies started touching in the last step,
    /// in rapier's order, when [`Physics::record_contacts`] is on.
    pub fn contacts(&self) -> &[(EntityId, EntityId)] {
        &self.started
    }

    /// Contacts dropped so far for being past the limit of one step.
    pub fn contacts_dropped(&self) -> u64 {
        self.contacts.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Gives entity `id` a body, where the world has it now.
    pub fn add(&mut self, world: &World, id: EntityId, body: Body) -> Result<(), PhysicsError> {
        let entity = world.get(id).ok_or(PhysicsError::UnknownEntity(id))?;
        let Err(at) = self.find(id) else {
            return Err(PhysicsError::AlreadyAdded(id));
        };
        let builder = match body.motion {
            Motion::Dynamic => RigidBodyBuilder::dynamic(),
            Motion::Kinematic => RigidBodyBuilder::kinematic_position_based(),
            Motion::Fixed => RigidBodyBuilder::fixed(),
        };
        let pose = Pose::from_parts(entity.transform.position, entity.transform.rotation);
        let rigid = builder
            .pose(pose)
            .linvel(entity.linear_velocity)
            .angvel(entity.angular_velocity)
            // Fast balls must not tunnel through thin paddles.
            .ccd_enabled(body.motion == Motion::Dynamic)
            .build();
        let handle = self.bodies.insert(rigid);
        let collider = match body.shape {
            Shape::Ball(radius) => ColliderBuilder::ball(radius),
            Shape::Cuboid(h) => ColliderBuilder::cuboid(h.x, h.y, h.z),
            Shape::Capsule { half_height, radius } => {
                ColliderBuilder::capsule_y(half_height, radius)
            }
            Shape::HalfSpace(normal) => ColliderBuilder::new(SharedShape::halfspace(normal)),
        };
        let events = if self.contacts.max > 0 {
            ActiveEvents::COLLISION_EVENTS
        } else {
            ActiveEvents::empty()
        };
        let collider = collider
            .restitution(body.restitution)
            .friction(body.friction)
            .density(body.density)
            .user_data(u128::from(id))
            .active_events(events);
        self.colliders.insert_with_parent(collider, handle, &mut self.bodies);
        let motion = body.motion;
        self.handles.insert(at, Handle { id, body: handle, motion, held: false });
        Ok(())
    }

    /// Where entity `id`'s body is in `handles` (or would go).
    fn find(&self, id: EntityId) -> Result<usize, usize> {
        self.handles.binary_search_by_key(&id, |h| h.id)
    }

    /// Entity `id`'s body, to change.
    fn body_mut(&mut self, id: EntityId) -> Option<&mut RigidBody> {
        let at = self.find(id).ok()?;
        self.bodies.get_mut(self.handles[at].body)
    }

    /// Sets how fast entity `id`'s body loses its linear and angular velocity (rapier's damping
    /// factors, per second; 0 keeps them); returns whether it has a body.
    pub fn set_damping(&mut self, id: EntityId, linear: f32, angular: f32) -> bool {
        let Some(body) = self.body_mut(id) else {
            return false;
        };
        body.set_linear_damping(linear);
        body.set_angular_damping(angular);
        true
    }

    /// Moves entity `id`'s body to the pose and velocities the world has for it now, as when
    /// the game puts an object back where it started; returns whether it has a body.
    pub fn teleport(&mut self, world: &World, id: EntityId) -> bool {
        let (Some(entity), Some(body)) = (world.get(id), self.body_mut(id)) else {
            return false;
        };
        let pose = Pose::from_parts(entity.transform.position, entity.transform.rotation);
        body.set_position(pose, true);
        body.set_linvel(entity.linear_velocity, true);
        body.set_angvel(entity.angular_velocity, true);
        true
    }

    /// Removes entity `id`'s body; returns whether it had one.
    pub fn remove(&mut self, id: EntityId) -> bool {
        let Ok(at) = self.find(id) else { return false };
        let handle = self.handles.remove(at).body;
        self.bodies.remove(
            handle,
            &mut self.islands,
            &mut self.colliders,
            &mut self.impulse_joints,
            &mut self.multibody_joints,
            &mut self.soft_bodies,
            true,
        );
        true
    }

    /// Bodies held.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether no body is held.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Advances by `dt`: the world's kinematic and held entities drive their bodies, rapier
    /// steps, dynamic bodies write back.
    pub fn step(&mut self, world: &mut World, dt: Duration) {
        self.drive_kinematic(world);
        self.forget_despawned();
        self.parameters.dt = dt.as_secs_f32();
        self.pipeline.step(
            self.gravity,
            &self.parameters,
            &mut self.islands,
            &mut self.broad_phase,
            &mut self.narrow_phase,
            &mut self.bodies,
            &mut self.colliders,
            &mut self.impulse_joints,
            &mut self.multibody_joints,
            &mut self.soft_bodies,
            &mut self.ccd,
            &(),
            &self.contacts,
        );
        self.started.clear();
        if let Ok(mut started) = self.contacts.started.lock() {
            std::mem::swap(&mut self.started, &mut started);
        }
        self.write_back(world);
    }

    /// Removes the bodies of the entities [`Physics::drive_kinematic`] found despawned.
    fn forget_despawned(&mut self) {
        let mut gone = std::mem::take(&mut self.gone);
        for id in gone.drain(..) {
            self.remove(id);
        }
        self.gone = gone;
    }

    /// Kinematic and held entities move their bodies to the world's pose; an entity released
    /// since the last step turns dynamic with the velocity its grab gave it. The bodies of
    /// despawned entities are noted in `gone`, found by the same look-up (a walk of its own
    /// and a fresh `Vec` cost about 3,000 instructions a step for 100 bodies).
    fn drive_kinematic(&mut self, world: &World) {
        let Self { handles, bodies, gone, .. } = self;
        for Handle { id, body: handle, motion, held } in handles {
            let Some(entity) = world.get(*id) else {
                gone.push(*id);
                continue;
            };
            if *motion == Motion::Fixed {
                continue;
            }
            let Some(body) = bodies.get_mut(*handle) else {
                continue;
            };
            let pose = Pose::from_parts(entity.transform.position, entity.transform.rotation);
            *held = *motion == Motion::Dynamic && world.grabber_of(*id).is_some();
            let held = *held;
            match motion {
                Motion::Kinematic => body.set_next_kinematic_position(pose),
                Motion::Dynamic if held => {
                    if body.body_type() != RigidBodyType::KinematicPositionBased {
                        body.set_body_type(RigidBodyType::KinematicPositionBased, true);
                    }
                    body.set_next_kinematic_position(pose);
                }
                Motion::Dynamic if body.body_type() != RigidBodyType::Dynamic => {
                    body.set_body_type(RigidBodyType::Dynamic, true);
                    body.set_position(pose, true);
                    body.set_linvel(entity.linear_velocity, true);
                    body.set_angvel(entity.angular_velocity, true);
                }
                Motion::Dynamic if moved(body, entity) => {
                    // The game moved it since the last step wrote it back: a grab and its
                    // release between two steps (the body never turned kinematic), or a pose
                    // set by hand. The world's pose and velocity win, as on a release.
                    body.set_position(pose, true);
                    body.set_linvel(entity.linear_velocity, true);
                    body.set_angvel(entity.angular_velocity, true);
                }
                Motion::Dynamic | Motion::Fixed => {}
            }
        }
    }

    /// Dynamic bodies that nothing holds write their pose and velocities to the world.
    ///
    /// Only a body that moved is written: the world marks every row it lends for change, and
    /// replicate compares each marked row with the last snapshot, so a body at rest (asleep)
    /// lent every tick would be paid for as if it moved. Only a sleeping body is compared: an
    /// awake one has moved (integrated under gravity and contacts), and comparing it cost
    /// a second look-up and the compare for nothing; the few that came to rest awake are
    /// lent, and replicate's own compare keeps their codes.
    fn write_back(&self, world: &mut World) {
        for &Handle { id, body: handle, motion, held } in &self.handles {
            if motion != Motion::Dynamic || held {
                continue;
            }
            let Some(body) = self.bodies.get(handle) else {
                continue;
            };
            if body.is_sleeping() && !world.get(id).is_some_and(|entity| moved(body, entity)) {
                continue;
            }
            let Some(entity) = world.get_mut(id) else {
                continue;
            };
            let pose = body.position();
            entity.transform.position = pose.translation;
            entity.transform.rotation = pose.rotation;
            entity.linear_velocity = body.linvel();
            entity.angular_velocity = body.angvel();
        }
    }
}

//! # rally-scene
//!
//! Rooms without server code. A *scene* is a TOML file that describes an authoritative XR room:
//! its settings (tick rate, pipeline, gravity, players, byte budget), the static colliders that
//! never move (floors, tables, walls), the bodies that do (balls, paddles, blocks; dynamic or
//! kinematic, grabbable or not, with a respawn rule), and where players appear. docs/scene.md
//! is the format's reference, field by field.
//!
//! ```toml
//! [room]
//! tick_rate = 120
//!
//! [[colliders]]
//! name = "floor"
//! plane = [0, 1, 0]
//!
//! [[bodies]]
//! name = "ball"
//! sphere = 0.1
//! position = [0, 1, 0]
//! respawn = { below_y = -5 }
//! ```
//!
//! ## Loading a scene
//!
//! [`Scene::load`] reads a file and [`Scene::parse`] checks text; both give a [`Scene`] whose
//! every value is within its range, or an error. Nothing is clamped or guessed: a value out of
//! range is refused with its place and the range that would fix it. A [`Scene`] only comes from
//! these two, so holding one means holding a checked scene.
//!
//! ```
//! use rally_scene::Scene;
//!
//! let scene = Scene::parse("ball.toml", "[[bodies]]\nsphere = 0.1\nposition = [0, 1, 0]\n")?;
//! assert_eq!(scene.bodies().len(), 1);
//! assert_eq!(scene.spawns().len(), 1, "with no spawn point given, players appear at the origin");
//!
//! let err = Scene::parse("ball.toml", "[[bodies]]\nsphere = -1\n").unwrap_err();
//! assert_eq!(err.field(), Some("bodies[0].sphere"));
//! assert_eq!(err.to_string(), "ball.toml:2:10: bodies[0].sphere: -1 is out of range; \
//!     fix: give a value from 0.001 to 1000");
//! # Ok::<(), rally_scene::SceneError>(())
//! ```
//!
//! ## Building a room
//!
//! [`SceneRoom::new`] spawns a scene's colliders and bodies into a [`World`](rally_engine::World)
//! with rapier bodies (through rally-physics), and as a [`Simulation`](rally_engine::Simulation)
//! steps physics and applies the respawn rules each tick. [`scene_room`] makes the whole
//! [`Room`](rally_engine::Room) with the scene's settings ([`Scene::room_config`]) and its grab
//! rule ([`SceneGrabRule`]: only `grabbable` bodies may be held, and only `takeable` ones taken
//! from another hand). A Rust game
//! can wrap a [`SceneRoom`] in its own `Simulation` and call its `step`.
//!
//! ```
//! use rally_engine::{Simulation, World};
//! use rally_scene::{Scene, SceneRoom};
//! use std::time::Duration;
//!
//! let text = "[[colliders]]\nplane = [0, 1, 0]\n[[bodies]]\nname = \"ball\"\nsphere = 0.1\n\
//!             position = [0, 1, 0]\n";
//! let scene = Scene::parse("ball.toml", text)?;
//! let mut world = World::new(scene.entities_max());
//! let mut room = SceneRoom::new(&scene, &mut world)?;
//! for _ in 0..240 {
//!     room.step(&mut world, Duration::from_secs(1) / 120);
//! }
//! let ball = room.entity("ball").unwrap();
//! let y = world.get(ball).unwrap().transform.position.y;
//! assert!((0.09..0.12).contains(&y), "the ball rests on the floor: {y}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Errors
//!
//! One enum, [`SceneError`], for everything a scene file can do wrong, in four classes:
//!
//! - [`SceneError::Read`]: the file could not be read;
//! - [`SceneError::TooLarge`]: the file is over [`limits::FILE_BYTES_MAX`];
//! - [`SceneError::Syntax`]: not TOML, or not a scene's shape (an unknown field, a value of the
//!   wrong type, a missing field, a list longer than its limit, a value nested too deep), with
//!   the TOML reader's message;
//! - [`SceneError::Invalid`]: a value out of its range ([`limits`]), or one that contradicts
//!   another (two shapes, a duplicate name, a respawn height above the start).
//!
//! The last two carry a [`Location`] (file, line, column) and name the field as a path
//! (`bodies[2].mass_kg`), and every variant's message ends with what would fix it. Scene files
//! are untrusted: no input makes the parser panic (a test cuts an example scene at every byte
//! and parses each piece; a property test damages one at random), nesting is bounded by the
//! TOML reader's recursion limit, and each list stops decoding one entry past its limit, so
//! that what a file makes the checker hold is bounded by the file's size limit (a 1 MiB file
//! of empty list entries peaks at about 73 MB in a debug build, the TOML reader's own tree).
//! [`SceneRoomError`] is the room builder's: the engine refused the settings, or the world or
//! physics refused an entity.
//!
//! ## The standard XR input
//!
//! [`XrInput`] is what every XR client sends a scene room: the head's pose, each hand's pose,
//! grip and trigger, and at most [`GAME_BYTES_MAX`] opaque bytes. It is a scene room's
//! [`Simulation::Input`](rally_engine::Simulation::Input) and travels in the engine's input
//! frames (postcard; docs/scene.md gives the bytes); [`XrPose::transform`] refuses a pose that
//! is not one.
//!
//! ## Relayed messages and key-value state
//!
//! [`SceneMessage`] is a scene room's [`Simulation::Message`](rally_engine::Simulation::Message):
//! clients relay opaque bytes to each other through the room (to all, to all but the sender, to
//! one; reliable or not), and write keys with opaque values in the room's scope or their own
//! player's. The host calls [`handle_event`] with every room event: it passes relays on stamped
//! with the sender, orders the writes (last writer wins, in the room's arrival order) and
//! broadcasts each reliably, brings a joiner the players and the current values, and removes a
//! leaver's scope; after each tick the host calls [`resend_missed`], which sends everything
//! again to a player that missed a change because the room's outbox was full. The room's own
//! code relays with [`relay_from_room`] and writes with [`write_key`]. Limits
//! ([`StateSettings`], a scene's `[relay]` and `[state]`) hold on sizes, key counts and each
//! client's rate (a token bucket in room ticks); every refusal is counted in [`StateStats`]
//! ([`SceneRoom::state`]) and reaches no one.
//!
//! A client keeps a [`SceneState`], fed its session's events, which holds the players and
//! values and yields [`SceneEvent`]s in the room's order.
//!
//! ```
//! use rally_engine::{ClientEvent, RoomEvent};
//! use rally_scene::{handle_event, scene_room, Scene, SceneMessage, SceneState, Scope, WriteScope};
//!
//! let scene = Scene::parse("room.toml", "[state]\nkeys_per_scope_max = 8\n")?;
//! let mut room = scene_room(&scene, 7)?;
//! handle_event(&mut room, RoomEvent::Joined(1));
//! let write = SceneState::write(WriteScope::Room, "phase", Some(b"serve".to_vec()));
//! handle_event(&mut room, RoomEvent::Message { client: 1, message: write });
//! assert_eq!(room.simulation().state().get(Scope::Room, "phase"), Some(&b"serve"[..]));
//!
//! // A client's mirror applies what the room broadcasts.
//! let mut mirror = SceneState::new();
//! let change = rally_scene::Change {
//!     scope: Scope::Room,
//!     key: "phase".into(),
//!     value: Some(b"serve".to_vec()),
//! };
//! mirror.handle(&ClientEvent::Message(SceneMessage::Values { changes: vec![change] }));
//! assert_eq!(mirror.get(Scope::Room, "phase"), Some(&b"serve"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The standard XR player
//!
//! Each player who joins gets an [`Avatar`]: a head ([`HEAD_CLASS`]) and two hands
//! ([`HAND_CLASS`], kinematic balls that push what they touch), spawned at the first free spawn
//! point ([`SceneRoom::avatar`] finds them; the room writes them in the player's scope under
//! [`AVATAR_KEY`], so every client knows whose hands are whose: [`SceneState::avatar`]; in the
//! room's scope it writes each body's class under [`CLASSES_KEY`] and who holds what under
//! [`HELD_KEY`], read back with [`Classes`] and [`Held`]). Each input moves them to its poses
//! (a bad pose keeps the last one and is counted) and measures each hand's velocity from its
//! poses' arrival times ([`HAND_VELOCITY_WINDOW`]). A grip pressed past [`GRIP_HOLD_MIN`] grabs
//! the nearest grabbable body within the scene's `[player] grab_radius_m` ([`PlayerSettings`])
//! through the world's grab graph, so what it holds follows, chains included, and a handoff
//! from another hand follows `takeable`; releasing lets go and the body flies on with the hand's
//! velocity. A player who leaves lets go and its avatar is despawned. With
//! [`Pipeline::Fast`](rally_engine::Pipeline), the room's fast path sends the head, both hands
//! and what they hold on every input
//! ([`Simulation::driven_into`](rally_engine::Simulation::driven_into)). Refusals are counted in
//! [`SceneStats`] ([`SceneRoom::stats`]); nothing a client sends panics.
//!
//! ## Hooks
//!
//! A Rust game adds rules without writing a `Simulation`: [`SceneRoom::set_hooks`] takes a
//! [`SceneHooks`], whose methods (join, leave, grab, release, contact, input, step) do nothing
//! unless overridden. Contacts come from rapier's collision events through rally-physics, at
//! most [`CONTACTS_PER_STEP_MAX`] per step.
//!
//! ## Not yet
//!
//! Convex hulls (`hull = [...]` is refused with a message saying so); a layout of
//! [`SceneMessage`] that a client in another language can write from the docs (the message
//! codec, bitcode, has none; docs/scene.md proposes one).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
mod format;
mod hooks;
mod input;
pub mod limits;
mod mirror;
mod player;
mod room;
mod roster;
mod scene;
mod state;

pub use error::{Location, SceneError};
pub use hooks::SceneHooks;
pub use input::{GameBytes, Hand, XrHand, XrInput, XrPose, GAME_BYTES_MAX, GRIP_HOLD_MIN};
pub use mirror::{SceneEvent, SceneState, MIRROR_EVENTS_MAX, MIRROR_KEYS_MAX};
pub use player::{
    Avatar, SceneStats, AVATAR_BYTES, HAND_CLASS, HAND_RADIUS_M, HAND_VELOCITY_WINDOW, HEAD_CLASS,
};
pub use room::{scene_room, SceneGrabRule, SceneRoom, SceneRoomError, CONTACTS_PER_STEP_MAX};
pub use roster::{
    Classes, Held, Holder, CLASSES_BYTES_MAX, CLASSES_KEY, CLASSES_MAX, HAND_CLASS_INDEX,
    HEAD_CLASS_INDEX, HELD_BYTES_MAX, HELD_KEY,
};
pub use scene::{
    Body, BodyKind, BodyShape, Collider, ColliderShape, Grab, Name, PlayerSettings, Respawn,
    RoomSettings, Scene, SpawnPoint, CLASS_DEFAULT, DENSITY_DEFAULT, FRICTION_DEFAULT,
    GRAB_RADIUS_DEFAULT_M, RESTITUTION_DEFAULT,
};
pub use state::{
    handle_event, relay_from_room, resend_missed, write_key, Change, RelayTarget, RoomState,
    SceneMessage, Scope, StateError, StateSettings, StateStats, WriteScope, AVATAR_KEY,
    RESERVED_KEY_PREFIX,
};

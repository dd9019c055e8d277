//! # rally-engine
//!
//! Rally's game layer, sans-IO: a [`Room`] owns one authoritative [`World`] and advances it one
//! tick at a time in explicit [`Phase`]s; a [`ClientSession`] is a player's view of a room. Both
//! sit on a `rally-proto` [`Endpoint`](rally_proto::Endpoint) that the caller owns and drives;
//! neither reads a clock or touches a socket.
//!
//! ## The tick (docs/design.md, section 4)
//!
//! Nothing waits for the next tick. [`Room::receive`] applies an input to the world the moment
//! the caller hands it over; [`Room::tick`] then runs [`PHASES`] in order: *ingest* (sessions
//! and requests expire), *interact* (grabbed entities follow their grabbers down every grab
//! chain, root first), *simulate* (the game's [`Simulation::step`], physics included),
//! *replicate* (the world is quantized once; each client gets a snapshot built for it) and
//! *transmit* (everything goes to the endpoint in this tick).
//!
//! ## Replication
//!
//! Each client's snapshot is a delta against the last one it acknowledged (its input frames
//! carry the acknowledgement), so a lost snapshot costs nothing but the next delta's size.
//! A per-client byte budget per tick bounds it: changes that do not fit wait, with a priority
//! that grows every tick they wait (by the entity's `priority` weight), so a burst of changes
//! or a late join spreads over a few ticks instead of queueing. Spawns and despawns are records
//! of the same snapshots, so they are as reliable as the state (a delta is always against what
//! the client acknowledged) and can never be reordered with the state they refer to. When all a
//! client misses fits, it is sent the room's own snapshot, encoded once per baseline tick for
//! every client on that baseline. See [`replication`].
//!
//! The world keeps track of the entities it lent to change ([`World::get_mut`],
//! [`World::get_many_mut`], [`World::iter_mut`], grabs following their grabbers): between
//! spawns and despawns, replicate compares only those with last tick's states, so bodies at
//! rest cost nothing a tick. Change entities through these calls (every `&mut Entity` comes
//! from one of them); one lent and left unchanged is simply found unmoved.
//!
//! ## Sessions
//!
//! A client joins with a hello on its connection and gets a [`SessionTicket`]. If its
//! connection drops, it reconnects (from a new socket) and presents the ticket: within
//! [`RoomConfig::resume_window`] the room resumes its session (its id, its entities, its input
//! sequence) and brings its state up to date; a ticket on a new connection also takes over
//! from an old connection the room had not yet seen close.
//!
//! ## Inputs and RPC
//!
//! A client sends each input the moment it is sampled, with every earlier input the room has
//! not yet reported applied (each snapshot says the last input applied), so a lost packet
//! costs no input (frames are postcard-encoded: they come from every client every tick; the
//! room reads each input with [`Simulation::decode_input`], serde's by default, which a game
//! whose input has a fixed layout may replace with a direct read of the same bytes). RPCs
//! are the game's own serde type, both ways, reliable or unreliable, to one client, all, or all
//! but one; requests get responses matched by id, or time out.
//!
//! ## Latency and interpolation
//!
//! Every client session has a total-latency meter ([`latency`]): each input is timed from the
//! moment it was sampled to the first frame that presents its effect, on the client's clock,
//! and split into the network's round trip, the server's hold (which each snapshot reports)
//! and the client's wait for its frame, so that each sample can be judged against the
//! [`LatencyModel`] of the round trip it saw. [`Pipeline::Fast`] sends the poses an input moves
//! the moment it arrives, so the hold is zero and every sample sits at the model's floor; a
//! frame that brings no new input (a resend, a duplicate) sends nothing. What an input moves is
//! the game's to say: [`Simulation::driven`] names one controller, and
//! [`Simulation::driven_into`] several (an XR player's head and two hands); the grab chains
//! under all of them go out in one fast message. [`Simulation::apply_input_at`] gives the game
//! each input's arrival time, for motion measured from inputs (a hand's velocity).
//!
//! Remote entities can be shown through [`ClientSession::interpolated`] ([`interpolation`]): a
//! buffer per [`ObjectClass`] sized to the jitter measured on that class's updates, zero on a
//! link without jitter, with bounded extrapolation past the newest update;
//! [`ClientSession::interpolated_entities`] gives a whole frame's in one pass.
//!
//! ## Physics
//!
//! [`Simulation::step`] is the game's; `rally-physics` puts rapier3d behind it, so that this
//! crate depends on no physics engine.
//!
//! ## Bad input and limits
//!
//! A message that fails to decode, arrives on an unknown channel or before the hello, or
//! breaks a limit is dropped and counted in [`RoomStats`] / [`ClientStats`]; the room and the
//! other clients carry on. What an input means (an unknown entity, a forbidden grab) is the
//! game's to judge: [`World`] refuses bad grabs with a [`GrabError`].
//!
//! Everything a peer can make a room or a session hold has a named limit in its config:
//! clients (`clients_max`: one more is refused with `ServerFull`), inputs per frame, queued
//! messages and pending requests (`outbox_max`, `requests_max`: one more is
//! [`RpcError::Full`]), events waiting for the game to poll (`events_max`: peers' messages
//! past it are dropped and counted; the room's own events always queue), inputs kept for
//! resending and entities ([`WorldError::Full`]). [`Room::new`] and [`ClientSession::new`]
//! check every setting against its range ([`RoomConfig::validate`],
//! [`ClientConfig::validate`]) and refuse one outside it with a [`ConfigError`] naming the
//! field and the range; nothing is clamped. Debug builds assert, after each message and each
//! phase, that every bounded collection is within its limit.
//!
//! ## A room and a client on one screen
//!
//! ```
//! use rally_engine::{ClientConfig, ClientEvent, ClientSession, Room, RoomConfig, Simulation};
//! use rally_engine::{Entity, Transform, World, connection_config};
//! use rally_proto::{EndpointConfig, Event};
//! use rally_sim::{Pair, VirtualClock};
//! use std::time::Duration;
//!
//! /// The game: each input moves the client's hand.
//! struct Game;
//! impl Simulation for Game {
//!     type Input = [f32; 3];
//!     type Message = String;
//!     fn apply_input(&mut self, world: &mut World, _client: u32, input: &[f32; 3]) {
//!         if let Some(hand) = world.get_mut(1) {
//!             hand.transform.position = (*input).into();
//!         }
//!     }
//!     fn step(&mut self, _world: &mut World, _dt: Duration) {}
//! }
//!
//! let endpoint = EndpointConfig { connection: connection_config(), ..Default::default() };
//! let mut net = Pair::new(endpoint, rally_netem::LinkConfig::default(), 7);
//! let (client, server) = net.connect(Duration::from_secs(1)).unwrap();
//! let mut room = Room::new(RoomConfig::default(), Game, 1).unwrap();
//! room.world_mut().spawn(Entity::at(Transform::IDENTITY)).unwrap();
//! room.accept(server);
//! let mut session: ClientSession<[f32; 3], String> =
//!     ClientSession::new(ClientConfig::default()).unwrap();
//! session.connected(client);
//!
//! let (mut seen_client, mut seen_server) = (0, 0);
//! for _ in 0..20 {
//!     session.send_input(net.now(), [0.5, 1.0, 0.0]);
//!     session.transmit(net.client());
//!     let now = net.now();
//!     room.tick(now, net.server());
//!     net.step_until(now + room.config().dt());
//!     for (_, event) in &net.server_events()[seen_server..] {
//!         if let Event::Message { channel, payload } = event {
//!             room.receive(net.now(), server, *channel, payload);
//!         }
//!     }
//!     seen_server = net.server_events().len();
//!     for (_, event) in &net.client_events()[seen_client..] {
//!         if let Event::Message { channel, payload } = event {
//!             session.receive(net.now(), *channel, payload);
//!         }
//!     }
//!     seen_client = net.client_events().len();
//! }
//! let hand = session.entities().next().unwrap();
//! assert!((hand.position.x - 0.5).abs() < 0.001);
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
pub mod config;
pub mod grab;
pub mod interpolation;
pub mod latency;
pub mod protocol;
pub mod replication;
pub mod room;
pub mod rpc;
pub mod world;

pub use client::{ClientConfig, ClientEvent, ClientSession, ClientStats};
pub use config::ConfigError;
pub use grab::{GrabError, GrabRule};
pub use interpolation::{
    Interpolated, InterpolationConfig, Interpolator, ObjectClass, RenderFrame, Resting,
};
pub use latency::{LatencyMeter, LatencyModel, LatencySample, PresentedFrames, Verdict};
pub use protocol::{connection_config, SessionTicket, FAST, RELIABLE, STATE, UNRELIABLE};
pub use room::{
    ClientId, Phase, PhaseObserver, Pipeline, Room, RoomConfig, RoomEvent, RoomStats, RpcError,
    Simulation, Target, PHASES,
};
pub use rpc::{Delivery, RequestId};
pub use world::{Entity, EntityId, Transform, World, WorldError};

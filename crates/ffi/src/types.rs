//! The `#[repr(C)]` types of the C ABI: what include/rally.h declares.

use std::os::raw::c_char;

/// What every call returns. `RALLY_STATUS_OK` is 0; on any other code,
/// `rally_last_error` gives the message.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RallyStatus {
    /// Done.
    Ok = 0,
    /// A pointer argument was null.
    NullPointer = 1,
    /// An output buffer was too small; the size needed was written to the count argument.
    BufferTooSmall = 2,
    /// An argument was out of range.
    InvalidArgument = 3,
    /// The connect token is malformed, expired, or does not name the address.
    InvalidToken = 4,
    /// Not connected (or not joined yet, for room messages).
    NotConnected = 5,
    /// The connection ended: the message says why and names the server's address.
    Disconnected = 6,
    /// The client was closed; only `rally_client_destroy` may follow.
    Closed = 7,
    /// The socket failed.
    Io = 8,
    /// The session refused a message (too large, or too many waiting).
    Refused = 9,
    /// A bug in the library was caught at the boundary; the client should be destroyed.
    Panic = 10,
}

/// A client's settings; `rally_config_default` fills the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RallyConfig {
    /// The local address to bind, "ip:port" (NUL-terminated), or NULL for any port on all
    /// interfaces.
    pub bind_address: *const c_char,
    /// The display's frame time, microseconds (11111 at 90 Hz): the latency model's frame.
    pub frame_us: u32,
    /// Whether to buffer entities for `rally_client_entities_at` (interpolation). Off saves
    /// work per entity per snapshot for a game that interpolates itself.
    pub interpolate: bool,
    /// A `RallyIoThread`: whether the library runs a thread of its own that owns the socket
    /// and the session, so that the game thread's calls do no socket work. Off (0) by
    /// default. (An integer so that no value from C is undefined behaviour: another value is
    /// refused.)
    pub io_thread: u32,
}

/// Who does the socket work (`RallyConfig::io_thread`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RallyIoThread {
    /// No thread: `rally_client_update` reads and writes the socket on the caller's thread.
    Off = 0,
    /// A thread of the library's waits on the socket, decodes and updates the session, and
    /// publishes a copy of what a frame reads: `rally_client_update`, the reads, the events
    /// and the present touch no socket and take no lock. An input still leaves at once,
    /// written to the socket by the thread that sends it (one `sendmmsg`), so that it never
    /// waits for the I/O thread to be scheduled; that send needs the session, and can wait
    /// while the I/O thread decodes.
    On = 1,
    /// As `On`, but an input is handed to the I/O thread, which sends it: less CPU on the
    /// game thread, no call of a frame ever waits for the I/O thread, and each input waits for
    /// that thread to run. The I/O thread expects an input once a frame (`frame_us`) and looks
    /// for it around its due time (about 2% of a core at 90 Hz), so that most inputs need no
    /// wake; one outside that window is woken for (an `eventfd` write on the caller's thread).
    Wake = 2,
}

/// A pose: position in metres, rotation a quaternion (x, y, z, w), in the room's frame.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RallyPose {
    /// Metres.
    pub position: [f32; 3],
    /// x, y, z, w.
    pub rotation: [f32; 4],
}

/// One hand: its pose and how far grip and trigger are pressed (0 to 255; grip from 128
/// holds).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RallyHand {
    /// The hand's pose.
    pub pose: RallyPose,
    /// 0 released, 255 fully pressed.
    pub grip: u8,
    /// 0 released, 255 fully pressed.
    pub trigger: u8,
}

/// Opaque game bytes in one input at most.
pub const RALLY_GAME_BYTES_MAX: usize = 32;

/// The standard XR input of scene rooms: head, both hands (left, right), game bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RallyXrInput {
    /// The headset.
    pub head: RallyPose,
    /// Left, then right.
    pub hands: [RallyHand; 2],
    /// Opaque bytes for the game; the first `game_len` count.
    pub game: [u8; RALLY_GAME_BYTES_MAX],
    /// How many of `game` count, at most `RALLY_GAME_BYTES_MAX`.
    pub game_len: u8,
}

/// An entity as the client shows it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RallyEntity {
    /// Unique in its room.
    pub id: u32,
    /// Metres.
    pub position: [f32; 3],
    /// A unit quaternion, x, y, z, w.
    pub rotation: [f32; 4],
    /// Metres a second.
    pub linear_velocity: [f32; 3],
    /// Radians a second.
    pub angular_velocity: [f32; 3],
    /// Its class, an index into the room's class names (`rally_client_class_name`): of a
    /// scene room, the scene's `class`, or "head" (0) and "hand" (1) for players' avatars;
    /// `RALLY_NONE` while the room has not said (or for a room that does not).
    pub class_index: u32,
    /// The player whose hand holds it, or `RALLY_NONE`.
    pub holder: u32,
    /// Which of the holder's hands: `RALLY_HAND_LEFT` or `RALLY_HAND_RIGHT`; `RALLY_HAND_NONE`
    /// when not held.
    pub hand: u8,
}

/// No class, no holder: what `RallyEntity` says when the room has not told.
pub const RALLY_NONE: u32 = u32::MAX;
/// `RallyEntity::hand`: the left hand.
pub const RALLY_HAND_LEFT: u8 = 0;
/// `RallyEntity::hand`: the right hand.
pub const RALLY_HAND_RIGHT: u8 = 1;
/// `RallyEntity::hand`: not held.
pub const RALLY_HAND_NONE: u8 = 255;

/// Which event `rally_client_poll_event` gave.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RallyEventKind {
    /// No event waits.
    None = 0,
    /// The room accepted this client: `client` is its id, `resumed` whether an earlier
    /// session continued.
    Joined = 1,
    /// Player `client` is in the room.
    PlayerJoined = 2,
    /// Player `client` left.
    PlayerLeft = 3,
    /// A relayed message from `client` (`RALLY_ROOM` for the room): `data_len` bytes.
    Relayed = 4,
    /// A key changed: in the room's scope (`room_scope`) or player `client`'s; the data holds
    /// `key_len` bytes of key (UTF-8, no NUL) then the value; `has_value` false: removed.
    Changed = 5,
    /// The connection ended: `reason` says why; the next calls return
    /// `RALLY_STATUS_DISCONNECTED` with a message naming the server.
    Disconnected = 6,
}

/// Why a connection ended.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RallyDisconnectReason {
    /// Not a disconnection event.
    NotDisconnected = 0,
    /// Closed by either side.
    Closed = 1,
    /// Nothing heard for the token's timeout (a server that never answered included).
    TimedOut = 2,
    /// The peer broke the protocol.
    PeerMisbehaved = 3,
    /// The server had no room for another connection.
    ServerFull = 4,
    /// The server shut down.
    ServerShutdown = 5,
    /// The room failed and was closed.
    RoomFailed = 6,
    /// The library's I/O thread stopped (a socket error, or a bug caught there): the event's
    /// data holds what happened, as text.
    Failed = 7,
    /// A reason this version does not know.
    Unknown = 255,
}

/// The `client` of an event that comes from the room itself, not from a player.
pub const RALLY_ROOM: u32 = u32::MAX;

/// One event; its bytes (relay payload, or key then value) go to the caller's data buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RallyEvent {
    /// Which event; `RALLY_EVENT_KIND_NONE` when none waits.
    pub kind: RallyEventKind,
    /// The client the event is about (see the kinds), or `RALLY_ROOM`.
    pub client: u32,
    /// Joined: whether an earlier session continued.
    pub resumed: bool,
    /// Changed: the room's scope rather than a player's.
    pub room_scope: bool,
    /// Changed: false when the key was removed.
    pub has_value: bool,
    /// Changed: the key's bytes at the start of the data.
    pub key_len: u32,
    /// The bytes written to the data buffer.
    pub data_len: u32,
    /// Disconnected: why.
    pub reason: RallyDisconnectReason,
}

impl Default for RallyEvent {
    /// No event: what `rally_client_poll_event` gives when none waits.
    fn default() -> Self {
        Self {
            kind: RallyEventKind::None,
            client: RALLY_ROOM,
            resumed: false,
            room_scope: false,
            has_value: false,
            key_len: 0,
            data_len: 0,
            reason: RallyDisconnectReason::NotDisconnected,
        }
    }
}

/// Who a relayed message goes to.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RallyRelayTarget {
    /// Everyone, the sender included.
    All = 0,
    /// Everyone but the sender.
    Others = 1,
    /// One player, named by the `to` argument.
    One = 2,
}

/// The latency meter: input sampled to the frame presenting its effect, over the newest
/// samples kept (4096), against the W2 model for this link (docs/design.md).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RallyLatency {
    /// Samples measured since the start.
    pub samples: u64,
    /// Mean of the samples kept, microseconds.
    pub mean_us: u64,
    /// 99th percentile of the samples kept, microseconds.
    pub p99_us: u64,
    /// Share (0 to 1) of the samples kept within the model for each sample's own round trip,
    /// with 1 ms of slack, on the frames the game presented (`rally_client_present`'s times,
    /// each frame started at the time its `rally_client_update` was given): shown no later
    /// than the first frame started a round trip and a tick after the input was sampled.
    /// (On a steady frame that is at most L_worst; a frame that starts late does not count
    /// against it.) A sample shown sooner than its best frame counts within: with an I/O
    /// thread a frame can show its own input's answer, under one frame.
    pub within_model: f64,
    /// The model's L_best for the newest sample's round trip, the frame and the room's tick,
    /// microseconds (0 before the first sample).
    pub best_us: u64,
    /// The model's L_worst for the newest sample, microseconds.
    pub worst_us: u64,
    /// Share (0 to 1) of the samples kept after the model's worst frame and the slack: the
    /// late ones, the only ones outside `within_model`.
    pub above_model: f64,
    /// Share (0 to 1) of the samples kept shown by the first frame started a round trip
    /// after their input was sampled, or sooner, with 1 ms of slack: at L_best. A fast-path room's
    /// target is every sample (the server holds no input); a greedy room's lie between this
    /// and `within_model`.
    pub at_best: f64,
}

/// The connection's figures and the session's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RallyConnectionStats {
    /// This client's id once joined, else `UINT64_MAX`.
    pub client_id: u64,
    /// Joined and connected.
    pub joined: bool,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u64,
    /// Mean deviation of the round-trip time (jitter), microseconds.
    pub jitter_us: u64,
    /// Packet loss estimate, 0 to 1.
    pub loss: f64,
    /// Datagrams sent.
    pub packets_sent: u64,
    /// Datagrams received and accepted.
    pub packets_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Snapshots applied.
    pub snapshots: u64,
    /// Events dropped because too many waited unpolled.
    pub events_dropped: u64,
    /// With the I/O thread on: the calls that found it holding the client (decoding a
    /// snapshot, say) and waited for it. A frame's calls never do but `On`'s input.
    pub io_lock_waits: u64,
    /// With the I/O thread on: the time those calls waited, microseconds in all.
    pub io_lock_wait_us: u64,
}

/// `RallyFrame::present_us`: the frame is presented when the call ends, on the library's
/// clock (read then).
pub const RALLY_PRESENT_NOW: u64 = u64::MAX;

/// A whole frame for `rally_client_frame`, one call: what goes in (the time, the input, the
/// presents, the caller's arrays) and what comes out (the counts). Zero it, point the arrays
/// at the caller's own, and keep it from frame to frame; set the input and times each frame.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RallyFrame {
    /// In and out: the frame's time on the library's clock, the input's sampling time; 0 to
    /// have the call read the clock, which it writes back here.
    pub now_us: u64,
    /// In: the time the read interpolates at; 0 for `now_us`.
    pub at_us: u64,
    /// In: when the previous frame (the one the previous call read) was presented, told to
    /// the latency meter before anything else; 0 for none.
    pub presented_us: u64,
    /// In: when this frame, showing what this call read, will be presented (XR's predicted
    /// display time, say), told at the call's end; `RALLY_PRESENT_NOW` for the call's end
    /// itself, 0 for none (the game tells it by `presented_us` or `rally_client_present`).
    pub present_us: u64,
    /// In: the standard XR input to send, or null.
    pub xr_input: *const RallyXrInput,
    /// In: the room's own input bytes to send (as `rally_client_send_input_bytes`), or null;
    /// not with `xr_input`.
    pub input_bytes: *const u8,
    /// In: the number of `input_bytes`.
    pub input_len: usize,
    /// In: the caller's array for the events; null: none taken this frame.
    pub events: *mut RallyEvent,
    /// In: the events `events` has room for.
    pub events_capacity: usize,
    /// Out: the events written, in the room's order.
    pub events_count: usize,
    /// In: the caller's buffer for the events' bytes, one event's after another's (each
    /// event's `data_len` says its share); null with 0 takes only events without bytes.
    pub event_data: *mut u8,
    /// In: the bytes `event_data` has room for.
    pub event_data_capacity: usize,
    /// Out: the data bytes written; or, with `RALLY_STATUS_BUFFER_TOO_SMALL` and no event
    /// taken, the bytes the next event needs.
    pub event_data_len: usize,
    /// In: the caller's array for the entities; null: no read this frame.
    pub entities: *mut RallyEntity,
    /// In: the entities `entities` has room for.
    pub entities_capacity: usize,
    /// Out: the entities written, as `rally_client_entities_at` counts them (the number
    /// needed, with `RALLY_STATUS_BUFFER_TOO_SMALL`).
    pub entities_count: usize,
    /// Out: whether events still wait (the arrays were full): the next frame takes them, or
    /// `rally_client_poll_event` now.
    pub events_more: bool,
}

impl Default for RallyFrame {
    /// No input, no arrays, every time 0: the clock read, nothing presented.
    fn default() -> Self {
        Self {
            now_us: 0,
            at_us: 0,
            presented_us: 0,
            present_us: 0,
            xr_input: std::ptr::null(),
            input_bytes: std::ptr::null(),
            input_len: 0,
            events: std::ptr::null_mut(),
            events_capacity: 0,
            events_count: 0,
            event_data: std::ptr::null_mut(),
            event_data_capacity: 0,
            event_data_len: 0,
            entities: std::ptr::null_mut(),
            entities_capacity: 0,
            entities_count: 0,
            events_more: false,
        }
    }
}

//! The C ABI as a C caller meets it, called through the same `extern "C"` functions: bad input
//! of every kind gets a status and a message, never a crash; and a client joins a real room
//! over UDP (an in-process host running a scene room).
#![allow(unsafe_code)]
// Calling the C ABI is the point of these tests.
// Real sockets and a real host: the tests wait on the wall clock, with generous timeouts.
#![allow(clippy::disallowed_methods)]

use rally::*;
use rally_driver::{backend, Host, HostConfig};
use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
use rally_proto::TokenKey;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{SocketAddr, UdpSocket};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant as WallInstant};

const PROTOCOL: u64 = 7;

/// The system's allocator, counting what the test thread that asks allocates.
struct Counting;

thread_local! {
    /// Whether this thread counts its allocations, and how many it counted.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system's allocator as it is; counting touches only a
// const-initialised thread-local, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn count_allocation() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
    }
}

/// The allocations `body` makes on this thread.
fn allocations(body: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    body();
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(Cell::get)
}

fn last_error() -> String {
    let mut buffer = [0u8; 1024];
    let mut needed = 0usize;
    // SAFETY: a 1024-byte buffer and a size_t, as the header asks.
    let status = unsafe { rally_last_error(buffer.as_mut_ptr().cast(), buffer.len(), &mut needed) };
    assert_eq!(status, RallyStatus::Ok);
    String::from_utf8_lossy(&buffer[..needed - 1]).into_owned()
}

fn create() -> *mut RallyClient {
    create_with(RallyIoThread::Off)
}

/// Every way of driving a client: on the caller's thread, and the I/O thread's two.
const IO_THREADS: [RallyIoThread; 3] = [RallyIoThread::Off, RallyIoThread::On, RallyIoThread::Wake];

fn create_with(io_thread: RallyIoThread) -> *mut RallyClient {
    let mut config = std::mem::MaybeUninit::<RallyConfig>::uninit();
    let mut client = null_mut();
    // SAFETY: valid pointers to a config and a client pointer.
    unsafe {
        assert_eq!(rally_config_default(config.as_mut_ptr()), RallyStatus::Ok);
        let mut config = config.assume_init();
        config.io_thread = io_thread as u32;
        assert_eq!(rally_client_create(&config, &mut client), RallyStatus::Ok);
    }
    client
}

fn token_bytes(key: &TokenKey, server: SocketAddr, ttl_s: u64, timeout_s: u32) -> Vec<u8> {
    let grant = Grant {
        client_id: 1,
        room_id: 1,
        user_data: [0; USER_DATA_LEN],
        server_addresses: vec![server],
        timeout_s,
    };
    let random = TokenRandomness {
        nonce: [1; 24],
        client_to_server_key: [2; 32],
        server_to_client_key: [3; 32],
    };
    #[allow(clippy::disallowed_methods)] // tokens expire on the wall clock
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    token::issue(key, PROTOCOL, &grant, now, ttl_s, &random).unwrap().encode()
}

fn now_us(client: *mut RallyClient) -> u64 {
    let mut now = 0;
    // SAFETY: a live client and a u64.
    assert_eq!(unsafe { rally_client_now_us(client, &mut now) }, RallyStatus::Ok);
    now
}

#[test]
fn null_pointers_are_refused_with_a_message() {
    // Goal: no null pointer crashes the library; each is named. Method: pass null for each
    // pointer argument of the main calls.
    let mut out = null_mut();
    let mut count = 0usize;
    let mut event = std::mem::MaybeUninit::<RallyEvent>::uninit();
    // SAFETY: every pointer is either null (the point) or valid.
    unsafe {
        assert_eq!(rally_client_create(null(), &mut out), RallyStatus::NullPointer);
        assert!(last_error().contains("config is null"), "{}", last_error());
        assert_eq!(rally_config_default(null_mut()), RallyStatus::NullPointer);
        assert_eq!(rally_client_update(null_mut(), 0), RallyStatus::NullPointer);
        assert!(last_error().starts_with("rally_client_update: client is null"));
        assert_eq!(
            rally_client_entities(null_mut(), null_mut(), 0, &mut count),
            RallyStatus::NullPointer
        );
        assert_eq!(rally_client_destroy(null_mut()), RallyStatus::Ok, "destroying null is a no-op");
        let client = create();
        assert_eq!(
            rally_client_entities(client, null_mut(), 0, null_mut()),
            RallyStatus::NullPointer
        );
        assert_eq!(
            rally_client_poll_event(client, null_mut(), null_mut(), 0, &mut count),
            RallyStatus::NullPointer
        );
        assert_eq!(
            rally_client_poll_event(client, event.as_mut_ptr(), null_mut(), 0, null_mut()),
            RallyStatus::NullPointer
        );
        assert_eq!(rally_client_connect(client, null(), 10, null()), RallyStatus::NullPointer);
        assert!(last_error().contains("token is null"));
        assert_eq!(rally_client_send_xr_input(client, 0, null()), RallyStatus::NullPointer);
        assert_eq!(
            rally_client_set_value(client, true, null(), null(), 0),
            RallyStatus::NullPointer
        );
        assert_eq!(rally_client_latency(client, null_mut()), RallyStatus::NullPointer);
        assert_eq!(rally_client_stats(client, null_mut()), RallyStatus::NullPointer);
        // With nothing queued, a null data buffer of capacity 0 is fine.
        assert_eq!(
            rally_client_poll_event(client, event.as_mut_ptr(), null_mut(), 0, &mut count),
            RallyStatus::Ok
        );
        assert_eq!(event.assume_init().kind, RallyEventKind::None);
        assert_eq!(rally_client_frame(client, null_mut()), RallyStatus::NullPointer);
        assert!(last_error().contains("frame is null"), "{}", last_error());
        // A frame of a client not connecting: the clock read, nothing else.
        let mut frame = RallyFrame::default();
        assert_eq!(rally_client_frame(client, &mut frame), RallyStatus::Ok, "{}", last_error());
        assert!(frame.now_us > 0 && !frame.events_more && frame.entities_count == 0);
        let (input, bytes) = (RallyXrInput::default(), [1u8; 4]);
        frame.xr_input = &input;
        (frame.input_bytes, frame.input_len) = (bytes.as_ptr(), bytes.len());
        assert_eq!(rally_client_frame(client, &mut frame), RallyStatus::InvalidArgument);
        assert!(last_error().contains("one input a frame"), "{}", last_error());
        assert_eq!(rally_client_destroy(client), RallyStatus::Ok);
    }
}

#[test]
fn a_short_error_buffer_gets_the_size_needed_and_keeps_the_error() {
    // Goal: the too-small-buffer rule, on the one buffer every program uses.
    // SAFETY: valid pointers, and a buffer of the capacity given.
    unsafe {
        assert_eq!(rally_client_update(null_mut(), 0), RallyStatus::NullPointer);
        let mut needed = 0usize;
        let mut small = [0u8; 4];
        let status = rally_last_error(small.as_mut_ptr().cast(), small.len(), &mut needed);
        assert_eq!(status, RallyStatus::BufferTooSmall);
        let message = last_error();
        assert_eq!(needed, message.len() + 1, "the size with the NUL");
        assert!(message.contains("client is null"), "reading it did not replace it: {message}");
        assert_eq!(small, [0; 4], "a short buffer is left alone");
    }
}

#[test]
fn class_names_follow_the_short_buffer_rule_and_refuse_an_index_past_the_table() {
    // Goal: a client reads the room's class names as it reads every buffer: a short one gets
    // the length needed, an index past the table a message with the count. Method: a fresh
    // client, which knows the two classes every scene room has (avatars' heads and hands).
    let client = create();
    let mut name = [0u8; 32];
    let mut len = 0usize;
    let mut count = 0usize;
    // SAFETY: a live client, a 32-byte buffer and size_ts.
    unsafe {
        assert_eq!(rally_client_class_count(client, &mut count), RallyStatus::Ok);
        assert_eq!(count, 2);
        let status = rally_client_class_name(client, 1, name.as_mut_ptr(), 2, &mut len);
        assert_eq!((status, len), (RallyStatus::BufferTooSmall, 4));
        let status = rally_client_class_name(client, 1, name.as_mut_ptr(), name.len(), &mut len);
        assert_eq!((status, &name[..len]), (RallyStatus::Ok, &b"hand"[..]));
        let status = rally_client_class_name(client, 2, name.as_mut_ptr(), name.len(), &mut len);
        assert_eq!(status, RallyStatus::InvalidArgument);
        assert!(last_error().contains("the room has 2 classes"), "{}", last_error());
        let status = rally_client_class_name(client, 0, name.as_mut_ptr(), name.len(), null_mut());
        assert_eq!(status, RallyStatus::NullPointer);
        assert_eq!(rally_client_destroy(client), RallyStatus::Ok);
    }
}

#[test]
fn bad_tokens_and_arguments_are_refused_before_sending() {
    // Goal: what the client can check itself is refused at once, with the fix in the message.
    let key = TokenKey([9; 32]);
    let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let client = create();
    let expired = token_bytes(&key, server, 0, 1);
    let good = token_bytes(&key, server, 60, 1);
    let mut broken = good.clone();
    broken.truncate(100);
    // SAFETY: a live client and byte slices with their lengths.
    unsafe {
        let status = rally_client_connect(client, expired.as_ptr(), expired.len(), null());
        assert_eq!(status, RallyStatus::InvalidToken);
        assert!(last_error().contains("expired"), "{}", last_error());
        let status = rally_client_connect(client, broken.as_ptr(), broken.len(), null());
        assert_eq!(status, RallyStatus::InvalidToken);
        let other = c"127.0.0.1:10".as_ptr();
        let status = rally_client_connect(client, good.as_ptr(), good.len(), other);
        assert_eq!(status, RallyStatus::InvalidToken);
        assert!(last_error().contains("does not name 127.0.0.1:10"), "{}", last_error());
        let status = rally_client_connect(client, good.as_ptr(), good.len(), c"nowhere".as_ptr());
        assert_eq!(status, RallyStatus::InvalidArgument);
        let bytes = [0u8; 1];
        let status = rally_client_send_input_bytes(client, 0, bytes.as_ptr(), 1);
        assert_eq!(status, RallyStatus::NotConnected, "input before connecting");
        let status = rally_client_relay(client, 7, 0, true, bytes.as_ptr(), 1);
        assert_eq!(status, RallyStatus::InvalidArgument, "a relay target out of the enum");
        let input = RallyXrInput { game_len: 33, ..Default::default() };
        assert_eq!(
            rally_client_connect(client, good.as_ptr(), good.len(), null()),
            RallyStatus::Ok
        );
        assert_eq!(rally_client_send_xr_input(client, 0, &input), RallyStatus::InvalidArgument);
        assert!(last_error().contains("game_len = 33"));
        let big = vec![0u8; 513];
        let status = rally_client_send_input_bytes(client, 0, big.as_ptr(), big.len());
        assert_eq!(status, RallyStatus::InvalidArgument);
        rally_client_destroy(client);
    }
}

#[test]
fn a_server_that_never_answers_times_out_naming_its_address_and_close_refuses_later_calls() {
    // Goal: a forged token, a wrong key or a silent server end in a timeout that names the
    // address, and a closed client refuses every call, with or without the I/O thread.
    // Method: a socket that reads nothing stands for the server; the token's timeout is 1 s;
    // update until the Disconnected event.
    for io_thread in IO_THREADS {
        times_out(io_thread);
    }
}

fn times_out(io_thread: RallyIoThread) {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let server = silent.local_addr().unwrap();
    let client = create_with(io_thread);
    let token = token_bytes(&TokenKey([5; 32]), server, 60, 1);
    let mut event = std::mem::MaybeUninit::<RallyEvent>::uninit();
    let mut len = 0usize;
    // SAFETY: a live client (until destroyed at the end) and valid pointers.
    unsafe {
        assert_eq!(
            rally_client_connect(client, token.as_ptr(), token.len(), null()),
            RallyStatus::Ok
        );
        let start = WallInstant::now();
        let reason = loop {
            assert!(start.elapsed() < Duration::from_secs(20), "no timeout in 20 s");
            assert_eq!(rally_client_update(client, now_us(client)), RallyStatus::Ok);
            let status =
                rally_client_poll_event(client, event.as_mut_ptr(), null_mut(), 0, &mut len);
            assert_eq!(status, RallyStatus::Ok);
            let event = event.assume_init();
            if event.kind == RallyEventKind::Disconnected {
                break event.reason;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(reason, RallyDisconnectReason::TimedOut);
        let bytes = [0u8; 28];
        let status = rally_client_send_input_bytes(client, 0, bytes.as_ptr(), bytes.len());
        assert_eq!(status, RallyStatus::Disconnected);
        let message = last_error();
        assert!(
            message.contains(&server.to_string()) && message.contains("never answered"),
            "{io_thread:?}: {message}"
        );
        assert_eq!(rally_client_update(client, now_us(client)), RallyStatus::Disconnected);

        assert_eq!(rally_client_close(client), RallyStatus::Ok);
        let mut stats = RallyConnectionStats::default();
        assert_eq!(rally_client_update(client, 0), RallyStatus::Closed);
        assert_eq!(rally_client_stats(client, &mut stats), RallyStatus::Closed);
        assert_eq!(rally_client_close(client), RallyStatus::Closed);
        assert!(last_error().contains("closed"));
        assert_eq!(rally_client_destroy(client), RallyStatus::Ok);
    }
}

#[test]
fn a_client_joins_a_scene_room_over_udp_and_reads_its_entities() {
    // Goal: the whole path through the C ABI against a real host: token, UDP, join event,
    // entities; the too-small-array rule on entities; and the I/O thread's two ways deliver
    // what the caller's thread does. Method: for each way, an in-process host runs
    // scenes/sandbox.toml's room; the client sends inputs and updates until it has joined and
    // holds every body and its avatar; the entities (id, class, holder) and the events before
    // then (kind, client) must be the same each way.
    let plain = join(RallyIoThread::Off, Calls::OneByOne);
    assert!(plain.events.iter().any(|e| e.0 == RallyEventKind::Joined), "{:?}", plain.events);
    for io_thread in [RallyIoThread::On, RallyIoThread::Wake] {
        let threaded = join(io_thread, Calls::OneByOne);
        assert_eq!(threaded.entities, plain.entities, "{io_thread:?}");
        assert_eq!(threaded.events, plain.events, "{io_thread:?}");
        assert!(threaded.input_acked, "{io_thread:?}: no input reached the room");
    }
}

#[test]
fn one_frame_call_gives_what_the_calls_one_by_one_give() {
    // Goal: `rally_client_frame` is the frame's calls in one: the same events in the same
    // order, the same entities, an input that reaches the room and a meter that times it; its
    // event arrays take several events a call, leave the rest waiting when full, and say the
    // bytes needed when an event's do not fit. Method: join a fresh sandbox room each way,
    // with the frame call's event array two long and its data buffer four bytes until it says
    // what it needs; on the caller's thread, every frame's entities must also be bit for bit
    // what `rally_client_entities_at` gives right after it at the same time.
    let plain = join(RallyIoThread::Off, Calls::OneByOne);
    for io_thread in [RallyIoThread::Off, RallyIoThread::Wake] {
        let framed = join(io_thread, Calls::Frame);
        assert_eq!(framed.entities, plain.entities, "{io_thread:?}");
        assert_eq!(framed.events, plain.events, "{io_thread:?}");
        assert!(framed.input_acked, "{io_thread:?}: no input reached the room");
    }
}

#[test]
fn steady_frames_allocate_nothing_on_the_game_thread() {
    // Goal: a game's frame through the library allocates nothing in steady play, with the I/O
    // thread in `Wake` (the frame hands its input and present over, reads the published
    // copy): in one call and one by one. Method: join a sandbox room, play until its every
    // body is read, then count this thread's allocations over 100 frames of each way.
    let (host, token, bodies) = sandbox();
    let client = create_with(RallyIoThread::Wake);
    let mut entities = vec![RallyEntity::default(); 256];
    let mut frames = Frames::new(RallyIoThread::Wake);
    frames.capacity = frames.data.len();
    // SAFETY: a live client.
    unsafe {
        assert_eq!(
            rally_client_connect(client, token.as_ptr(), token.len(), null()),
            RallyStatus::Ok
        );
        let start = WallInstant::now();
        let mut joined = false;
        loop {
            let seen = framed(client, &mut frames, joined, &mut entities);
            joined |= seen.events.iter().any(|e| e.0 == RallyEventKind::Joined);
            if joined && seen.count >= bodies + AVATAR {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "not joined in 20 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        for calls in [Calls::Frame, Calls::OneByOne] {
            let mut frame = |_| match calls {
                Calls::Frame => drop(framed(client, &mut frames, true, &mut entities)),
                Calls::OneByOne => drop(one_by_one(client, now_us(client), true, &mut entities)),
            };
            // The first frames of each way may still grow a buffer for good.
            (0..10).for_each(&mut frame);
            let made = allocations(|| (0..100).for_each(frame));
            assert_eq!(made, 0, "{calls:?}: allocations in 100 steady frames");
        }
        assert_eq!(rally_client_destroy(client), RallyStatus::Ok);
    }
    host.shutdown(Duration::from_millis(100)).unwrap();
}

/// How a test client plays its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Calls {
    /// Clock, input, update, events, entities, present: one call each.
    OneByOne,
    /// `rally_client_frame`.
    Frame,
}

/// A scene's rooms as `rally server --scene` hosts them: relays and key-value writes go to the
/// scene's state.
struct SceneGame(rally_scene::Scene);

impl rally_driver::host::Game for SceneGame {
    type Simulation = rally_scene::SceneRoom;

    fn open(&self, room_id: u64) -> rally_engine::Room<Self::Simulation> {
        rally_scene::scene_room(&self.0, room_id).unwrap()
    }

    fn on_event(
        &self,
        room: &mut rally_engine::Room<Self::Simulation>,
        event: rally_driver::host::GameEvent<Self>,
    ) {
        rally_scene::handle_event(room, event);
    }
}

/// A player's avatar: head and two hands.
const AVATAR: usize = 3;

/// What a client saw of a fresh sandbox room.
struct Seen {
    /// Each entity's id, class and holder, ids ascending.
    entities: Vec<(u32, u32, u32)>,
    /// Each event's kind and client, key-value changes aside (they come as the room writes).
    events: Vec<(RallyEventKind, u32)>,
    /// Whether the latency meter timed an input: the room applied one and the client saw it.
    input_acked: bool,
}

/// An in-process host running scenes/sandbox.toml's room, a token for it, and the scene's
/// bodies.
fn sandbox() -> (Host, Vec<u8>, usize) {
    let text = include_str!("../../../scenes/sandbox.toml");
    let scene = rally_scene::Scene::parse("sandbox.toml", text).unwrap();
    let bodies = scene.bodies().len();
    let key = backend::random_key().unwrap();
    let config = HostConfig {
        workers: 1,
        key: Some(key.clone()),
        protocol_id: PROTOCOL,
        ..HostConfig::default()
    };
    let host = Host::start(config, SceneGame(scene)).unwrap();
    let token = token_bytes(&key, host.room_address(1), 60, 5);
    (host, token, bodies)
}

fn join(io_thread: RallyIoThread, calls: Calls) -> Seen {
    let (host, token, bodies) = sandbox();
    let client = create_with(io_thread);
    let mut frames = Frames::new(io_thread);
    let mut entities = vec![RallyEntity::default(); 256];
    let mut count = 0usize;
    let mut joined = None;
    let mut events = Vec::new();
    let mut latency = RallyLatency::default();
    // SAFETY: a live client and buffers of the capacities given.
    unsafe {
        assert_eq!(
            rally_client_connect(client, token.as_ptr(), token.len(), null()),
            RallyStatus::Ok
        );
        let start = WallInstant::now();
        let relayed = |events: &[(RallyEventKind, u32)]| {
            events.iter().filter(|e| e.0 == RallyEventKind::Relayed).count()
        };
        let mut written = false;
        while joined.is_none()
            || count < bodies + AVATAR
            || latency.samples == 0
            || relayed(&events) < 2
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{io_thread:?}: not joined with every body and an input timed in 20 s: \
                 joined {joined:?}, {count} entities, {} latency samples",
                latency.samples
            );
            let now = now_us(client);
            let seen = match calls {
                Calls::OneByOne => one_by_one(client, now, joined.is_some(), &mut entities),
                Calls::Frame => framed(client, &mut frames, joined.is_some(), &mut entities),
            };
            count = seen.count;
            for (kind, from) in seen.events {
                match kind {
                    RallyEventKind::Joined => joined = Some(from),
                    RallyEventKind::Disconnected => panic!("{io_thread:?}: disconnected"),
                    _ => {}
                }
                if kind != RallyEventKind::Changed {
                    events.push((kind, from));
                }
            }
            if joined.is_some() && !std::mem::replace(&mut written, true) {
                write_and_relay(client);
            }
            assert_eq!(rally_client_latency(client, &mut latency), RallyStatus::Ok);
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut one = [RallyEntity::default(); 1];
        let status = rally_client_entities(client, one.as_mut_ptr(), 1, &mut count);
        assert_eq!(status, RallyStatus::BufferTooSmall);
        assert!(count >= bodies, "the count needed: {count}");
        if calls == Calls::Frame {
            assert!(frames.needed > 4, "the frame never said an event's bytes did not fit");
            assert!(frames.more, "the frame's events never filled its array");
        }
        assert_eq!(one[0], RallyEntity::default(), "a short array is left alone");
        let status = rally_client_entities_at(
            client,
            now_us(client),
            entities.as_mut_ptr(),
            entities.len(),
            &mut count,
        );
        assert_eq!(status, RallyStatus::Ok);
        let mut stats = RallyConnectionStats::default();
        assert_eq!(rally_client_stats(client, &mut stats), RallyStatus::Ok);
        assert!(stats.joined && stats.snapshots > 0 && stats.rtt_us > 0, "{stats:?}");
        assert_eq!(stats.client_id, u64::from(joined.unwrap()));
        assert_eq!(rally_client_close(client), RallyStatus::Ok);
        assert_eq!(rally_client_update(client, 0), RallyStatus::Closed);
        assert_eq!(rally_client_destroy(client), RallyStatus::Ok);
    }
    host.shutdown(Duration::from_millis(100)).unwrap();
    let mut entities: Vec<_> =
        entities[..count].iter().map(|e| (e.id, e.class_index, e.holder)).collect();
    entities.sort_unstable();
    Seen { entities, events, input_acked: latency.samples > 0 }
}

/// Events with bytes, in one turn: a key written in this player's scope (a `Changed` event
/// for every player) and two messages relayed to everyone (a `Relayed` event each).
///
/// # Safety
/// A live, joined client.
unsafe fn write_and_relay(client: *mut RallyClient) {
    let value = *b"a value of 16 by";
    // SAFETY: a live client (the caller's contract), a NUL-terminated key, bytes of the
    // lengths given.
    unsafe {
        let key = c"test.note".as_ptr();
        let status = rally_client_set_value(client, false, key, value.as_ptr(), value.len());
        assert_eq!(status, RallyStatus::Ok, "{}", last_error());
        for _ in 0..2 {
            let all = RallyRelayTarget::All as u32;
            let status = rally_client_relay(client, all, 0, true, value.as_ptr(), value.len());
            assert_eq!(status, RallyStatus::Ok, "{}", last_error());
        }
    }
}

/// What one frame took: the entities read and the events, each's kind and client.
struct Frame {
    count: usize,
    events: Vec<(RallyEventKind, u32)>,
}

/// One frame in separate calls: input (once joined), update, every event, the newest
/// entities, present.
///
/// # Safety
/// A live client.
unsafe fn one_by_one(
    client: *mut RallyClient,
    now: u64,
    joined: bool,
    entities: &mut [RallyEntity],
) -> Frame {
    let mut event = std::mem::MaybeUninit::<RallyEvent>::uninit();
    let (mut data, mut len, mut count) = ([0u8; 256], 0usize, 0usize);
    let mut events = Vec::new();
    // SAFETY: a live client (the caller's contract) and buffers of the capacities given.
    unsafe {
        if joined {
            let input = RallyXrInput::default();
            assert_eq!(rally_client_send_xr_input(client, now, &input), RallyStatus::Ok);
        }
        assert_eq!(rally_client_update(client, now), RallyStatus::Ok, "{}", last_error());
        loop {
            let (out, capacity) = (data.as_mut_ptr(), data.len());
            let status =
                rally_client_poll_event(client, event.as_mut_ptr(), out, capacity, &mut len);
            assert_eq!(status, RallyStatus::Ok);
            let event = event.assume_init();
            if event.kind == RallyEventKind::None {
                break;
            }
            events.push((event.kind, event.client));
        }
        let status =
            rally_client_entities(client, entities.as_mut_ptr(), entities.len(), &mut count);
        assert_eq!(status, RallyStatus::Ok);
        assert_eq!(rally_client_present(client, now_us(client)), RallyStatus::Ok);
    }
    Frame { count, events }
}

/// The frame call's event arrays, kept from frame to frame, and what they showed.
struct Frames {
    io_thread: RallyIoThread,
    events: [RallyEvent; 2],
    data: [u8; 256],
    /// The data buffer's capacity as given: 4 until a frame says an event needs more.
    capacity: usize,
    /// The bytes a frame said an event needed, and whether one said more events waited.
    needed: usize,
    more: bool,
}

impl Frames {
    fn new(io_thread: RallyIoThread) -> Self {
        let events = [RallyEvent::default(); 2];
        Self { io_thread, events, data: [0; 256], capacity: 4, needed: 0, more: false }
    }
}

/// One frame in one `rally_client_frame`: input (once joined), update, events, the entities
/// at the frame's time, presented at the call's end.
///
/// # Safety
/// A live client.
unsafe fn framed(
    client: *mut RallyClient,
    frames: &mut Frames,
    joined: bool,
    entities: &mut [RallyEntity],
) -> Frame {
    let input = RallyXrInput::default();
    let mut frame = RallyFrame {
        xr_input: if joined { &input as *const _ } else { null() },
        events: frames.events.as_mut_ptr(),
        events_capacity: frames.events.len(),
        event_data: frames.data.as_mut_ptr(),
        event_data_capacity: frames.capacity,
        entities: entities.as_mut_ptr(),
        entities_capacity: entities.len(),
        present_us: RALLY_PRESENT_NOW,
        ..RallyFrame::default()
    };
    // SAFETY: a live client (the caller's contract) and arrays of the capacities given.
    let status = unsafe { rally_client_frame(client, &mut frame) };
    match status {
        RallyStatus::Ok => {}
        RallyStatus::BufferTooSmall => {
            assert_eq!(frame.events_count, 0, "an event did not fit an empty data buffer");
            assert!(frame.events_more && frame.event_data_len > frames.capacity);
            assert!(frame.event_data_len <= frames.data.len(), "{}", frame.event_data_len);
            (frames.needed, frames.capacity) = (frame.event_data_len, frames.data.len());
        }
        other => panic!("{other:?}: {}", last_error()),
    }
    frames.more |= frame.events_more && frame.events_count == frames.events.len();
    let count = frame.entities_count;
    if frames.io_thread == RallyIoThread::Off {
        // Nothing arrives between two calls on the caller's thread: the same read.
        let mut again = vec![RallyEntity::default(); count];
        let mut n = 0;
        // SAFETY: as above.
        let status = unsafe {
            rally_client_entities_at(client, frame.now_us, again.as_mut_ptr(), count, &mut n)
        };
        assert_eq!(status, RallyStatus::Ok);
        assert_eq!(again, entities[..count], "the frame's read differs from entities_at");
    }
    let events = frames.events[..frame.events_count].iter().map(|e| (e.kind, e.client)).collect();
    Frame { count, events }
}

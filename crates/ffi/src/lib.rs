//! # rally-ffi
//!
//! Rally's client as a C library (`librally.so`, `librally.a`), for game engines and any
//! language with a C FFI: C and C++ directly, C# through P/Invoke, Godot through GDExtension,
//! Unreal through a plugin module. `include/rally.h` declares it; it is generated from this
//! crate by cbindgen and a test fails when the committed header differs.
//!
//! ## A frame
//!
//! A client is an opaque `RallyClient*`. By default it starts no thread and never calls back:
//! the game drives it, once a frame, in the order that keeps latency lowest (docs/design.md):
//!
//! ```c
//! RallyConfig config;
//! rally_config_default(&config);
//! RallyClient *client;
//! if (rally_client_create(&config, &client) != RALLY_STATUS_OK) { /* rally_last_error */ }
//! rally_client_connect(client, token, token_len, "203.0.113.7:7777");
//! for (;;) {
//!     uint64_t now;
//!     rally_client_now_us(client, &now);
//!     rally_client_send_xr_input(client, now, &input);   /* sample input, send at once */
//!     rally_client_update(client, now);                  /* datagrams in and out */
//!     while (rally_client_poll_event(client, &event, data, sizeof data, &len) == RALLY_STATUS_OK
//!            && event.kind != RALLY_EVENT_KIND_NONE) { /* joined, relay, key-value, ... */ }
//!     rally_client_entities_at(client, now, entities, 256, &count);
//!     /* draw, then: */
//!     rally_client_present(client, now_after_present);
//! }
//! rally_client_close(client);
//! rally_client_destroy(client);
//! ```
//!
//! Or each frame in one call, `rally_client_frame`, which does the same steps in the same
//! order with one crossing into the library instead of six (from C# each crossing that finds
//! the library cold after the game's own frame costs about 0.7 us; docs/ffi.md has the
//! figures). A `RallyFrame` kept from frame to frame carries the arrays and the counts:
//!
//! ```c
//! RallyFrame frame = {0};
//! frame.events = events;       frame.events_capacity = 16;
//! frame.event_data = data;     frame.event_data_capacity = sizeof data;
//! frame.entities = entities;   frame.entities_capacity = 256;
//! for (;;) {
//!     frame.now_us = 0;                       /* the call reads the clock */
//!     frame.xr_input = &input;                /* sampled just before */
//!     frame.present_us = RALLY_PRESENT_NOW;   /* or presented_us: the previous frame's */
//!     rally_client_frame(client, &frame);
//!     /* frame.events_count events (bytes one after another), frame.entities_count entities */
//! }
//! ```
//!
//! ## The I/O thread
//!
//! `RallyConfig::io_thread` set to `RALLY_IO_THREAD_ON` makes the library run one thread of
//! its own that owns the socket and the session: it waits on the socket, reads each datagram
//! as it arrives, decodes it, updates the session and queues the events. The frame above stays
//! the same, but `rally_client_update`, the reads, the events and the present then do no
//! socket work, no decoding and take no lock: the I/O thread publishes a copy of what a frame
//! reads (the interpolator's inputs: the read still interpolates at the frame's own time) and
//! hands the events over a channel, so a preempted I/O thread never stalls the frame. An input
//! still leaves at once: the thread that sends it writes it to the socket, taking the
//! session's lock for that (`RallyConnectionStats::io_lock_waits` counts the waits);
//! `RALLY_IO_THREAD_WAKE` hands it to the I/O thread instead, with a wake and no lock, and it
//! waits for that thread to run. For engines whose
//! game thread is the bottleneck; it costs the process a little more CPU in all (docs/ffi.md
//! has the figures). A panic or a socket error on that thread ends the connection with a
//! `Disconnected` event (reason `RALLY_DISCONNECT_REASON_FAILED`, the message in its data);
//! `rally_client_close` and `rally_client_destroy` stop and join it. Calls on one client must
//! still come from one thread at a time.
//!
//! `examples/c/sample.c` is a whole program: it joins a room over UDP, moves a hand and checks
//! that the room shows it there.
//!
//! ## Time
//!
//! Every `now_us` argument is microseconds on the library's monotonic clock, which
//! `rally_client_now_us` reads. Take it once at the start of a frame and pass it to that
//! frame's calls; the latency meter times each input from the `now_us` it was sent with to
//! the `rally_client_present` that first shows its effect.
//!
//! A game reads the socket once a frame, so a datagram may wait in the kernel for most of one.
//! `rally_client_update` therefore takes each datagram at the time the kernel received it
//! (`SO_TIMESTAMPNS` on Linux; elsewhere the time of the read), not at the frame's: the
//! connection's RTT and the round trip each latency sample is judged by are the network's, as
//! for a Rust client that waits on its socket. What the datagram waited for the frame still
//! counts where it belongs, in the sample's total, as frame wait.
//!
//! ## Connecting
//!
//! The game's backend issues a connect token for the player (`rally token issue` does it from
//! a shell; `rally_proto::token::issue` from Rust) and hands its bytes to the game, which passes
//! them to `rally_client_connect`. The library checks the token's shape, its expiry and that it
//! names the address; the server checks its seal. A server never answers a forged token (it
//! gives no oracle), so a forged token, a wrong key or a server that is not there all end the
//! same way: a `Disconnected` event (reason `TimedOut`) after the token's timeout, and the next
//! calls return `RALLY_STATUS_DISCONNECTED` with a message naming the address.
//!
//! ## Input
//!
//! Scene rooms (`rally server --scene`) take the standard XR input, `RallyXrInput`: head, two
//! hands with grip and trigger, up to 32 game bytes. Rooms with their own input type take its
//! bytes as the room decodes them (postcard), through `rally_client_send_input_bytes`: the
//! built-in `reference` and `paddles` rooms take a hand pose, seven little-endian `f32`s
//! (position x, y, z, rotation x, y, z, w), 28 bytes.
//!
//! ## Errors
//!
//! Every function returns a `RallyStatus`; 0 is `RALLY_STATUS_OK`. On any other,
//! `rally_last_error` copies this thread's last error message, which says what was wrong and
//! what to do. The rules, for every function:
//!
//! - a null pointer is refused (`RALLY_STATUS_NULL_POINTER`), except where the header says
//!   null means "none";
//! - an output array or buffer too small is left alone and its size needed written to the
//!   count argument (`RALLY_STATUS_BUFFER_TOO_SMALL`): call again with a larger one;
//! - a call after `rally_client_close` returns `RALLY_STATUS_CLOSED`;
//! - a panic inside the library is caught at the boundary (`RALLY_STATUS_PANIC`); it is a bug.
//!
//! What no check can catch is still the caller's to avoid, as with any C library: a pointer
//! to freed memory (a client used after `rally_client_destroy`), a length larger than its
//! buffer, one client used by two threads at once.
//!
//! ## Limits
//!
//! Everything the server can make the library hold is bounded: events waiting to be polled
//! ([`client::RALLY_EVENTS_MAX`], more dropped and counted in `events_dropped`), the latency
//! samples kept ([`client::RALLY_LATENCY_SAMPLES_KEPT`]), raw input bytes
//! ([`client::RALLY_INPUT_BYTES_MAX`]), and what the session and the scene mirror bound
//! themselves (rally-engine, rally-scene).

mod api;
mod bell;
pub mod client;
mod error;
mod io;
mod publish;
mod roster;
mod types;

pub use api::*;
pub use error::FfiError;
pub use types::*;

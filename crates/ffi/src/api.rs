//! The C functions. Each one checks its pointers, runs inside `catch_unwind` and returns a
//! [`RallyStatus`]; on an error it keeps the message for `rally_last_error`. This is the only
//! module with `unsafe`: each block says why it holds.
#![allow(unsafe_code)]

use crate::client::{Client, Happening, Input};
use crate::error::{last_error, panic_text, set_last_error, FfiError};
use crate::io::Driven;
use crate::publish::EntitiesOut;
use crate::types::*;
use rally_proto::DisconnectReason;
use rally_scene::{GameBytes, RelayTarget, XrHand, XrInput, XrPose};
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A client: create with `rally_client_create`, free with `rally_client_destroy`. Opaque.
pub struct RallyClient {
    client: Driven,
}

/// Runs `body`, turning an error or a panic into a status and the last error message.
fn call(function: &'static str, body: impl FnOnce() -> Result<(), FfiError>) -> RallyStatus {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return RallyStatus::Ok,
        Ok(Err(error)) => error,
        Err(panic) => FfiError::Panic(function, panic_text(panic.as_ref())),
    };
    set_last_error(function, &error);
    error.status()
}

/// The client behind `client`.
///
/// # Safety
/// `client` is null or a pointer from `rally_client_create` not yet destroyed, used by one
/// thread at a time (the header says so).
unsafe fn live_client<'a>(client: *mut RallyClient) -> Result<&'a mut Driven, FfiError> {
    // SAFETY: the caller's contract above: non-null means a live, unaliased RallyClient.
    unsafe { client.as_mut() }.map(|c| &mut c.client).ok_or(FfiError::Null("client"))
}

/// `len` bytes at `bytes`; null is allowed only for zero bytes.
///
/// # Safety
/// A non-null `bytes` points to `len` readable bytes.
unsafe fn bytes<'a>(
    bytes: *const u8,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], FfiError> {
    if bytes.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(FfiError::Null(what)) };
    }
    // SAFETY: non-null, and the caller promises `len` readable bytes there.
    Ok(unsafe { std::slice::from_raw_parts(bytes, len) })
}

/// A NUL-terminated UTF-8 string, or `None` for null.
///
/// # Safety
/// A non-null `text` points to a NUL-terminated string.
unsafe fn text<'a>(text: *const c_char, what: &'static str) -> Result<Option<&'a str>, FfiError> {
    if text.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(text) };
    text.to_str().map(Some).map_err(|_| FfiError::Invalid(format!("{what} is not UTF-8")))
}

/// Writes `value` to `out`.
///
/// # Safety
/// A non-null `out` points to a writable `T`.
unsafe fn put<T>(out: *mut T, value: T, what: &'static str) -> Result<(), FfiError> {
    if out.is_null() {
        return Err(FfiError::Null(what));
    }
    // SAFETY: non-null and, by the caller's contract, writable; `write` drops nothing old.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `items` to the caller's array of `capacity`, and their count to `count`; a short
/// array gets nothing but the count needed.
///
/// # Safety
/// A non-null `out` points to `capacity` writable `T`s; a non-null `count` to a `usize`.
unsafe fn fill<T: Copy>(
    items: &[T],
    out: *mut T,
    capacity: usize,
    count: *mut usize,
    what: &'static str,
) -> Result<(), FfiError> {
    // SAFETY: the caller's contract on `count`.
    unsafe { put(count, items.len(), "count") }?;
    if items.len() > capacity {
        return Err(FfiError::BufferTooSmall { what, capacity, needed: items.len() });
    }
    if items.is_empty() {
        return Ok(());
    }
    if out.is_null() {
        return Err(FfiError::Null(what));
    }
    // SAFETY: `out` holds `capacity` >= `items.len()` writable Ts (the caller's contract),
    // and a caller's array cannot overlap the library's own vector.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
    Ok(())
}

/// Copies an event's bytes, `parts` one after the other, to `out` (room for `capacity`);
/// their number, or the error with the number needed.
///
/// # Safety
/// A non-null `out` points to `capacity` writable bytes.
unsafe fn put_parts(
    parts: [&[u8]; 2],
    out: *mut u8,
    capacity: usize,
    what: &'static str,
) -> Result<usize, FfiError> {
    let needed = parts[0].len() + parts[1].len();
    if needed > capacity {
        return Err(FfiError::BufferTooSmall { what, capacity, needed });
    }
    if needed > 0 && out.is_null() {
        return Err(FfiError::Null(what));
    }
    let mut at = 0;
    for part in parts.into_iter().filter(|part| !part.is_empty()) {
        // SAFETY: `out` holds `capacity` >= `needed` writable bytes (the caller's contract),
        // and the library's own bytes cannot overlap the caller's buffer.
        unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), out.add(at), part.len()) };
        at += part.len();
    }
    Ok(needed)
}

/// The entities of `client` (newest, or as shown at `at_us`) written straight into `out`, as
/// [`fill`] would copy them.
///
/// # Safety
/// As `fill`.
unsafe fn read_entities(
    client: &mut Driven,
    at_us: Option<u64>,
    out: *mut RallyEntity,
    capacity: usize,
    count: *mut usize,
) -> Result<(), FfiError> {
    let needed = client.entity_count()?;
    // SAFETY: the caller's contract on `count`.
    unsafe { put(count, needed, "count") }?;
    if needed > capacity {
        return Err(FfiError::BufferTooSmall { what: "out", capacity, needed });
    }
    if needed == 0 {
        return Ok(());
    }
    if out.is_null() {
        return Err(FfiError::Null("out"));
    }
    // SAFETY: `out` holds `capacity` >= `needed` writable entities (the caller's contract),
    // viewed as possibly uninitialised: the read only writes them.
    let out = unsafe { std::slice::from_raw_parts_mut(out.cast::<MaybeUninit<_>>(), needed) };
    client.entities(at_us, &mut EntitiesOut::new(out))
}

/// The library's version, "major.minor.patch", a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn rally_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Copies this thread's last error message (NUL-terminated) to `buffer` and its size with the
/// NUL to `needed`. A short `buffer` gets nothing but `needed` (and
/// `RALLY_STATUS_BUFFER_TOO_SMALL`); this call never changes the last error.
///
/// # Safety
/// `buffer` points to `capacity` writable bytes (or is null with `capacity` 0); `needed` to a
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn rally_last_error(
    buffer: *mut c_char,
    capacity: usize,
    needed: *mut usize,
) -> RallyStatus {
    let message = last_error();
    // Not through `call`: reading the last error must not replace it.
    // SAFETY: the caller's contract on `buffer`, `capacity` and `needed`.
    match unsafe { fill(&message, buffer.cast::<u8>(), capacity, needed, "buffer") } {
        Ok(()) => RallyStatus::Ok,
        Err(error) => error.status(),
    }
}

/// Fills `config` with the defaults: any local port, 90 Hz frames, interpolation on.
///
/// # Safety
/// `config` points to a writable `RallyConfig`.
#[no_mangle]
pub unsafe extern "C" fn rally_config_default(config: *mut RallyConfig) -> RallyStatus {
    call("rally_config_default", || {
        let defaults = RallyConfig {
            bind_address: std::ptr::null(),
            frame_us: 11_111,
            interpolate: true,
            io_thread: RallyIoThread::Off as u32,
        };
        // SAFETY: the caller's contract on `config`.
        unsafe { put(config, defaults, "config") }
    })
}

/// Creates a client with `config` (its socket bound, not connecting) into `*out`.
///
/// # Safety
/// `config` points to a `RallyConfig` whose `bind_address` is null or a NUL-terminated
/// string; `out` to a writable `RallyClient*`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_create(
    config: *const RallyConfig,
    out: *mut *mut RallyClient,
) -> RallyStatus {
    call("rally_client_create", || {
        // SAFETY: the caller's contract on `config`.
        let config = unsafe { config.as_ref() }.ok_or(FfiError::Null("config"))?;
        if out.is_null() {
            return Err(FfiError::Null("out"));
        }
        // SAFETY: the caller's contract on `bind_address`.
        let bind = unsafe { text(config.bind_address, "config.bind_address") }?;
        let client = Box::new(RallyClient { client: Driven::new(config, bind)? });
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { put(out, Box::into_raw(client), "out") }
    })
}

/// Frees a client (closing it first if it is not). Null is allowed and does nothing. The
/// pointer must not be used again.
///
/// # Safety
/// `client` is null or from `rally_client_create` and not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn rally_client_destroy(client: *mut RallyClient) -> RallyStatus {
    call("rally_client_destroy", || {
        if client.is_null() {
            return Ok(());
        }
        // SAFETY: from Box::into_raw in rally_client_create, destroyed once (the contract).
        let mut client = unsafe { Box::from_raw(client) };
        let _ = client.client.close();
        Ok(())
    })
}

/// Starts connecting with a connect token (the bytes the game's backend issued) to `address`
/// ("ip:port", one the token names), or to the token's first server if `address` is null.
/// An expired or malformed token, or an address the token does not name, is refused here;
/// a forged one is not answered by the server, and the connection then times out
/// (`RALLY_STATUS_DISCONNECTED`, naming the address). Progress comes from
/// `rally_client_update`; the `Joined` event says the room accepted the client.
///
/// # Safety
/// `client` is a live client; `token` points to `token_len` bytes; `address` is null or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rally_client_connect(
    client: *mut RallyClient,
    token: *const u8,
    token_len: usize,
    address: *const c_char,
) -> RallyStatus {
    call("rally_client_connect", || {
        // SAFETY: the caller's contract on each pointer.
        let (client, token, address) = unsafe {
            (live_client(client)?, bytes(token, token_len, "token")?, text(address, "address")?)
        };
        if token.is_empty() {
            return Err(FfiError::Null("token"));
        }
        // Tokens expire on the wall clock, which the server reads too.
        #[allow(clippy::disallowed_methods)]
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        client.waking(|client| client.connect(token, address, unix_now))
    })
}

/// The library's clock into `*now_us`, microseconds: every `now_us` argument is on it. Read it
/// once at the start of a frame and pass it to that frame's calls.
///
/// # Safety
/// `client` is a live client; `now_us` points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_now_us(
    client: *mut RallyClient,
    now_us: *mut u64,
) -> RallyStatus {
    call("rally_client_now_us", || {
        // SAFETY: the caller's contract on each pointer.
        unsafe {
            let now = live_client(client)?.now_us()?;
            put(now_us, now, "now_us")
        }
    })
}

/// One non-blocking turn at `now_us`: reads every datagram waiting, each taken at the time the
/// kernel received it (so that round trips and the latency meter measure the network, not the
/// frame), runs timers, queues events for `rally_client_poll_event`, sends what is due. Call it
/// every frame, right after sending the frame's input. It never blocks or sleeps.
///
/// # Safety
/// `client` is a live client.
#[no_mangle]
pub unsafe extern "C" fn rally_client_update(client: *mut RallyClient, now_us: u64) -> RallyStatus {
    // SAFETY: the caller's contract on `client`.
    call("rally_client_update", || unsafe { live_client(client) }?.update(now_us))
}

/// Sends the standard XR input sampled at `now_us`, at once (the frame order that keeps
/// latency lowest: sample, send, update, present). For scene rooms.
///
/// # Safety
/// `client` is a live client; `input` points to a `RallyXrInput`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_send_xr_input(
    client: *mut RallyClient,
    now_us: u64,
    input: *const RallyXrInput,
) -> RallyStatus {
    call("rally_client_send_xr_input", || {
        // SAFETY: the caller's contract on each pointer.
        let (client, input) =
            unsafe { (live_client(client)?, input.as_ref().ok_or(FfiError::Null("input"))?) };
        let input = xr_input(input)?;
        client.send_input(now_us, Input::Xr(input))
    })
}

/// Sends input bytes sampled at `now_us`: the room's own input type as the room decodes it
/// (postcard, docs/scene.md and docs/design.md give the encoding), at most 512 bytes.
///
/// # Safety
/// `client` is a live client; `input` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rally_client_send_input_bytes(
    client: *mut RallyClient,
    now_us: u64,
    input: *const u8,
    len: usize,
) -> RallyStatus {
    call("rally_client_send_input_bytes", || {
        // SAFETY: the caller's contract on each pointer.
        let (client, input) = unsafe { (live_client(client)?, bytes(input, len, "input")?) };
        let input = Input::Raw(input.to_vec());
        client.send_input(now_us, input)
    })
}

/// Tells the latency meter that a frame showing the newest state was presented at `now_us`.
///
/// # Safety
/// `client` is a live client.
#[no_mangle]
pub unsafe extern "C" fn rally_client_present(
    client: *mut RallyClient,
    now_us: u64,
) -> RallyStatus {
    // SAFETY: the caller's contract on `client`.
    call("rally_client_present", || unsafe { live_client(client) }?.present(now_us))
}

/// Copies the newest state of every entity into `out` (room for `capacity`) and their number
/// into `*count`. A short array gets nothing but `*count` (`RALLY_STATUS_BUFFER_TOO_SMALL`).
///
/// # Safety
/// `client` is a live client; `out` points to `capacity` writable entities (or is null with
/// `capacity` 0); `count` to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_entities(
    client: *mut RallyClient,
    out: *mut RallyEntity,
    capacity: usize,
    count: *mut usize,
) -> RallyStatus {
    call("rally_client_entities", || {
        // SAFETY: the caller's contract on each pointer.
        let client = unsafe { live_client(client) }?;
        unsafe { read_entities(client, None, out, capacity, count) }
    })
}

/// Like `rally_client_entities`, but each entity as a frame at `at_us` should show it:
/// buffered against the link's jitter and interpolated (the newest state for entities not
/// buffered yet, or with interpolation off in the config).
///
/// # Safety
/// As `rally_client_entities`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_entities_at(
    client: *mut RallyClient,
    at_us: u64,
    out: *mut RallyEntity,
    capacity: usize,
    count: *mut usize,
) -> RallyStatus {
    call("rally_client_entities_at", || {
        // SAFETY: the caller's contract on each pointer.
        let client = unsafe { live_client(client) }?;
        unsafe { read_entities(client, Some(at_us), out, capacity, count) }
    })
}

/// The number of the room's class names into `*count`: each `RallyEntity::class` is below it
/// (or `RALLY_NONE`). Two at least ("head", "hand") once joined to a scene room; more as the
/// scene's bodies have classes.
///
/// # Safety
/// `client` is a live client; `count` points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_class_count(
    client: *mut RallyClient,
    count: *mut usize,
) -> RallyStatus {
    call("rally_client_class_count", || {
        // SAFETY: the caller's contract on each pointer.
        unsafe {
            let names = live_client(client)?.with(|client| Ok(client.class_names()?.len()))?;
            put(count, names, "count")
        }
    })
}

/// The name of class `index` (ASCII, no NUL) into `name` (room for `capacity` bytes), its
/// length into `*len`; a short buffer gets nothing but the length needed and
/// `RALLY_STATUS_BUFFER_TOO_SMALL`. Names are 32 bytes at most.
///
/// # Safety
/// `client` is a live client; `name` points to `capacity` writable bytes (or is null with
/// `capacity` 0); `len` to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_class_name(
    client: *mut RallyClient,
    index: u32,
    name: *mut u8,
    capacity: usize,
    len: *mut usize,
) -> RallyStatus {
    call("rally_client_class_name", || {
        // SAFETY: the caller's contract on each pointer.
        unsafe { live_client(client) }?.with(|client| {
            let names = client.class_names()?;
            let Some(class) = names.get(index as usize) else {
                return Err(FfiError::Invalid(format!(
                    "class {index}: the room has {} classes (rally_client_class_count)",
                    names.len()
                )));
            };
            // SAFETY: the caller's contract on `name`, `capacity` and `len`.
            unsafe { fill(class.as_bytes(), name, capacity, len, "name") }
        })
    })
}

/// Takes the next event into `*event` (kind `RALLY_EVENT_KIND_NONE` when none waits) and its
/// bytes into `data` (room for `capacity`), their number into `*data_len`. If `data` is too
/// short the event stays queued, `*data_len` says what is needed and the call returns
/// `RALLY_STATUS_BUFFER_TOO_SMALL`. Events queue in the room's order; a disconnection comes
/// last.
///
/// # Safety
/// `client` is a live client; `event` points to a writable `RallyEvent`; `data` to `capacity`
/// writable bytes (or null with `capacity` 0); `data_len` to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_poll_event(
    client: *mut RallyClient,
    event: *mut RallyEvent,
    data: *mut u8,
    capacity: usize,
    data_len: *mut usize,
) -> RallyStatus {
    call("rally_client_poll_event", || {
        if event.is_null() {
            return Err(FfiError::Null("event"));
        }
        // SAFETY: the caller's contract on `client`.
        unsafe { live_client(client) }?.poll_event(|next| {
            let (head, parts) = next.map_or((RallyEvent::default(), [&[][..], &[]]), encode);
            // SAFETY: the caller's contract on `data`, `capacity`, `data_len` and `event`.
            unsafe {
                put(data_len, parts[0].len() + parts[1].len(), "data_len")?;
                put_parts(parts, data, capacity, "data")?;
                put(event, head, "event")?;
            }
            Ok(head.kind != RallyEventKind::None)
        })
    })
}

/// A whole frame in one call, in the order that keeps latency lowest: tells the latency meter
/// the previous frame's present (`frame.presented_us`), reads the clock (`frame.now_us` 0),
/// sends the input (`frame.xr_input` or `frame.input_bytes`), runs `rally_client_update`,
/// takes the waiting events into `frame.events` and their bytes into `frame.event_data`,
/// reads the entities as a frame at `frame.at_us` shows them into `frame.entities`, and tells
/// this frame's present (`frame.present_us`). The same as those calls made one by one, for
/// one crossing into the library instead of six (docs/ffi.md has the cost of each).
///
/// Every step runs even when one before it failed, so that a frame on a connection that just
/// ended still takes the `Disconnected` event; the call returns the first step's error. An
/// array too short is that step's `RALLY_STATUS_BUFFER_TOO_SMALL` with the size needed:
/// `entities_count` for the entities; for the events, an array that fills up leaves the rest
/// waiting (`events_more`), and only an event whose bytes do not fit an empty data buffer is an
/// error (`event_data_len` the bytes needed, the event left waiting).
///
/// # Safety
/// `client` is a live client; `frame` points to a `RallyFrame` whose pointers are null or
/// point to what it says, of the capacities it gives.
#[no_mangle]
pub unsafe extern "C" fn rally_client_frame(
    client: *mut RallyClient,
    frame: *mut RallyFrame,
) -> RallyStatus {
    call("rally_client_frame", || {
        // SAFETY: the caller's contract on each pointer.
        let (client, frame) =
            unsafe { (live_client(client)?, frame.as_mut().ok_or(FfiError::Null("frame"))?) };
        // SAFETY: the caller's contract on the frame's pointers.
        unsafe { play_frame(client, frame) }
    })
}

/// The steps of `rally_client_frame`, each run whatever the one before gave; the first error.
///
/// # Safety
/// As `rally_client_frame` on `frame`'s pointers.
unsafe fn play_frame(client: &mut Driven, frame: &mut RallyFrame) -> Result<(), FfiError> {
    let mut first = Ok(());
    let mut step = |result: Result<(), FfiError>| {
        if first.is_ok() {
            first = result;
        }
    };
    if frame.presented_us != 0 {
        step(client.present(frame.presented_us));
    }
    if frame.now_us == 0 {
        step(client.now_us().map(|now| frame.now_us = now));
    }
    let now = frame.now_us;
    // SAFETY: the caller's contract on the input's pointers.
    match unsafe { frame_input(frame) } {
        Ok(Some(input)) => step(client.send_input(now, input)),
        Ok(None) => {}
        Err(error) => step(Err(error)),
    }
    step(client.update(now));
    // SAFETY: the caller's contract on the events' pointers.
    step(unsafe { take_events(client, frame) });
    frame.entities_count = 0;
    if !frame.entities.is_null() {
        let at = if frame.at_us == 0 { now } else { frame.at_us };
        let (out, capacity) = (frame.entities, frame.entities_capacity);
        // SAFETY: the caller's contract on `entities`; the count is the frame's own field.
        step(unsafe { read_entities(client, Some(at), out, capacity, &mut frame.entities_count) });
    }
    match frame.present_us {
        0 => {}
        RALLY_PRESENT_NOW => step(client.now_us().and_then(|end| client.present(end))),
        at => step(client.present(at)),
    }
    first
}

/// The frame's input: XR, bytes, or none.
///
/// # Safety
/// A non-null `frame.xr_input` points to a `RallyXrInput`, a non-null `frame.input_bytes` to
/// `frame.input_len` bytes.
unsafe fn frame_input(frame: &RallyFrame) -> Result<Option<Input>, FfiError> {
    // SAFETY: the caller's contract.
    let xr = unsafe { frame.xr_input.as_ref() };
    match (xr, frame.input_bytes.is_null()) {
        (Some(_), false) => Err(FfiError::Invalid(
            "frame.xr_input and frame.input_bytes: one input a frame, not both".into(),
        )),
        (Some(input), true) => xr_input(input).map(|input| Some(Input::Xr(input))),
        // SAFETY: the caller's contract.
        (None, false) => Ok(Some(Input::Raw(
            unsafe { bytes(frame.input_bytes, frame.input_len, "frame.input_bytes") }?.to_vec(),
        ))),
        (None, true) => Ok(None),
    }
}

/// Takes the waiting events into the frame's arrays, while both have room; says whether more
/// wait.
///
/// # Safety
/// A non-null `frame.events` points to `frame.events_capacity` writable events, a non-null
/// `frame.event_data` to `frame.event_data_capacity` writable bytes.
unsafe fn take_events(client: &mut Driven, frame: &mut RallyFrame) -> Result<(), FfiError> {
    (frame.events_count, frame.event_data_len, frame.events_more) = (0, 0, false);
    loop {
        let room = !frame.events.is_null() && frame.events_count < frame.events_capacity;
        let mut taken = false;
        client.poll_event(|next| {
            let Some(happening) = next else { return Ok(false) };
            let (head, parts) = encode(happening);
            let left = frame.event_data_capacity - frame.event_data_len;
            let needed = parts[0].len() + parts[1].len();
            if !room || needed > left {
                frame.events_more = true;
                if room && frame.events_count == 0 {
                    frame.event_data_len = needed;
                    let capacity = frame.event_data_capacity;
                    let what = "frame.event_data";
                    return Err(FfiError::BufferTooSmall { what, capacity, needed });
                }
                return Ok(false);
            }
            // SAFETY: the caller's contract on both arrays, each written below its capacity:
            // `left` bytes from `event_data_len`, the event at `events_count`.
            unsafe {
                let data = frame.event_data.wrapping_add(frame.event_data_len);
                put_parts(parts, data, left, "frame.event_data")?;
                frame.events.add(frame.events_count).write(head);
            }
            (frame.event_data_len, frame.events_count) =
                (frame.event_data_len + needed, frame.events_count + 1);
            taken = true;
            Ok(true)
        })?;
        if !taken {
            return Ok(());
        }
    }
}

/// Sets `key` (NUL-terminated UTF-8) to `len` bytes of `value` in the room's scope
/// (`room_scope` true) or this player's; a null `value` removes the key. The room checks the
/// sizes and rate (a scene's `[state]`), orders writes and sends each accepted one to every
/// player as a `Changed` event, this one included.
///
/// # Safety
/// `client` is a live client; `key` a NUL-terminated string; `value` null or `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rally_client_set_value(
    client: *mut RallyClient,
    room_scope: bool,
    key: *const c_char,
    value: *const u8,
    len: usize,
) -> RallyStatus {
    call("rally_client_set_value", || {
        // SAFETY: the caller's contract on each pointer.
        let (client, key) = unsafe { (live_client(client)?, text(key, "key")?) };
        let key = key.ok_or(FfiError::Null("key"))?;
        let value = match value.is_null() {
            true => None,
            // SAFETY: the caller's contract on `value`.
            false => Some(unsafe { bytes(value, len, "value") }?.to_vec()),
        };
        client.sending(|client| client.write(!room_scope, key, value))
    })
}

/// Relays `len` bytes to `target`, a `RallyRelayTarget` (player `to` for
/// `RALLY_RELAY_TARGET_ONE`), reliably (in order, resent until acknowledged) or not. Each
/// player gets a `Relayed` event. (`target` is an integer so that no value from C is undefined
/// behaviour: another value is refused.)
///
/// # Safety
/// `client` is a live client; `bytes` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rally_client_relay(
    client: *mut RallyClient,
    target: u32,
    to: u32,
    reliable: bool,
    bytes: *const u8,
    len: usize,
) -> RallyStatus {
    call("rally_client_relay", || {
        // SAFETY: the caller's contract on each pointer.
        let (client, bytes) = unsafe { (live_client(client)?, self::bytes(bytes, len, "bytes")?) };
        let to = match target {
            t if t == RallyRelayTarget::All as u32 => RelayTarget::All,
            t if t == RallyRelayTarget::Others as u32 => RelayTarget::Others,
            t if t == RallyRelayTarget::One as u32 => RelayTarget::One(to),
            other => {
                return Err(FfiError::Invalid(format!("target = {other}: not a RallyRelayTarget")))
            }
        };
        let bytes = bytes.to_vec();
        client.sending(|client| client.relay(to, reliable, bytes))
    })
}

/// The latency meter's figures into `*out`.
///
/// # Safety
/// `client` is a live client; `out` points to a writable `RallyLatency`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_latency(
    client: *mut RallyClient,
    out: *mut RallyLatency,
) -> RallyStatus {
    call("rally_client_latency", || {
        // SAFETY: the caller's contract on each pointer.
        unsafe {
            let latency = live_client(client)?.with(Client::latency)?;
            put(out, latency, "out")
        }
    })
}

/// The connection's figures (RTT, jitter, loss, packets) and the session's counters into
/// `*out`.
///
/// # Safety
/// `client` is a live client; `out` points to a writable `RallyConnectionStats`.
#[no_mangle]
pub unsafe extern "C" fn rally_client_stats(
    client: *mut RallyClient,
    out: *mut RallyConnectionStats,
) -> RallyStatus {
    call("rally_client_stats", || {
        // SAFETY: the caller's contract on each pointer.
        unsafe {
            let stats = live_client(client)?.stats()?;
            put(out, stats, "out")
        }
    })
}

/// Says goodbye to the server (so the room hears it now, not after the timeout) and refuses
/// every later call on this client with `RALLY_STATUS_CLOSED`, except `rally_client_destroy`.
///
/// # Safety
/// `client` is a live client.
#[no_mangle]
pub unsafe extern "C" fn rally_client_close(client: *mut RallyClient) -> RallyStatus {
    // SAFETY: the caller's contract on `client`.
    call("rally_client_close", || unsafe { live_client(client) }?.close())
}

fn xr_input(input: &RallyXrInput) -> Result<XrInput, FfiError> {
    let pose = |p: &RallyPose| XrPose { position: p.position, rotation: p.rotation };
    let hand = |h: &RallyHand| XrHand { pose: pose(&h.pose), grip: h.grip, trigger: h.trigger };
    let game = input.game.get(..usize::from(input.game_len)).and_then(GameBytes::new);
    let game = game.ok_or_else(|| {
        FfiError::Invalid(format!(
            "input.game_len = {}: at most {RALLY_GAME_BYTES_MAX}",
            input.game_len
        ))
    })?;
    Ok(XrInput {
        head: pose(&input.head),
        hands: [hand(&input.hands[0]), hand(&input.hands[1])],
        game,
    })
}

/// An event as C sees it, and its bytes in two parts (a key and its value; or the bytes and
/// nothing): no copy, no allocation.
fn encode(happening: &Happening) -> (RallyEvent, [&[u8]; 2]) {
    let mut event = RallyEvent::default();
    let mut data: [&[u8]; 2] = [&[], &[]];
    match happening {
        Happening::Joined { client, resumed } => {
            event.kind = RallyEventKind::Joined;
            event.client = *client;
            event.resumed = *resumed;
        }
        Happening::PlayerJoined(player) => {
            event.kind = RallyEventKind::PlayerJoined;
            event.client = *player;
        }
        Happening::PlayerLeft(player) => {
            event.kind = RallyEventKind::PlayerLeft;
            event.client = *player;
        }
        Happening::Relayed { from, bytes } => {
            event.kind = RallyEventKind::Relayed;
            event.client = from.unwrap_or(RALLY_ROOM);
            data[0] = bytes;
        }
        Happening::Changed { player, key, value } => {
            event.kind = RallyEventKind::Changed;
            event.client = player.unwrap_or(RALLY_ROOM);
            event.room_scope = player.is_none();
            event.has_value = value.is_some();
            // Keys and values are bounded by the room's limits (kilobytes), far below u32.
            event.key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
            data = [key.as_bytes(), value.as_deref().unwrap_or_default()];
        }
        Happening::Failed(why) => {
            event.kind = RallyEventKind::Disconnected;
            event.reason = RallyDisconnectReason::Failed;
            data[0] = why.as_bytes();
        }
        Happening::Disconnected(reason) => {
            event.kind = RallyEventKind::Disconnected;
            event.reason = match reason {
                DisconnectReason::Closed => RallyDisconnectReason::Closed,
                DisconnectReason::TimedOut => RallyDisconnectReason::TimedOut,
                DisconnectReason::PeerMisbehaved => RallyDisconnectReason::PeerMisbehaved,
                DisconnectReason::ServerFull => RallyDisconnectReason::ServerFull,
                DisconnectReason::ServerShutdown => RallyDisconnectReason::ServerShutdown,
                DisconnectReason::RoomFailed => RallyDisconnectReason::RoomFailed,
                _ => RallyDisconnectReason::Unknown,
            };
        }
    }
    // Relayed bytes and key-values are bounded by the session's message size, far below u32.
    event.data_len = u32::try_from(data[0].len() + data[1].len()).unwrap_or(u32::MAX);
    (event, data)
}

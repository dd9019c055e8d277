//! The module's exports: a plain C ABI over [`Player`] that the page's `rally-client.js`
//! (crates/app/src/demo/static) wraps, so that building the client needs cargo alone.
//!
//! Numbers cross as wasm numbers (`f64` milliseconds of `performance.now()`, `f32` metres);
//! bytes cross through the module's memory: the page asks [`rally_alloc`] for room, writes
//! into it and passes the pointer and length, and reads what the player wrote from
//! [`rally_out`] (bytes: a datagram or UTF-8 text) or [`rally_entities_out`] (`f32`s). The
//! module imports nothing: no clock, no randomness, no I/O, no allocator of the host's.
//!
//! A handle is a pointer to a boxed [`Web`]; the page keeps it from [`rally_player_new`]
//! until [`rally_player_free`]. Null handles are refused (a no-op or zero), never read.
#![allow(unsafe_code)] // The ABI's raw pointers; each `unsafe` block says why it holds.

use crate::{Phase, Player};
use rally_proto::Instant;
use rally_sim::sandbox::HandInput;

/// One player and what it last wrote for the page to read.
#[derive(Debug)]
pub struct Web {
    player: Player,
    /// A datagram to send, or text (the phase, the figures, an error).
    out: Vec<u8>,
    /// The entities as `id, x, y, z`, interpolated.
    entities: Vec<f32>,
}

/// `performance.now()` milliseconds as the session's time (negative or NaN: zero).
pub fn instant(now_ms: f64) -> Instant {
    Instant::from_nanos((now_ms * 1e6).max(0.0) as u64)
}

/// The bytes at `ptr..ptr + len` of the module's memory (empty for a null pointer).
///
/// # Safety
/// `ptr` is null or points at `len` bytes the caller owns for the call (from [`rally_alloc`]).
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract above.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// The player behind a handle, or `None` for a null one.
///
/// # Safety
/// `web` is null or a live handle from [`rally_player_new`], used by one caller at a time.
unsafe fn web<'a>(web: *mut Web) -> Option<&'a mut Web> {
    // SAFETY: the caller's contract above; a wasm module runs one call at a time.
    unsafe { web.as_mut() }
}

impl Web {
    /// Writes `text` for the page to read from [`rally_out`]; returns its length.
    fn say(&mut self, text: &str) -> usize {
        self.out.clear();
        self.out.extend_from_slice(text.as_bytes());
        self.out.len()
    }
}

/// `len` bytes of the module's memory for the page to write into (free with [`rally_free`]).
#[no_mangle]
pub extern "C" fn rally_alloc(len: usize) -> *mut u8 {
    Box::into_raw(vec![0u8; len].into_boxed_slice()).cast()
}

/// Gives back what [`rally_alloc`] lent.
///
/// # Safety
/// `ptr` and `len` are exactly what one earlier [`rally_alloc`] gave and took, freed once.
#[no_mangle]
pub unsafe extern "C" fn rally_free(ptr: *mut u8, len: usize) {
    if !ptr.is_null() {
        // SAFETY: the caller's contract: this is the boxed slice rally_alloc leaked.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
    }
}

/// A player whose secrets come from the 24 random bytes at `random` (the browser's
/// `crypto.getRandomValues`), for a display showing a frame every `frame_us`. Null if the
/// arguments are refused (not 24 bytes, or a frame time outside 1 us to 1 s).
///
/// # Safety
/// `random` points at `random_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rally_player_new(
    random: *const u8,
    random_len: usize,
    frame_us: u32,
) -> *mut Web {
    // SAFETY: the caller's contract.
    let random = unsafe { bytes(random, random_len) };
    match Player::new(random, frame_us) {
        Ok(player) => {
            let web = Web { player, out: Vec::new(), entities: Vec::new() };
            Box::into_raw(Box::new(web))
        }
        Err(_) => std::ptr::null_mut(),
    }
}

/// Ends a player (after [`rally_close`] and a last flush, if it was connected).
///
/// # Safety
/// `web` is null or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn rally_player_free(web: *mut Web) {
    if !web.is_null() {
        // SAFETY: the caller's contract: the box rally_player_new leaked, freed once.
        drop(unsafe { Box::from_raw(web) });
    }
}

/// Where the player's last text or datagram is (its length was the call's result).
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_out(web: *mut Web) -> *const u8 {
    // SAFETY: the caller's contract.
    unsafe { self::web(web) }.map_or(std::ptr::null(), |w| w.out.as_ptr())
}

/// Starts connecting with the connect token at `token`; 0 if it started, else the length of
/// the reason (an expired or malformed token) at [`rally_out`].
///
/// # Safety
/// `web` is null or a live handle; `token` points at `token_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rally_connect(
    web: *mut Web,
    now_ms: f64,
    token: *const u8,
    token_len: usize,
    unix_now: f64,
) -> usize {
    // SAFETY: the caller's contract.
    let (Some(web), token) = (unsafe { self::web(web) }, unsafe { bytes(token, token_len) }) else {
        return 0;
    };
    match web.player.connect(instant(now_ms), token, unix_now.max(0.0) as u64) {
        Ok(()) => 0,
        Err(reason) => web.say(&reason),
    }
}

/// One datagram that arrived at `now_ms`.
///
/// # Safety
/// `web` is null or a live handle; `datagram` points at `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rally_receive(
    web: *mut Web,
    now_ms: f64,
    datagram: *const u8,
    len: usize,
) {
    // SAFETY: the caller's contract.
    if let (Some(web), datagram) = (unsafe { self::web(web) }, unsafe { bytes(datagram, len) }) {
        web.player.receive(instant(now_ms), datagram);
    }
}

/// Timers and the session's turn, once a frame.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_update(web: *mut Web, now_ms: f64) {
    // SAFETY: the caller's contract.
    if let Some(web) = unsafe { self::web(web) } {
        web.player.update(instant(now_ms));
    }
}

/// The next datagram to send, at [`rally_out`]: its length, 0 when there is none.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_poll_transmit(web: *mut Web, now_ms: f64) -> usize {
    // SAFETY: the caller's contract.
    let Some(web) = (unsafe { self::web(web) }) else { return 0 };
    match web.player.poll_transmit(instant(now_ms)) {
        Some(datagram) => {
            web.out = datagram;
            web.out.len()
        }
        None => 0,
    }
}

/// Sends the hand at `x, y, z` metres facing along `yaw` radians: its input's sequence
/// number, or -1 before the room has welcomed this player.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_send_hand(
    web: *mut Web,
    now_ms: f64,
    x: f32,
    y: f32,
    z: f32,
    yaw: f32,
) -> f64 {
    // SAFETY: the caller's contract.
    let Some(web) = (unsafe { self::web(web) }) else { return -1.0 };
    let (sin, cos) = (yaw / 2.0).sin_cos();
    let hand = HandInput { position: [x, y, z], rotation: [0.0, sin, 0.0, cos] };
    web.player.send_hand(instant(now_ms), hand).map_or(-1.0, f64::from)
}

/// A frame showing the newest state was presented at `now_ms` (for the latency meter).
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_present(web: *mut Web, now_ms: f64) {
    // SAFETY: the caller's contract.
    if let Some(web) = unsafe { self::web(web) } {
        web.player.present(instant(now_ms));
    }
}

/// Every entity as `id, x, y, z` interpolated for `now_ms`, at [`rally_entities_out`]: the
/// number of `f32`s.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_entities(web: *mut Web, now_ms: f64) -> usize {
    // SAFETY: the caller's contract.
    let Some(web) = (unsafe { self::web(web) }) else { return 0 };
    web.entities = web.player.entities(instant(now_ms));
    web.entities.len()
}

/// Where the last [`rally_entities`] wrote (aligned for a `Float32Array`).
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_entities_out(web: *mut Web) -> *const f32 {
    // SAFETY: the caller's contract.
    unsafe { self::web(web) }.map_or(std::ptr::null(), |w| w.entities.as_ptr())
}

/// The display's frame interval as the page measures it, microseconds (0: ignored).
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_set_frame_us(web: *mut Web, frame_us: u32) {
    // SAFETY: the caller's contract.
    if let Some(web) = unsafe { self::web(web) } {
        web.player.set_frame(frame_us);
    }
}

/// Says goodbye to the room: flush [`rally_poll_transmit`] after it.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_close(web: *mut Web) {
    // SAFETY: the caller's contract.
    if let Some(web) = unsafe { self::web(web) } {
        web.player.close();
    }
}

/// `idle`, `connecting`, `joined` or `ended: REASON` at [`rally_out`]: its length.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_phase(web: *mut Web) -> usize {
    // SAFETY: the caller's contract.
    let Some(web) = (unsafe { self::web(web) }) else { return 0 };
    let phase = match (web.player.phase(), web.player.figures().client) {
        (Phase::Idle, _) => "idle".to_string(),
        (Phase::Live(..), None) => "connecting".into(),
        (Phase::Live(..), Some(_)) => "joined".into(),
        (Phase::Ended(reason), _) => format!("ended: {reason}"),
    };
    web.say(&phase)
}

/// The figures as JSON at [`rally_out`] (`client`, `rtt_ms`, `loss`, `samples`, `mean_ms`,
/// `p99_ms`, `best_ms`, `worst_ms`, `within`, `at_best`, `within_steady`, and `late`: the
/// late samples' causes, [`crate::player::Late`]): its length.
///
/// # Safety
/// `web` is null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rally_figures(web: *mut Web) -> usize {
    // SAFETY: the caller's contract.
    let Some(web) = (unsafe { self::web(web) }) else { return 0 };
    let f = web.player.figures();
    let json = serde_json::json!({
        "client": f.client, "rtt_ms": f.rtt_ms, "loss": f.loss, "samples": f.samples,
        "mean_ms": f.mean_ms, "p99_ms": f.p99_ms, "best_ms": f.best_ms,
        "worst_ms": f.worst_ms, "within": f.within, "at_best": f.at_best,
        "within_steady": f.within_steady,
        "late": {
            "missed_frame": f.late.missed_frame, "missed_by_ms": f.late.missed_by_ms,
            "held": f.late.held, "unknown_round_trip": f.late.unknown_round_trip,
        },
    });
    web.say(&json.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text a call left at `rally_out`.
    fn text(web: *mut Web, len: usize) -> String {
        // SAFETY: `web` is live and `len` is what the call just wrote.
        String::from_utf8(unsafe { bytes(rally_out(web), len) }.to_vec()).unwrap()
    }

    #[test]
    fn the_abi_refuses_bad_arguments_and_null_handles_without_reading_them() {
        // SAFETY (the whole test): every pointer is null, from rally_alloc, or a live handle.
        unsafe {
            assert!(rally_player_new([0u8; 23].as_ptr(), 23, 16_667).is_null());
            assert!(rally_player_new(std::ptr::null(), 0, 16_667).is_null());
            let null = std::ptr::null_mut();
            assert_eq!(rally_poll_transmit(null, 0.0), 0);
            assert_eq!(rally_send_hand(null, 0.0, 0.0, 0.0, 0.0, 0.0), -1.0);
            rally_update(null, 0.0);

            let random = rally_alloc(24);
            let web = rally_player_new(random, 24, 16_667);
            rally_free(random, 24);
            assert!(!web.is_null());
            let garbage = b"not a token";
            let len = rally_connect(web, 0.0, garbage.as_ptr(), garbage.len(), 0.0);
            assert!(text(web, len).starts_with("not a connect token"), "{}", text(web, len));
            assert_eq!(text(web, rally_phase(web)), "idle");
            // Before connecting: nothing to send, no hand taken, no entities.
            rally_update(web, f64::NAN);
            assert_eq!(rally_poll_transmit(web, 1.0), 0);
            assert_eq!(rally_send_hand(web, 1.0, 0.0, 1.0, 0.5, 0.0), -1.0);
            assert_eq!(rally_entities(web, 1.0), 0);
            let figures: serde_json::Value =
                serde_json::from_str(&text(web, rally_figures(web))).unwrap();
            assert_eq!(figures["client"], serde_json::Value::Null);
            rally_player_free(web);
        }
    }
}

//! Rally's client in the browser: the sans-IO [`rally_proto::Endpoint`] and
//! [`rally_engine::ClientSession`] compiled to wasm32-unknown-unknown, behind [`WebPlayer`],
//! a small JS API made by wasm-bindgen. The page owns the I/O: it carries each datagram over
//! a WebSocket to `rally demo`'s gateway (which hands it to the room over UDP), and passes
//! the time as `performance.now()` milliseconds. The same Rust that the native clients run
//! seals packets, acks, resends, fragments and decodes snapshots: nothing is written twice
//! (docs/web.md has the measurements behind that choice).
//!
//! ```js
//! import init, { WebPlayer } from "./pkg/rally_web_client.js";
//! await init();
//! const player = new WebPlayer(crypto.getRandomValues(new Uint8Array(24)), 16667);
//! player.connect(performance.now(), tokenBytes, Date.now() / 1000);
//! socket.onmessage = (m) => player.receive(performance.now(), new Uint8Array(m.data));
//! // every frame: update, send the hand, flush, draw player.entities(now), present
//! ```

pub mod player;

pub use player::{Figures, Phase, Player};
use rally_proto::Instant;
use rally_sim::sandbox::HandInput;
use wasm_bindgen::prelude::*;

/// `performance.now()` milliseconds as the session's time (negative or NaN: zero).
fn instant(now_ms: f64) -> Instant {
    Instant::from_nanos((now_ms * 1e6).max(0.0) as u64)
}

/// The browser's player: see the crate's docs for the order of calls.
#[wasm_bindgen]
pub struct WebPlayer(Player);

#[wasm_bindgen]
impl WebPlayer {
    /// A player: `random` is 24 bytes of `crypto.getRandomValues`, `frame_us` the display's
    /// frame interval in microseconds (for the latency model).
    #[wasm_bindgen(constructor)]
    pub fn new(random: &[u8], frame_us: u32) -> Result<WebPlayer, JsError> {
        Player::new(random, frame_us).map(Self).map_err(|e| JsError::new(&e))
    }

    /// Starts connecting with a connect token's bytes; an expired or malformed token throws.
    pub fn connect(&mut self, now_ms: f64, token: &[u8], unix_now: f64) -> Result<(), JsError> {
        self.0.connect(instant(now_ms), token, unix_now as u64).map_err(|e| JsError::new(&e))
    }

    /// One datagram the WebSocket brought.
    pub fn receive(&mut self, now_ms: f64, datagram: &[u8]) {
        self.0.receive(instant(now_ms), datagram);
    }

    /// Timers and the session's turn, once a frame.
    pub fn update(&mut self, now_ms: f64) {
        self.0.update(instant(now_ms));
    }

    /// The next datagram to send, or `undefined`.
    pub fn poll_transmit(&mut self, now_ms: f64) -> Option<Vec<u8>> {
        self.0.poll_transmit(instant(now_ms))
    }

    /// Sends the hand's position (metres) facing along `yaw` radians; `undefined` before
    /// the room has welcomed this player.
    pub fn send_hand(&mut self, now_ms: f64, x: f32, y: f32, z: f32, yaw: f32) -> Option<u32> {
        let (sin, cos) = (yaw / 2.0).sin_cos();
        let hand = HandInput { position: [x, y, z], rotation: [0.0, sin, 0.0, cos] };
        self.0.send_hand(instant(now_ms), hand)
    }

    /// A frame showing the newest state was presented now (for the latency meter).
    pub fn present(&mut self, now_ms: f64) {
        self.0.present(instant(now_ms));
    }

    /// Every entity as `id, x, y, z` in one flat array, interpolated for `now_ms`.
    pub fn entities(&mut self, now_ms: f64) -> Vec<f32> {
        self.0.entities(instant(now_ms))
    }

    /// The display's frame interval as measured by the page (the median between
    /// `requestAnimationFrame` calls), microseconds: the latency model's frame.
    pub fn set_frame_us(&mut self, frame_us: u32) {
        self.0.set_frame(frame_us);
    }

    /// Says goodbye to the room: flush `poll_transmit` after it (the page does on `pagehide`).
    pub fn close(&mut self) {
        self.0.close();
    }

    /// `idle`, `connecting`, `joined` or `ended: REASON`.
    pub fn phase(&self) -> String {
        match (self.0.phase(), self.0.figures().client) {
            (Phase::Idle, _) => "idle".into(),
            (Phase::Live(..), None) => "connecting".into(),
            (Phase::Live(..), Some(_)) => "joined".into(),
            (Phase::Ended(reason), _) => format!("ended: {reason}"),
        }
    }

    /// The figures as JSON: `client`, `rtt_ms`, `loss`, `samples`, `mean_ms`, `p99_ms`,
    /// `best_ms`, `worst_ms`, `within`.
    pub fn figures(&self) -> String {
        let f = self.0.figures();
        serde_json::json!({
            "client": f.client, "rtt_ms": f.rtt_ms, "loss": f.loss, "samples": f.samples,
            "mean_ms": f.mean_ms, "p99_ms": f.p99_ms, "best_ms": f.best_ms,
            "worst_ms": f.worst_ms, "within": f.within,
        })
        .to_string()
    }
}

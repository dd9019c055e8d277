//! Rally's client in the browser: the sans-IO [`rally_proto::Endpoint`] and
//! [`rally_engine::ClientSession`] compiled to wasm32-unknown-unknown, behind a plain C ABI
//! ([`abi`]) and a small JS wrapper committed beside the page
//! (`crates/app/src/demo/static/rally-client.js`): building it takes cargo alone, no
//! wasm-bindgen CLI. The page owns the I/O: it carries each datagram to the demo's gateway
//! (which hands it to the room over UDP), and passes the time as `performance.now()`
//! milliseconds. The same Rust that the native clients run seals packets, acks, resends,
//! fragments and decodes snapshots: nothing is written twice (docs/web.md has the
//! measurements behind that choice). `rally`'s build script builds this crate for wasm and
//! the demo serves it.
//!
//! ```js
//! import { loadClient } from "./rally-client.js";
//! const client = await loadClient("/play/rally_web_client.wasm");
//! const player = client.player(crypto.getRandomValues(new Uint8Array(24)), 16667);
//! player.connect(performance.now(), tokenBytes, Date.now() / 1000); // throws a reason
//! socket.onmessage = (m) => player.receive(performance.now(), new Uint8Array(m.data));
//! // every frame: update, send the hand, flush poll_transmit, draw entities(now), present
//! ```

pub mod abi;
pub mod player;

pub use player::{Figures, Late, Phase, Player};

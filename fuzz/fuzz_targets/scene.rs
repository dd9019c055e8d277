//! Arbitrary text as a scene file (`Scene::parse`): a scene or an error, never a panic. The
//! same bytes as a scene room's message from a joined client (`handle_event`): counted or
//! passed on, never a panic, and the room's key-value state stays within its limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_engine::RoomEvent;
use rally_scene::{handle_event, scene_room, Scene, SceneMessage, Scope};
use rally_wire::MessageCodec;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Scene::parse("fuzz.toml", text);
    }
    let codec = MessageCodec::default();
    let Ok(message) = codec.decode::<SceneMessage>(data) else { return };
    let scene = Scene::parse("fuzz.toml", "[state]\nkeys_per_scope_max = 2\n").unwrap();
    let mut room = scene_room(&scene, 1).unwrap();
    for event in [
        RoomEvent::Joined(1),
        RoomEvent::Message { client: 1, message: message.clone() },
        RoomEvent::Message { client: 1, message },
        RoomEvent::Left(1),
    ] {
        handle_event(&mut room, event);
    }
    let state = room.simulation().state();
    assert!(state.values(Scope::Room).count() <= 2);
    assert_eq!(state.players().count(), 0);
});

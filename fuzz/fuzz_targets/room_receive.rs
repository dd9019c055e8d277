//! Arbitrary bytes on any channel of a joined client, to the room and to the client's
//! session: never a panic; the room keeps ticking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_engine::{Room, RoomConfig};
use rally_netem::LinkConfig;
use rally_sim::sandbox::Sandbox;
use rally_sim::RoomNet;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Some((&channel, payload)) = data.split_first() else { return };
    let mut room = Room::new(RoomConfig::default(), Sandbox::default(), 1).unwrap();
    Sandbox::populate(room.world_mut(), 4, 1);
    let mut net = RoomNet::new(room, 1, LinkConfig::default(), 1);
    net.connect(0);
    net.run_for(Duration::from_millis(50));
    let Some(handle) = net.net.server_events.first().map(|(h, _)| *h) else { return };
    let now = net.net.now;
    net.room.receive(now, handle, channel % 4, payload);
    net.sessions[0].receive(now, channel % 4, payload);
    net.run_for(Duration::from_millis(20));
});

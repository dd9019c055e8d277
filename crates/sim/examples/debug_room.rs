//! Replays one room scenario and prints what it chose, its failure, and every connection event
//! (messages left out). Usage: `cargo run -p rally-sim --example debug_room -- SEED`.

use rally_proto::Event;

fn main() {
    let seed: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (outcome, net) = rally_sim::room_scenario::run_keeping_net(seed);
    println!("{:#?}", outcome.scenario);
    for (i, client) in net.net.clients.iter().enumerate() {
        for (handle, event) in client.events.iter().filter(|(_, e)| !is_message(e)) {
            println!("client {i} {handle:?} {event:?}");
        }
        println!("client {i} endpoint {:?}", client.endpoint.stats());
    }
    for (handle, event) in net.net.server_events.iter().filter(|(_, e)| !is_message(e)) {
        println!("server {handle:?} {event:?}");
    }
    println!("server endpoint {:?}", net.net.server.stats());
    println!("room {:?}", net.room.stats());
    println!("failure: {:?}", outcome.failure);
}

fn is_message(event: &Event) -> bool {
    matches!(event, Event::Message { .. })
}

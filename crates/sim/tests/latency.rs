//! Goal: the total-latency meter sees each pipeline where the latency model puts it: greedy
//! between L_best and L_worst, the fast path at L_best whatever the server's tick phase, naive
//! three frames above greedy; a lost packet costs no input; and the meter's split of each
//! sample gives the round trip that sample saw, so that with jitter each sample is judged by
//! its own model.
//! Method: one player at 120 Hz (client frames and server ticks with their own phases) on a
//! 10 ms link, in virtual time, over several tick phases.

use rally_engine::{ClientConfig, ClientSession, LatencyModel, LatencySample, Pipeline, Room};
use rally_engine::{ObjectClass, RoomConfig, FAST};
use rally_netem::{LinkConfig, LossModel};
use rally_proto::{Event, Instant};
use rally_sim::sandbox::{HandInput, Sandbox};
use rally_sim::RoomNet;
use std::time::Duration;

const HZ: u32 = 120;

/// Latencies in milliseconds of one player for one second, the server's ticks `phase` of a
/// tick after the client's frames.
fn latencies(pipeline: Pipeline, phase: f64, link: LinkConfig) -> Vec<f64> {
    samples(pipeline, phase, link).iter().map(|s| s.total.as_secs_f64() * 1e3).collect()
}

/// The meter's samples of one player for one second, as [`latencies`].
fn samples(pipeline: Pipeline, phase: f64, link: LinkConfig) -> Vec<LatencySample> {
    let config = RoomConfig { tick_rate: HZ, pipeline, ..RoomConfig::default() };
    let mut room = Room::new(config, Sandbox::default(), 1).unwrap();
    Sandbox::populate(room.world_mut(), 8, 1);
    let mut net = RoomNet::new(room, 1, link, 1);
    let defer_inputs = pipeline == Pipeline::Naive;
    let client = ClientConfig { defer_inputs, ..ClientConfig::default() };
    net.sessions[0] = ClientSession::new(client).unwrap();
    let dt = 1.0 / f64::from(HZ);
    net.set_tick_schedule(at(phase * dt), Duration::from_secs_f64(dt));
    net.connect(0);
    net.run_for(Duration::from_millis(500));
    let root = net.room.simulation().controllers[&1];
    Sandbox::chain(net.room.world_mut(), root, 3);
    let start = net.net.now.as_secs_f64();
    for k in 0..HZ {
        let t = at(start + f64::from(k) * dt);
        net.run_until(t);
        net.sessions[0].present(t);
        net.input(0, HandInput::on_circle(0, t.as_secs_f64()));
    }
    // A few more frames, without new inputs, for the last ones to be presented.
    for k in HZ..HZ + 12 {
        let t = at(start + f64::from(k) * dt);
        net.run_until(t);
        net.sessions[0].present(t);
        // A deferred input released by this frame goes now, as a game's frame would send it.
        net.flush();
    }
    let samples = net.sessions[0].latency_mut().take_samples();
    samples.into_iter().skip(20).collect()
}

fn at(seconds: f64) -> Instant {
    Instant::ZERO + Duration::from_secs_f64(seconds)
}

fn link() -> LinkConfig {
    LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

const L_BEST: f64 = 1000.0 / 60.0;
const L_WORST: f64 = 25.0;

#[test]
fn greedy_stays_within_the_model_and_fast_sits_at_its_floor() {
    for phase in [0.05, 0.3, 0.55, 0.8] {
        let greedy = latencies(Pipeline::Greedy, phase, link());
        let fast = latencies(Pipeline::Fast, phase, link());
        assert!(greedy.len() > 80 && fast.len() > 80);
        for l in &greedy {
            assert!((L_BEST - 1.0..=L_WORST + 1.0).contains(l), "phase {phase}: greedy {l} ms");
        }
        for l in &fast {
            assert!(*l <= L_BEST + 1.0, "phase {phase}: fast {l} ms");
        }
    }
}

#[test]
fn naive_is_three_frames_behind_greedy() {
    let (greedy, naive) =
        (latencies(Pipeline::Greedy, 0.3, link()), latencies(Pipeline::Naive, 0.3, link()));
    let frames = (mean(&naive) - mean(&greedy)) * f64::from(HZ) / 1000.0;
    assert!((frames - 3.0).abs() < 0.1, "naive is {frames} frames behind");
}

#[test]
fn a_lost_input_packet_costs_no_input() {
    let lossy = LinkConfig { loss: LossModel::Bernoulli { probability: 0.2 }, ..link() };
    let samples = latencies(Pipeline::Greedy, 0.3, lossy);
    // Every input is measured (each rides again in the next frames until applied, and every
    // snapshot reports all inputs applied so far), and a loss costs a frame, not a round trip.
    assert_eq!(samples.len(), 100, "every input measured");
    let clean = latencies(Pipeline::Greedy, 0.3, link());
    let frames = (mean(&samples) - mean(&clean)) * f64::from(HZ) / 1000.0;
    assert!(frames < 1.0, "20% loss each way costs {frames} frames on average");
}

#[test]
fn the_meter_splits_out_the_links_round_trip() {
    for pipeline in [Pipeline::Greedy, Pipeline::Fast, Pipeline::Naive] {
        for sample in samples(pipeline, 0.55, link()) {
            let round_trip = sample.round_trip.expect("every state reports its holds");
            // Holds travel in whole microseconds.
            let error = round_trip.abs_diff(Duration::from_millis(10));
            assert!(error <= Duration::from_micros(1), "{pipeline:?}: {sample:?}");
            let parts = round_trip + sample.server_hold.unwrap() + sample.frame_wait;
            assert!(parts <= sample.total, "{pipeline:?}: parts exceed the total: {sample:?}");
        }
    }
}

#[test]
fn with_jitter_each_sample_sits_within_the_model_of_its_own_round_trip() {
    let jittery = LinkConfig { jitter: Duration::from_millis(2), ..link() };
    let dt = Duration::from_secs(1) / HZ;
    let slack = Duration::from_millis(1);
    for phase in [0.1, 0.6] {
        let greedy = samples(Pipeline::Greedy, phase, jittery);
        let fast = samples(Pipeline::Fast, phase, jittery);
        let round_trips: Vec<f64> =
            greedy.iter().map(|s| s.round_trip.unwrap().as_secs_f64() * 1e3).collect();
        let spread = round_trips.iter().cloned().fold(0.0, f64::max)
            - round_trips.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread > 4.0, "the jitter shows in the round trips: {spread} ms");
        for s in &greedy {
            let model = LatencyModel::new(s.round_trip.unwrap(), dt, dt);
            assert!(model.contains(s.total, slack), "greedy {s:?} outside {model:?}");
        }
        for s in &fast {
            let model = LatencyModel::new(s.round_trip.unwrap(), dt, dt);
            assert!(s.total <= model.best + slack, "fast {s:?} above {model:?}");
        }
    }
}

/// Frames (after the first half second) in which an observer showed the player's hand where
/// the previous frame did while it moved: raw (the newest state) and interpolated; and the
/// interpolator's buffer and mean added latency, milliseconds.
fn observer_stalls(link: LinkConfig) -> (usize, usize, f64, f64) {
    let config = RoomConfig { tick_rate: HZ, pipeline: Pipeline::Fast, ..RoomConfig::default() };
    let mut room = Room::new(config, Sandbox::default(), 1).unwrap();
    Sandbox::populate(room.world_mut(), 8, 1);
    let mut net = RoomNet::new(room, 2, link, 1);
    let dt = 1.0 / f64::from(HZ);
    net.set_tick_schedule(at(0.3 * dt), Duration::from_secs_f64(dt));
    net.connect(0);
    net.connect(1);
    net.run_for(Duration::from_millis(500));
    let player = net.sessions[0].client_id().expect("the player joined");
    let hand = net.room.simulation().controllers[&player];
    net.sessions[1].interpolator_mut().set_class(hand, ObjectClass::Hand);
    let start = net.net.now.as_secs_f64();
    let (mut raw_stalls, mut smooth_stalls, mut added) = (0, 0, Vec::new());
    let mut previous = None;
    for k in 0..2 * HZ {
        // The observer's frames sit half a frame after the player's.
        let t = at(start + f64::from(k) * dt);
        net.run_until(t);
        net.input(0, HandInput::on_circle(0, t.as_secs_f64()));
        let t = at(start + (f64::from(k) + 0.5) * dt);
        net.run_until(t);
        let raw = net.sessions[1].entities().find(|e| e.id == hand).unwrap().position;
        let smooth = net.sessions[1].interpolated(t, hand).unwrap();
        if let Some((raw0, smooth0)) = previous.replace((raw, smooth.state.position)) {
            if k >= HZ / 2 {
                raw_stalls += usize::from(raw == raw0);
                smooth_stalls += usize::from(smooth.state.position.distance(smooth0) < 1e-4);
                added.push(smooth.behind * 1e3);
            }
        }
    }
    let buffer = net.sessions[1].interpolator_mut().stats(ObjectClass::Hand).buffer * 1e3;
    (raw_stalls, smooth_stalls, buffer, mean(&added))
}

#[test]
fn interpolation_removes_the_stalls_jitter_causes_at_the_cost_of_the_jitter_only() {
    let (raw, smooth, buffer, added) = observer_stalls(link());
    assert_eq!((raw, smooth), (0, 0), "a link without jitter shows motion every frame");
    assert!(buffer < 0.5 && added < 0.5, "no jitter, no buffer: {buffer} ms, adds {added} ms");
    let jittery = LinkConfig { jitter: Duration::from_millis(2), ..link() };
    let (raw, smooth, buffer, added) = observer_stalls(jittery);
    assert!(raw > 20, "jitter stalls the raw view: {raw} of 180 frames");
    assert!(smooth * 5 < raw, "interpolation removes most stalls: {smooth} of {raw} left");
    assert!((2.0..15.0).contains(&buffer), "the buffer follows the jitter: {buffer} ms");
    assert!(added < buffer, "it adds less than its buffer on average: {added} ms");
}

#[test]
fn the_fast_path_sends_each_new_input_once_to_every_other_client() {
    // Goal: the fast path costs one message per new input per client, however often the
    // sender's frames repeat inputs or only acknowledge snapshots. Method: two players on a
    // clean link; player 0 sends 30 inputs 20 ms apart while snapshots flow at 120 Hz (each
    // acknowledged by a frame); player 1, who sends none, counts the fast-path messages.
    let config = RoomConfig { tick_rate: HZ, pipeline: Pipeline::Fast, ..RoomConfig::default() };
    let room = Room::new(config, Sandbox::default(), 1).unwrap();
    let mut net = RoomNet::new(room, 2, link(), 1);
    net.connect(0);
    net.connect(1);
    net.run_for(Duration::from_millis(500));
    let fast = |net: &RoomNet<Sandbox>| {
        let events = net.net.clients[1].events.iter();
        events.filter(|(_, e)| matches!(e, Event::Message { channel: FAST, .. })).count()
    };
    let before = fast(&net);
    for k in 0..30 {
        net.input(0, HandInput::on_circle(0, f64::from(k) * 0.02));
        net.run_for(Duration::from_millis(20));
    }
    net.run_for(Duration::from_millis(100));
    assert_eq!(fast(&net) - before, 30);
}

//! What interpolation adds to latency and removes in stutter, per object class, measured on
//! an observer's frames against the server's world on virtual time's one clock.
//!
//! Each observer frame shows an entity two ways: raw (the newest state received, as
//! `ClientSession::entities` gives it) and interpolated (`ClientSession::interpolated`).
//! While the entity moves on the server, a frame is a *stall* if it shows the entity where the
//! previous frame did (nothing new arrived), and *uneven* if the step it shows differs from
//! the server's step over the same frame by more than half. Interpolation's cost is how far
//! the state it shows is behind the newest state received, in server time.

use super::Setup;
use crate::stats::summary;
use glam::Vec3;
use rally_engine::interpolation::CLASSES;
use rally_engine::{ClientSession, EntityId, World};
use rally_proto::Instant;
use rally_sim::sandbox::HandInput;
use serde::Serialize;

/// A frame's step counts as uneven when it is off the server's by more than this fraction.
const UNEVEN: f32 = 0.5;
/// The server's step is its mean over this many frames (path length over frames): the server
/// moves an entity when an input or a tick comes, not on the observer's frames, so a single
/// frame's step is uneven on the server already.
const SPAN: usize = 8;
/// The server moved an entity when it went further than this in a frame on average, metres:
/// twice the quantization step, so that an entity settling by fractions of a step (which
/// the wire shows as still) does not count.
const MOVED: f32 = 2e-3;
/// A frame shows the entity where the previous one did when it moved less than this, metres.
const STILL: f32 = 1e-4;

/// One class's frames in one or more runs.
#[derive(Debug, Clone, Default)]
struct Frames {
    id: EntityId,
    /// The previous frame's positions: raw, interpolated.
    previous: Option<(Vec3, Vec3)>,
    /// The server's positions at the last `SPAN` frames, oldest first.
    truth: std::collections::VecDeque<Vec3>,
    moving: u64,
    stalls: [u64; 2],
    /// Uneven frames shown raw, interpolated, and on the server itself.
    uneven: [u64; 3],
    starved: u64,
    behind_ms: Vec<f64>,
    buffers_ms: Vec<f64>,
}

impl Frames {
    fn frame(&mut self, truth: Vec3, raw: Vec3, smooth: Vec3, counted: bool) {
        if self.truth.len() > SPAN {
            self.truth.pop_front();
        }
        self.truth.push_back(truth);
        let Some((r0, s0)) = self.previous.replace((raw, smooth)) else { return };
        if self.truth.len() <= SPAN {
            return;
        }
        let path: f32 =
            self.truth.iter().zip(self.truth.iter().skip(1)).map(|(a, b)| a.distance(*b)).sum();
        let step = path / SPAN as f32;
        if !counted || step < MOVED {
            return;
        }
        let server = truth.distance(self.truth[SPAN - 1]);
        self.uneven[2] += u64::from((server - step).abs() > UNEVEN * step);
        self.moving += 1;
        for (i, shown) in [raw.distance(r0), smooth.distance(s0)].into_iter().enumerate() {
            self.stalls[i] += u64::from(shown < STILL);
            self.uneven[i] += u64::from((shown - step).abs() > UNEVEN * step);
        }
    }
}

/// The three classes' frames of one observer.
pub(super) struct Smoothness {
    classes: [Frames; 3],
}

impl Smoothness {
    /// Watches the player's `hand`, the object it `held` and a `free` body; tells the
    /// observer's interpolator which is which.
    pub fn new(ids: [EntityId; 3], observer: &mut ClientSession<HandInput, ()>) -> Self {
        for (id, class) in ids.into_iter().zip(CLASSES) {
            observer.interpolator_mut().set_class(id, class);
        }
        Self { classes: ids.map(|id| Frames { id, ..Frames::default() }) }
    }

    /// An observer frame at `now`; `counted` after the warm-up.
    pub fn frame(
        &mut self,
        now: Instant,
        counted: bool,
        world: &World,
        observer: &mut ClientSession<HandInput, ()>,
    ) {
        for frames in &mut self.classes {
            let Some(truth) = world.get(frames.id).map(|e| e.transform.position) else { continue };
            let Some(raw) = observer.entities().find(|e| e.id == frames.id) else { continue };
            let Some(smooth) = observer.interpolated(now, frames.id) else { continue };
            if counted {
                frames.behind_ms.push(smooth.behind * 1e3);
                frames.starved += u64::from(smooth.starved);
            }
            frames.frame(truth, raw.position, smooth.state.position, counted);
        }
    }

    /// The run is over: note each class's buffer.
    pub fn finish_run(&mut self, observer: &mut ClientSession<HandInput, ()>) {
        for (frames, class) in self.classes.iter_mut().zip(CLASSES) {
            frames.buffers_ms.push(observer.interpolator_mut().stats(class).buffer * 1e3);
        }
    }

    /// Adds another run's frames to these.
    pub fn merge(&mut self, other: Smoothness) {
        for (mine, theirs) in self.classes.iter_mut().zip(other.classes) {
            mine.moving += theirs.moving;
            for i in 0..2 {
                mine.stalls[i] += theirs.stalls[i];
            }
            for i in 0..3 {
                mine.uneven[i] += theirs.uneven[i];
            }
            mine.starved += theirs.starved;
            mine.behind_ms.extend(theirs.behind_ms);
            mine.buffers_ms.extend(theirs.buffers_ms);
        }
    }

    /// Nothing measured yet.
    pub fn empty() -> Self {
        Self { classes: Default::default() }
    }

    /// One row per class.
    pub fn rows(&self, setup: &Setup) -> Vec<SmoothRow> {
        let names = ["hand", "held", "free"];
        self.classes
            .iter()
            .zip(names)
            .map(|(f, class)| {
                let n = f.moving.max(1) as f64;
                let behind = summary(&f.behind_ms);
                let frames = f.behind_ms.len().max(1) as f64;
                SmoothRow {
                    pipeline: setup.name,
                    hz: setup.hz,
                    chain_depth: setup.depth,
                    link_jitter_ms: setup.jitter_ms,
                    class,
                    frames_moving: f.moving,
                    stall_fraction: Pair {
                        raw: f.stalls[0] as f64 / n,
                        interpolated: f.stalls[1] as f64 / n,
                    },
                    uneven_fraction: Pair {
                        raw: f.uneven[0] as f64 / n,
                        interpolated: f.uneven[1] as f64 / n,
                    },
                    server_uneven_fraction: f.uneven[2] as f64 / n,
                    buffer_ms: f.buffers_ms.iter().sum::<f64>() / f.buffers_ms.len().max(1) as f64,
                    added_latency_ms: Added { mean: behind.mean, p99: behind.p99, max: behind.max },
                    starved_fraction: f.starved as f64 / frames,
                }
            })
            .collect()
    }
}

/// The same measure without and with interpolation.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Pair {
    raw: f64,
    interpolated: f64,
}

/// What interpolation adds to latency, milliseconds of server time (negative: extrapolated).
#[derive(Debug, Clone, Serialize)]
pub(super) struct Added {
    mean: f64,
    p99: f64,
    max: f64,
}

/// One class of one setup.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SmoothRow {
    pub pipeline: &'static str,
    hz: u32,
    pub chain_depth: usize,
    link_jitter_ms: f64,
    class: &'static str,
    frames_moving: u64,
    stall_fraction: Pair,
    uneven_fraction: Pair,
    /// Frames whose step the server's own world made uneven (inputs arriving unevenly over
    /// the player's uplink): what no interpolation on the server's clock can remove.
    server_uneven_fraction: f64,
    /// The buffer the interpolator settled on, mean over runs.
    buffer_ms: f64,
    added_latency_ms: Added,
    starved_fraction: f64,
}

/// Prints the rows as a table.
pub(super) fn print(rows: &[SmoothRow]) {
    println!(
        "\ninterpolation on the observer: frames where the server moved the entity; stalls \
         (nothing new shown) and uneven steps (off the server's mean step by more than half), \
         raw -> interpolated, and on the server itself; the buffer and what it adds to latency \
         (mean, p99), ms"
    );
    println!(
        "{:<7} {:>4} {:>6} {:<5} {:>6} {:>15} {:>15} {:>6} {:>6} {:>6} {:>6} {:>7}",
        "pipe",
        "hz",
        "jitter",
        "class",
        "frames",
        "stalls",
        "uneven",
        "server",
        "buffer",
        "added",
        "p99",
        "starved"
    );
    for r in rows {
        let (stalls, uneven) = (&r.stall_fraction, &r.uneven_fraction);
        println!(
            "{:<7} {:>4} {:>6.1} {:<5} {:>6} {:>6.1}% ->{:>5.1}% {:>6.1}% ->{:>5.1}% {:>5.1}% \
             {:>6.2} {:>6.2} {:>6.2} {:>6.1}%",
            r.pipeline,
            r.hz,
            r.link_jitter_ms,
            r.class,
            r.frames_moving,
            stalls.raw * 100.0,
            stalls.interpolated * 100.0,
            uneven.raw * 100.0,
            uneven.interpolated * 100.0,
            r.server_uneven_fraction * 100.0,
            r.buffer_ms,
            r.added_latency_ms.mean,
            r.added_latency_ms.p99,
            r.starved_fraction * 100.0
        );
    }
}

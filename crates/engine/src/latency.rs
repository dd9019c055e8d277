//! The total-latency meter and the latency model of docs/design.md.
//!
//! Total latency is what a player feels: from the moment the client samples an input to the
//! first frame that presents its effect, both on the client's own clock, so no clock sync is
//! needed. The meter also splits it, still without synchronized clocks: the input went out at
//! `sent`, the first state reflecting it arrived at `arrived`, and the server said how long it
//! held the input before sending that state (the hold rides in the snapshot prefix, as QUIC's
//! ack delay does). The rest is the network's round trip:
//!
//! ```text
//! total = (sent - sampled) + round_trip + server_hold + (presented - arrived)
//!          client send wait   network       server wait    client frame wait
//! ```
//!
//! The model gives, for a round trip, the least and the most total latency a greedy pipeline
//! allows: the client presents on its frames, so the least is the round trip rounded up to a
//! whole frame, and the server may hold an input up to one tick on top.

use rally_wire::seq::seq32_newer;
use std::collections::VecDeque;
use std::time::Duration;

use rally_proto::Instant;

/// Inputs sampled and not yet presented, kept at most; older ones are given up on.
const PENDING_MAX: usize = 1024;
/// Samples kept for [`LatencyMeter::take_samples`] at most.
const SAMPLES_MAX: usize = 65_536;
/// Histogram buckets, a millisecond each; the last one counts everything longer.
pub const HISTOGRAM_BUCKETS: usize = 128;

/// One input's total latency and where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySample {
    /// The input's sequence number.
    pub seq: u32,
    /// Sampled to the first frame that presented its effect.
    pub total: Duration,
    /// Sent to the arrival of the first state reflecting it, less the server's hold: the
    /// network's round trip as this input saw it. `None` when that state did not report the
    /// hold (a lost snapshot made a later one the first to reflect it).
    pub round_trip: Option<Duration>,
    /// How long the server held the input before sending the state that reflected it.
    pub server_hold: Option<Duration>,
    /// The state's arrival to the frame that presented it.
    pub frame_wait: Duration,
}

/// The latency model: the range of total latency a greedy pipeline allows for one round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyModel {
    /// `ceil(round_trip / frame) * frame`: the state can come back no sooner than the round
    /// trip and shows on the frame after it arrives. The fast path's every sample.
    pub best: Duration,
    /// `ceil((round_trip + tick) / frame) * frame`: the server may hold the input up to a tick.
    pub worst: Duration,
}

impl LatencyModel {
    /// The model for a `round_trip`, the client's `frame` time and the server's `tick` time.
    pub fn new(round_trip: Duration, frame: Duration, tick: Duration) -> Self {
        let frame_s = frame.as_secs_f64().max(1e-9);
        // A nanosecond's slack, so that a round trip of exactly n frames is n frames.
        let whole = |t: Duration| ((t.as_secs_f64() - 1e-9) / frame_s).ceil().max(0.0);
        Self {
            best: frame.mul_f64(whole(round_trip)),
            worst: frame.mul_f64(whole(round_trip + tick)),
        }
    }

    /// Whether `latency` lies within the model, give or take `slack`.
    pub fn contains(&self, latency: Duration, slack: Duration) -> bool {
        latency + slack >= self.best && latency <= self.worst + slack
    }
}

/// The times of the frames a client presented, the newest kept: the clock to judge latency
/// samples on when frames are not steady.
///
/// [`LatencyModel`] assumes a frame every `frame`, the input sampled at one: a frame that
/// starts late lengthens one sample and shortens the next, and both fall outside it though
/// the pipeline lost nothing. Judged on the real frames, a state reflecting an input sampled
/// at `t` shows at best on the first frame started at or after `t + round_trip`, and at worst
/// (the server held it a tick) on the first started at or after `t + round_trip + tick`: the
/// model, with the frames the game presented in place of multiples of `frame`.
///
/// The model's frame takes its input and its state at one instant, its start, and the state
/// reflecting that input shows at the earliest on the next frame: each frame is kept with its
/// start, and a sample's best frame is the first that started a round trip or more after the
/// input was sampled. A frame that sends its input and reads the state after (an I/O thread
/// decoding the answer meanwhile, on loopback) may show its own input, sooner than the model
/// allows: early, which counts at best ([`Verdict::at_best`]). Judged on the presents alone,
/// the frame that sampled the input was its best whenever the answer came before that frame's
/// present, and a sample shown by the next frame, the model's L_best, counted a frame late.
#[derive(Debug, Clone)]
pub struct PresentedFrames {
    /// Each frame's start and its present, ascending.
    times: VecDeque<(Instant, Instant)>,
    kept: usize,
}

/// Where a sample lies on [`PresentedFrames`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Shown before its best frame, by more than the slack: by the frame that sampled it (the
    /// answer read after the send), or on a round trip over-estimated. Counts at best.
    Early,
    /// Shown by its best frame, give or take the slack: the fast path's every sample.
    AtBest,
    /// Shown after its best frame and by its worst, give or take the slack (the server held
    /// it up to a tick).
    Within,
    /// Shown after its worst frame, by more than the slack.
    Late,
}

impl Verdict {
    /// Whether the sample took no longer than its best frame allowed. An early sample did:
    /// its own frame read the answer after sending (sooner than the model's next frame), or
    /// the round trip it was judged by was longer than its own (the smoothed RTT standing in).
    pub fn at_best(self) -> bool {
        matches!(self, Self::Early | Self::AtBest)
    }

    /// Whether the sample took no longer than the model's worst frame (early ones included,
    /// as in [`Verdict::at_best`]).
    pub fn within_model(self) -> bool {
        self != Self::Late
    }
}

impl PresentedFrames {
    /// Keeps the newest `kept` frames (at least one).
    pub fn new(kept: usize) -> Self {
        Self { times: VecDeque::new(), kept: kept.max(1) }
    }

    /// A frame was presented at `at`, its start taken as its present (times ascending).
    pub fn presented(&mut self, at: Instant) {
        self.presented_from(at, at);
    }

    /// A frame that started (took its input and state) at `started` was presented at `at`
    /// (`started` at or before `at`; times ascending).
    pub fn presented_from(&mut self, at: Instant, started: Instant) {
        if self.times.len() >= self.kept {
            self.times.pop_front();
        }
        self.times.push_back((started.min(at), at));
    }

    /// The verdict on `sample`, presented at `presented`, for its `round_trip` and the
    /// server's `tick`, give or take `slack`, with the present time of its best frame (to tell
    /// a sample that missed a frame from one held longer); `None` when it was sampled before
    /// the oldest frame kept (its best frame may be gone).
    pub fn judge(
        &self,
        presented: Instant,
        sample: &LatencySample,
        round_trip: Duration,
        tick: Duration,
        slack: Duration,
    ) -> Option<(Verdict, Instant)> {
        let sampled = presented.as_nanos().checked_sub(sample.total.as_nanos() as u64)?;
        let sampled = Instant::from_nanos(sampled);
        if self.times.front().is_none_or(|&(_, oldest)| sampled < oldest) {
            return None;
        }
        // The present of the first frame that started at or after `t`; with none kept yet,
        // the frame the model would name is not yet presented: `t` itself, or the sample's
        // own frame if later.
        let first_from = |t: Instant| {
            let at = self.times.partition_point(|&(started, _)| started < t);
            self.times.get(at).map_or(t.max(presented), |&(_, shown)| shown)
        };
        let best = first_from(sampled + round_trip);
        let worst = first_from(sampled + round_trip + tick);
        let verdict = if presented + slack < best {
            Verdict::Early
        } else if presented <= best + slack {
            Verdict::AtBest
        } else if presented <= worst + slack {
            Verdict::Within
        } else {
            Verdict::Late
        };
        Some((verdict, best))
    }
}

/// An input between sampling and presentation.
#[derive(Debug, Clone, Copy)]
struct Pending {
    seq: u32,
    sampled: Instant,
    sent: Option<Instant>,
    /// When the first state reflecting it arrived, and the hold that state reported.
    arrived: Option<(Instant, Option<Duration>)>,
}

/// Total latency of this client's inputs, sampled to presented: a histogram, a running mean
/// and maximum, and the samples themselves until taken.
#[derive(Debug, Clone)]
pub struct LatencyMeter {
    pending: VecDeque<Pending>,
    samples: Vec<LatencySample>,
    histogram: Vec<u64>,
    /// Inputs measured.
    pub count: u64,
    /// Sum of their latencies.
    pub total: Duration,
    /// The largest.
    pub max: Duration,
}

impl Default for LatencyMeter {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
            samples: Vec::new(),
            histogram: vec![0; HISTOGRAM_BUCKETS],
            count: 0,
            total: Duration::ZERO,
            max: Duration::ZERO,
        }
    }
}

impl LatencyMeter {
    /// Input `seq` was sampled at `at`; `sent` if it goes out at once.
    pub(crate) fn sampled(&mut self, seq: u32, at: Instant, sent: bool) {
        if self.pending.len() >= PENDING_MAX {
            self.pending.pop_front();
        }
        let sent = sent.then_some(at);
        self.pending.push_back(Pending { seq, sampled: at, sent, arrived: None });
    }

    /// Every input up to `seq` not sent yet goes out at `now`.
    pub(crate) fn released(&mut self, seq: u32, now: Instant) {
        for pending in self.pending.iter_mut().filter(|p| !seq32_newer(p.seq, seq)) {
            pending.sent.get_or_insert(now);
        }
    }

    /// Input `seq` went out at `now`, later than it was marked sent (handed to another
    /// thread first).
    pub(crate) fn sent_at(&mut self, seq: u32, now: Instant) {
        if let Some(pending) = self.pending.iter_mut().rev().find(|p| p.seq == seq) {
            pending.sent = Some(now);
        }
    }

    /// State reflecting every input up to `reflected` arrived at `now`; `hold` tells how long
    /// the server held an input, where the state said.
    pub(crate) fn arrived(
        &mut self,
        now: Instant,
        reflected: u32,
        hold: impl Fn(u32) -> Option<Duration>,
    ) {
        for pending in &mut self.pending {
            if seq32_newer(pending.seq, reflected) {
                break;
            }
            if pending.arrived.is_none() {
                pending.arrived = Some((now, hold(pending.seq)));
            }
        }
    }

    /// A frame presented at `now` shows every input whose state has arrived.
    pub(crate) fn presented(&mut self, now: Instant) {
        self.presented_through(now, Instant::from_nanos(u64::MAX));
    }

    /// A frame presented at `now` shows every input whose state arrived by `arrived_by`.
    pub(crate) fn presented_through(&mut self, now: Instant, arrived_by: Instant) {
        while let Some(&Pending { seq, sampled, sent, arrived: Some((arrived, hold)) }) =
            self.pending.front()
        {
            if arrived > arrived_by {
                break;
            }
            self.pending.pop_front();
            let sent = sent.unwrap_or(sampled);
            let sample = LatencySample {
                seq,
                total: now.saturating_duration_since(sampled),
                round_trip: hold.map(|h| arrived.saturating_duration_since(sent).saturating_sub(h)),
                server_hold: hold,
                frame_wait: now.saturating_duration_since(arrived),
            };
            self.record(sample);
        }
    }

    fn record(&mut self, sample: LatencySample) {
        self.count += 1;
        self.total += sample.total;
        self.max = self.max.max(sample.total);
        let bucket = (sample.total.as_millis() as usize).min(HISTOGRAM_BUCKETS - 1);
        self.histogram[bucket] += 1;
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(sample);
        }
    }

    /// Mean total latency.
    pub fn mean(&self) -> Duration {
        self.total.checked_div(self.count.max(1) as u32).unwrap_or_default()
    }

    /// Inputs measured per millisecond of total latency: bucket `i` counts latencies from `i`
    /// to `i + 1` ms, the last bucket everything longer.
    pub fn histogram(&self) -> &[u64] {
        &self.histogram
    }

    /// Takes the samples measured since the last call, oldest first.
    pub fn take_samples(&mut self) -> Vec<LatencySample> {
        std::mem::take(&mut self.samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: f64) -> Duration {
        Duration::from_secs_f64(ms / 1000.0)
    }

    #[test]
    fn the_meter_keeps_pending_max_inputs_and_samples_max_samples() {
        // Goal: a client that never presents (or never takes its samples) holds a bounded
        // meter: the oldest inputs are given up on, samples past the limit are counted in the
        // mean but not kept. Method: ten more than each limit.
        let mut meter = LatencyMeter::default();
        for seq in 0..PENDING_MAX as u32 + 10 {
            meter.sampled(seq, Instant::ZERO, true);
        }
        assert_eq!(meter.pending.len(), PENDING_MAX);
        assert_eq!(meter.pending.front().map(|p| p.seq), Some(10));
        let sample = LatencySample {
            seq: 0,
            total: ms(20.0),
            round_trip: None,
            server_hold: None,
            frame_wait: Duration::ZERO,
        };
        for _ in 0..SAMPLES_MAX + 10 {
            meter.record(sample);
        }
        assert_eq!((meter.samples.len(), meter.count), (SAMPLES_MAX, SAMPLES_MAX as u64 + 10));
    }

    fn presented(kept: usize, times_ms: &[f64]) -> PresentedFrames {
        let mut frames = PresentedFrames::new(kept);
        for t in times_ms {
            frames.presented(Instant::ZERO + ms(*t));
        }
        frames
    }

    fn judged_sample(round_trip: Duration) -> LatencySample {
        LatencySample {
            seq: 0,
            total: Duration::ZERO,
            round_trip: Some(round_trip),
            server_hold: None,
            frame_wait: Duration::ZERO,
        }
    }

    #[test]
    fn samples_are_judged_on_the_frames_presented_not_on_a_steady_frame() {
        // Goal: a frame that starts late neither makes its own sample late nor the next one
        // early, while a state that really missed its frame, or came a frame before its round
        // trip allowed, is counted so. Method: frames at 0, 10, 25 (late), 30, 40 ms, 10 ms
        // apart when steady; a 5 ms tick; a 2 ms round trip, sample by sample.
        let frames = presented(16, &[0.0, 10.0, 25.0, 30.0, 40.0]);
        let judge = |sampled: f64, presented: f64, round_trip: f64| {
            let sample =
                LatencySample { total: ms(presented - sampled), ..judged_sample(ms(round_trip)) };
            let (presented, slack) = (Instant::ZERO + ms(presented), ms(1.0));
            frames.judge(presented, &sample, ms(round_trip), ms(5.0), slack).map(|(v, _)| v)
        };
        // Sampled at 10, shown at the late frame (25): 15 ms, over a steady model's 10 + 1.
        let steady = LatencyModel::new(ms(2.0), ms(10.0), ms(5.0));
        assert_eq!(judge(10.0, 25.0, 2.0), Some(Verdict::AtBest));
        assert!(!steady.contains(ms(15.0), ms(1.0)));
        // The next, sampled at 25 and shown at 30: 5 ms, under a steady model, yet its best.
        assert_eq!(judge(25.0, 30.0, 2.0), Some(Verdict::AtBest));
        assert!(!steady.contains(ms(5.0), ms(1.0)));
        // Held a tick (back past 30 ms): shown at 40 from 25 is the worst frame; from 10
        // (worst 25) it is late.
        assert_eq!(judge(25.0, 40.0, 2.0), Some(Verdict::Within));
        assert_eq!(judge(10.0, 40.0, 2.0), Some(Verdict::Late));
        // Shown by its own frame with a 2 ms round trip: sooner than the state could come.
        assert_eq!(judge(25.0, 25.0, 2.0), Some(Verdict::Early));
        // A millisecond past the worst frame is the slack; sampled before the frames kept,
        // not judged.
        assert_eq!(judge(0.0, 11.0, 2.0), Some(Verdict::AtBest));
        assert_eq!(judge(0.0, 12.0, 2.0), Some(Verdict::Late));
        let two = presented(2, &[10.0, 25.0, 30.0, 40.0, 50.0]);
        let sample = LatencySample { total: ms(20.0), ..judged_sample(ms(2.0)) };
        let old = two.judge(Instant::ZERO + ms(50.0), &sample, ms(2.0), ms(5.0), ms(1.0));
        let old = old.map(|(verdict, _)| verdict);
        assert_eq!(old, None, "sampled at 30, before the two frames kept (40, 50)");
    }

    #[test]
    fn a_samples_best_frame_is_the_first_to_start_a_round_trip_after_it() {
        // Goal: with an I/O thread a frame sends its input, reads the state, presents; the
        // answer (a 0.3 ms round trip on loopback) comes before that frame's present. Shown by
        // the next frame, the model's L_best, it is at best; shown by its own frame, early
        // (better than the model), which counts at best too. Judged on the presents alone,
        // the first was a frame late: the bug that put the share at L_best at 27 to 44%.
        // Method: frames started at 0, 10, 20 ms and presented 1 ms after; sampled at 10.
        let mut frames = PresentedFrames::new(16);
        for start in [0.0, 10.0, 20.0] {
            frames.presented_from(Instant::ZERO + ms(start + 1.0), Instant::ZERO + ms(start));
        }
        let at = |t: f64| Instant::ZERO + ms(t);
        let judge = |frames: &PresentedFrames, presented: f64| {
            let sample = LatencySample { total: ms(presented - 10.0), ..judged_sample(ms(0.3)) };
            frames.judge(at(presented), &sample, ms(0.3), ms(8.0), Duration::ZERO)
        };
        assert_eq!(judge(&frames, 21.0), Some((Verdict::AtBest, at(21.0))));
        assert_eq!(judge(&frames, 11.0), Some((Verdict::Early, at(21.0))));
        assert!(Verdict::Early.at_best());
        // The old rule, the presents taken as the frames' starts: a frame late.
        let presents = presented(4, &[1.0, 11.0, 21.0]);
        assert_eq!(judge(&presents, 21.0), Some((Verdict::Within, at(11.0))));
    }

    #[test]
    fn an_early_sample_counts_at_best_and_within_the_model() {
        // Goal: a sample shown before its best frame (its round trip over-estimated, as when
        // the smoothed RTT stands in) did not wait longer than the floor: at best, within the
        // model; only a late one is outside it, and only a sample past its best frame is not
        // at best.
        let verdicts = [Verdict::Early, Verdict::AtBest, Verdict::Within, Verdict::Late];
        let at_best = verdicts.map(Verdict::at_best);
        let within = verdicts.map(Verdict::within_model);
        assert_eq!(at_best, [true, true, false, false]);
        assert_eq!(within, [true, true, true, false]);
    }

    #[test]
    fn an_input_handed_to_another_thread_counts_the_hand_off_outside_the_round_trip() {
        // Goal: an input sampled on the game thread and sent by the I/O thread 3 ms later has
        // a round trip from its send, so that a slow hand-off shows as the client's wait.
        let mut meter = LatencyMeter::default();
        meter.sampled(1, Instant::ZERO, true);
        meter.sent_at(1, Instant::ZERO + ms(3.0));
        meter.arrived(Instant::ZERO + ms(10.0), 1, |_| Some(Duration::ZERO));
        meter.presented(Instant::ZERO + ms(12.0));
        let sample = meter.take_samples()[0];
        assert_eq!((sample.total, sample.round_trip), (ms(12.0), Some(ms(7.0))));
    }

    #[test]
    fn model_rounds_the_round_trip_up_to_frames_and_adds_a_tick() {
        let dt = ms(1000.0 / 120.0);
        let model = LatencyModel::new(ms(10.0), dt, dt);
        assert!((model.best.as_secs_f64() * 1e3 - 16.667).abs() < 0.01, "{model:?}");
        assert!((model.worst.as_secs_f64() * 1e3 - 25.0).abs() < 0.01, "{model:?}");
        // A round trip of exactly two frames is two frames, not three.
        let exact = LatencyModel::new(dt * 2, dt, dt);
        assert_eq!(exact.best, dt * 2);
        // A slower server only widens the upper end.
        let slow = LatencyModel::new(ms(10.0), dt, ms(50.0));
        assert_eq!(slow.best, model.best);
        assert!(slow.worst > model.worst + ms(30.0));
        assert!(model.contains(ms(16.0), ms(1.0)) && !model.contains(ms(15.0), ms(1.0)));
    }

    #[test]
    fn samples_split_total_latency_into_its_parts() {
        let mut meter = LatencyMeter::default();
        let t0 = Instant::ZERO + ms(100.0);
        meter.sampled(7, t0, true);
        meter.sampled(8, t0 + ms(8.0), true);
        // One state reflects both; the server held 8 for 1 ms and 7 for 9 ms.
        let holds = |seq| Some(if seq == 8 { ms(1.0) } else { ms(9.0) });
        meter.arrived(t0 + ms(20.0), 8, holds);
        meter.presented(t0 + ms(24.0));
        let samples = meter.take_samples();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].total, ms(24.0));
        assert_eq!(samples[0].round_trip, Some(ms(11.0)));
        assert_eq!(samples[1].total, ms(16.0));
        assert_eq!(samples[1].round_trip, Some(ms(11.0)));
        assert_eq!(samples[1].frame_wait, ms(4.0));
        assert_eq!(meter.count, 2);
        assert_eq!(meter.histogram()[16] + meter.histogram()[24], 2);
    }

    #[test]
    fn a_deferred_input_counts_its_send_wait_outside_the_round_trip() {
        let mut meter = LatencyMeter::default();
        let t0 = Instant::ZERO;
        meter.sampled(0, t0, false);
        meter.released(0, t0 + ms(5.0));
        meter.arrived(t0 + ms(17.0), 0, |_| Some(ms(2.0)));
        // Nothing is presented before a frame shows it.
        assert!(meter.take_samples().is_empty());
        meter.presented(t0 + ms(20.0));
        let sample = meter.take_samples()[0];
        assert_eq!(sample.round_trip, Some(ms(10.0)));
        assert_eq!(sample.total, ms(20.0));
    }

    #[test]
    fn only_the_first_state_reflecting_an_input_times_it() {
        let mut meter = LatencyMeter::default();
        meter.sampled(3, Instant::ZERO, true);
        meter.arrived(Instant::ZERO + ms(10.0), 3, |_| None);
        meter.arrived(Instant::ZERO + ms(12.0), 3, |_| Some(ms(0.0)));
        meter.presented(Instant::ZERO + ms(13.0));
        let sample = meter.take_samples()[0];
        assert_eq!(sample.frame_wait, ms(3.0));
        assert_eq!(sample.round_trip, None);
    }

    #[test]
    fn a_frame_told_late_closes_only_the_inputs_whose_state_it_could_have_shown() {
        // Goal: a present handed over after more state arrived does not claim that state.
        let mut meter = LatencyMeter::default();
        meter.sampled(0, Instant::ZERO, true);
        meter.sampled(1, Instant::ZERO + ms(1.0), true);
        meter.arrived(Instant::ZERO + ms(10.0), 0, |_| None);
        meter.arrived(Instant::ZERO + ms(12.0), 1, |_| None);
        // The frame read its entities when only input 0's state had arrived.
        meter.presented_through(Instant::ZERO + ms(13.0), Instant::ZERO + ms(11.0));
        let first = meter.take_samples();
        assert_eq!(first.iter().map(|s| s.seq).collect::<Vec<_>>(), [0]);
        meter.presented_through(Instant::ZERO + ms(24.0), Instant::ZERO + ms(12.0));
        assert_eq!(meter.take_samples()[0].total, ms(23.0));
    }
}

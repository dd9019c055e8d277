//! The browser player in plain Rust: an [`Endpoint`] and a [`ClientSession`] pumped by the
//! page, with no socket and no clock. The page hands in every datagram the WebSocket brought
//! and the time it arrived, and takes out every datagram to send; the room's address in the
//! token only names the connection, since the gateway carries every datagram to the room.

use rally_engine::{
    connection_config, ClientConfig, ClientEvent, ClientSession, LatencyModel, LatencySample,
    PresentedFrames,
};
use rally_proto::{
    ConnectToken, ConnectionHandle, DisconnectReason, Endpoint, EndpointConfig, EndpointRandomness,
    Event, Instant,
};
use rally_sim::sandbox::HandInput;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// Latency samples kept for the meter's figures: the newest ones.
pub const SAMPLES_KEPT: usize = 1024;
/// Frames (their present times) kept to judge the samples on the page's own frame clock: more
/// than the kept samples span, since a sample takes at least a frame.
const FRAMES_KEPT: usize = 4 * SAMPLES_KEPT;
/// The largest datagram the endpoint writes (its MTU is smaller; this is the buffer).
const DATAGRAM_MAX: usize = 2048;

/// Where the player's connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// No connection yet.
    Idle,
    /// Handshaking or playing on this connection with the room at this address.
    Live(ConnectionHandle, SocketAddr),
    /// The connection ended, for this reason.
    Ended(String),
}

/// What the page shows under the table: the connection's figures and the latency meter's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// The room's id for this player, once joined.
    pub client: Option<u32>,
    /// Smoothed round-trip time, ms.
    pub rtt_ms: f64,
    /// Loss rate, 0 to 1.
    pub loss: f64,
    /// Latency samples measured so far.
    pub samples: u64,
    /// Mean and p99 total latency of the kept samples, ms.
    pub mean_ms: f64,
    /// The p99 of the kept samples, ms.
    pub p99_ms: f64,
    /// The model's bounds for the newest sample, ms.
    pub best_ms: f64,
    /// The model's upper bound for the newest sample, ms.
    pub worst_ms: f64,
    /// The share of kept samples within the model on the page's own frame clock (1 ms of
    /// slack), 0 to 1: the greedy pipeline's target is all of them. See `judge` in this module.
    pub within: f64,
    /// The share of kept samples presented at most 1 ms after the model's best frame, 0 to 1:
    /// the fast path's target is all of them.
    pub at_best: f64,
    /// The share within the model of a steady frame of the median interval, `best_ms` to
    /// `worst_ms` (what `within` was before the frame clock): a browser's frames are not
    /// steady, so this one counts a long frame as a late sample.
    pub within_steady: f64,
    /// Why the samples not at best were late (docs/web.md: where the fast path's misses
    /// come from).
    pub late: Late,
}

/// The samples presented later than the model's best frame, by where the time went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Late {
    /// The state arrived before the best frame began, yet showed on a later one: the page
    /// took it from the transport after that frame had read the state.
    pub missed_frame: u32,
    /// Of those, the longest time from the state's arrival to the best frame, ms: how long
    /// the hand-over from the transport to the frame loop took at most.
    pub missed_by_ms: f64,
    /// The state arrived after the best frame: the server's hold or the page's wait to send
    /// the input pushed it past (a delay on the way only lengthens the sample's own round
    /// trip, and its best frame with it).
    pub held: u32,
    /// The state did not report its hold (a lost snapshot), so the round trip judged was
    /// the smoothed one.
    pub unknown_round_trip: u32,
}

/// The browser's player.
pub struct Player {
    endpoint: Endpoint,
    session: ClientSession<HandInput, ()>,
    phase: Phase,
    frame: Duration,
    /// The kept samples, each with the time of the frame that presented it.
    latency: VecDeque<(Instant, LatencySample)>,
    /// The present times of the newest frames.
    frames: PresentedFrames,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Player {
    // The endpoint holds secrets: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Player").field("phase", &self.phase).finish_non_exhaustive()
    }
}

impl Player {
    /// A player whose secrets come from `random` (24 bytes of the browser's
    /// `crypto.getRandomValues`) and whose display shows a frame every `frame_us`.
    pub fn new(random: &[u8], frame_us: u32) -> Result<Self, String> {
        let random: &[u8; 24] =
            random.try_into().map_err(|_| format!("give 24 random bytes, not {}", random.len()))?;
        if frame_us == 0 || frame_us > 1_000_000 {
            return Err(format!("frame_us = {frame_us}: give the display's frame time in us"));
        }
        let (seed, secret) = random.split_at(8);
        let randomness = EndpointRandomness {
            seed: u64::from_le_bytes(seed.try_into().expect("8 bytes")),
            cookie_secret: secret.try_into().expect("16 bytes"),
        };
        let config = EndpointConfig { connection: connection_config(), ..Default::default() };
        let endpoint = Endpoint::new(config, randomness).map_err(|e| e.to_string())?;
        let session = ClientSession::new(ClientConfig::default()).map_err(|e| e.to_string())?;
        Ok(Self {
            endpoint,
            session,
            phase: Phase::Idle,
            frame: Duration::from_micros(frame_us.into()),
            latency: VecDeque::new(),
            frames: PresentedFrames::new(FRAMES_KEPT),
            buf: vec![0; DATAGRAM_MAX],
        })
    }

    /// Starts connecting with `token` (as the backend encoded it), refusing an expired one
    /// here since a room drops it without a word.
    pub fn connect(&mut self, now: Instant, token: &[u8], unix_now: u64) -> Result<(), String> {
        if self.phase != Phase::Idle {
            return Err("already connected: make a new player to connect again".into());
        }
        let token = ConnectToken::decode(token).map_err(|e| format!("not a connect token: {e}"))?;
        if token.expires_at <= unix_now {
            return Err("the connect token expired: reload the page for a fresh one".into());
        }
        let server = *token.server_addresses.first().ok_or("the token names no room")?;
        let connection = self
            .endpoint
            .connect_with_token(now, token)
            .map_err(|e| format!("the token was refused: {e}"))?;
        self.phase = Phase::Live(connection, server);
        Ok(())
    }

    /// One datagram from the gateway, as it arrived at `now`.
    pub fn receive(&mut self, now: Instant, datagram: &[u8]) {
        if let Phase::Live(_, server) = self.phase {
            self.endpoint.handle_datagram(now, server, datagram);
            self.drain_events(now);
        }
    }

    /// Timers and the session's turn: call once a frame, before reading the state.
    pub fn update(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        self.drain_events(now);
        self.session.handle_timeout(now);
        self.session.transmit(&mut self.endpoint);
        while let Some(event) = self.session.poll_event() {
            // The table-tennis room sends no messages; joining shows in `figures`.
            let _: ClientEvent<()> = event;
        }
    }

    fn drain_events(&mut self, now: Instant) {
        while let Some((connection, event)) = self.endpoint.poll_event() {
            if let Event::Disconnected { reason } = &event {
                self.phase = Phase::Ended(format!("{reason:?}"));
            }
            self.session.handle_event(now, connection, event);
        }
    }

    /// The next datagram to send through the gateway, if any.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        let transmit = self.endpoint.poll_transmit(now, &mut self.buf)?;
        Some(self.buf[..transmit.len].to_vec())
    }

    /// Sends the hand's pose sampled at `now`, at once (the next `poll_transmit` has it).
    pub fn send_hand(&mut self, now: Instant, hand: HandInput) -> Option<u32> {
        self.session.client_id()?;
        let seq = self.session.send_input(now, hand);
        self.session.transmit(&mut self.endpoint);
        Some(seq)
    }

    /// Tells the latency meter a frame showing the newest state was presented at `now`.
    pub fn present(&mut self, now: Instant) {
        self.session.present(now);
        // The samples this frame completed were presented now: kept with its time.
        let samples = self.session.latency_mut().take_samples();
        self.latency.extend(samples.into_iter().map(|s| (now, s)));
        let excess = self.latency.len().saturating_sub(SAMPLES_KEPT);
        self.latency.drain(..excess);
        self.frames.presented(now);
    }

    /// Each entity as `[id, x, y, z]`, interpolated at `now` where the session can.
    pub fn entities(&mut self, now: Instant) -> Vec<f32> {
        let newest: Vec<_> = self.session.entities().collect();
        let mut out = Vec::with_capacity(newest.len() * 4);
        for entity in newest {
            let shown = self.session.interpolated(now, entity.id).map(|i| i.state);
            let position = shown.map_or(entity.position, |s| s.position);
            out.extend([entity.id as f32, position.x, position.y, position.z]);
        }
        out
    }

    /// The display's frame interval as the page measures it (a browser's rate is its own:
    /// 60 Hz, 120 Hz, throttled in a background tab), for the latency model; 0 is ignored.
    pub fn set_frame(&mut self, frame_us: u32) {
        if frame_us > 0 && frame_us <= 1_000_000 {
            self.frame = Duration::from_micros(frame_us.into());
        }
    }

    /// Says goodbye to the room (the next `poll_transmit`s carry it), so that a closing tab's
    /// player leaves at once rather than by timeout.
    pub fn close(&mut self) {
        if let Phase::Live(connection, _) = self.phase {
            self.endpoint.disconnect(connection, DisconnectReason::Closed);
            self.phase = Phase::Ended("Closed".into());
        }
    }

    /// Where the connection is.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The connection's and the latency meter's figures.
    pub fn figures(&self) -> Figures {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut out = Figures {
            client: self.session.client_id(),
            samples: self.session.latency().count,
            ..Figures::default()
        };
        let stats = self.session.connection_stats(&self.endpoint);
        let rtt = stats.as_ref().map_or(Duration::ZERO, |s| s.rtt);
        (out.rtt_ms, out.loss) = (ms(rtt), stats.map_or(0.0, |s| s.loss));
        let mut totals: Vec<Duration> = self.latency.iter().map(|(_, s)| s.total).collect();
        totals.sort_unstable();
        let (Some(tick_rate), false) = (self.session.tick_rate(), totals.is_empty()) else {
            return out;
        };
        out.mean_ms = ms(totals.iter().sum::<Duration>() / totals.len() as u32);
        out.p99_ms = ms(totals[(totals.len() * 99).div_ceil(100) - 1]);
        let tick = Duration::from_secs(1) / tick_rate.max(1);
        let round_trip = |s: &LatencySample| s.round_trip.unwrap_or(rtt);
        let judged = judge(&self.latency, &self.frames, round_trip, tick);
        (out.within, out.at_best, out.late) = (judged.within, judged.at_best, judged.late);
        let model = |s: &LatencySample| LatencyModel::new(round_trip(s), self.frame, tick);
        let slack = Duration::from_millis(1);
        let steady = self.latency.iter().filter(|(_, s)| model(s).contains(s.total, slack));
        out.within_steady = steady.count() as f64 / self.latency.len() as f64;
        if let Some(newest) = self.latency.back().map(|(_, s)| model(s)) {
            (out.best_ms, out.worst_ms) = (ms(newest.best), ms(newest.worst));
        }
        out
    }
}

/// The shares of `samples` (each with its frame's present time) within the model and at its
/// best, judged on the page's own frame clock, `frames` (present times, oldest first), with
/// the 1 ms of slack of docs/design.md's W2 targets.
///
/// The model of docs/design.md on a steady frame `F` says the state reflecting an input
/// sampled at a frame shows on the first frame at least a round trip later (`L_best =
/// ceil(RTT / F) * F`), or, if the server held it a tick, the first frame at least a round trip
/// and a tick later (`L_worst`). A browser's frames are not steady (a frame drawn in software
/// takes what its pixels take), so here those frames are found among the frames the page
/// presented: the same model, with the real frame times in place of multiples of `F`. Samples
/// older than the kept frames are not judged; none judged gives 0. The verdicts are
/// `rally_engine::PresentedFrames::judge`'s, as the C ABI's meter gives them: a sample
/// shown before its best frame (its round trip over-estimated) counts at best and within.
fn judge<'a>(
    samples: impl IntoIterator<Item = &'a (Instant, LatencySample)>,
    frames: &PresentedFrames,
    round_trip: impl Fn(&LatencySample) -> Duration,
    tick: Duration,
) -> Judged {
    let slack = Duration::from_millis(1);
    let (mut judged, mut within, mut at_best) = (0usize, 0usize, 0usize);
    let mut late = Late::default();
    for (presented, sample) in samples {
        let Some((verdict, best)) =
            frames.judge(*presented, sample, round_trip(sample), tick, slack)
        else {
            continue;
        };
        judged += 1;
        within += usize::from(verdict.within_model());
        if verdict.at_best() {
            at_best += 1;
        } else {
            late.count(sample, *presented, best);
        }
    }
    let share = |n: usize| if judged == 0 { 0.0 } else { n as f64 / judged as f64 };
    Judged { within: share(within), at_best: share(at_best), late }
}

/// What [`judge`] found: the shares within the model and at its best, and why the rest of
/// the samples were late.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Judged {
    within: f64,
    at_best: f64,
    late: Late,
}

impl Late {
    /// Counts a sample presented at `presented`, after its `best` frame, by where it lost time.
    fn count(&mut self, sample: &LatencySample, presented: Instant, best: Instant) {
        if sample.round_trip.is_none() {
            self.unknown_round_trip += 1;
            return;
        }
        let arrived = Instant::from_nanos(
            presented.as_nanos().saturating_sub(sample.frame_wait.as_nanos() as u64),
        );
        if arrived <= best {
            self.missed_frame += 1;
            let by = best.saturating_duration_since(arrived).as_secs_f64() * 1e3;
            self.missed_by_ms = self.missed_by_ms.max(by);
        } else {
            self.held += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        assert!(Player::new(&[0; 23], 16_667).unwrap_err().contains("24 random bytes"));
        assert!(Player::new(&[0; 24], 0).is_err());
        let mut player = Player::new(&[0; 24], 16_667).unwrap();
        let now = Instant::from_nanos(0);
        assert!(player.connect(now, b"garbage", 0).unwrap_err().contains("not a connect token"));
        assert_eq!(player.phase(), &Phase::Idle);
        // Nothing to send and nothing to show before connecting; datagrams are ignored.
        player.receive(now, &[1, 2, 3]);
        player.update(now);
        assert_eq!(player.poll_transmit(now), None);
        assert!(player.entities(now).is_empty());
        assert_eq!(player.figures().client, None);
    }

    fn ms(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// A sample presented at `presented` ms, sampled at `sampled` ms, with its round trip.
    fn sample(sampled: u64, presented: u64, round_trip: u64) -> (Instant, LatencySample) {
        let sample = LatencySample {
            seq: 0,
            total: Duration::from_millis(presented - sampled),
            round_trip: Some(Duration::from_millis(round_trip)),
            server_hold: Some(Duration::ZERO),
            frame_wait: Duration::ZERO,
        };
        (ms(presented), sample)
    }

    #[test]
    fn samples_are_judged_on_the_pages_own_frames() {
        // Frames that are not steady (a slow one from 50 to 120 ms), a 10 ms tick.
        let frames = frames_at(&[10, 50, 120, 150, 200]);
        let judge = |samples: &[(Instant, LatencySample)]| {
            let judged = judge(samples, &frames, |s| s.round_trip.unwrap(), ms10());
            (judged.within, judged.at_best)
        };
        // Sampled at 50 with a 2 ms round trip: the best frame is 120, 70 ms later; a steady
        // 50 ms frame would call it late. Shown at 150 it is a frame late.
        assert_eq!(judge(&[sample(50, 120, 2)]), (1.0, 1.0));
        assert_eq!(judge(&[sample(50, 150, 2)]), (0.0, 0.0));
        // A 25 ms round trip from 120: best at 150, worst (155 ms) at 200; shown at 200 it is
        // within but not at best.
        assert_eq!(judge(&[sample(120, 200, 25), sample(120, 150, 25)]), (1.0, 0.5));
        // A millisecond late is the slack, two are not; samples older than the kept frames
        // are not judged.
        assert_eq!(judge(&[sample(150, 201, 2)]), (1.0, 1.0));
        assert_eq!(judge(&[sample(150, 202, 2)]), (0.0, 0.0));
        assert_eq!(judge(&[sample(0, 50, 1)]), (0.0, 0.0));
        // Shown at 150 from 120 with a 40 ms round trip (best frame 200): sooner than the
        // round trip allows, so the round trip was over-estimated: at best and within.
        assert_eq!(judge(&[sample(120, 150, 40)]), (1.0, 1.0));
    }

    /// Frames presented at these times (ms).
    fn frames_at(times: &[u64]) -> PresentedFrames {
        let mut frames = PresentedFrames::new(16);
        times.iter().for_each(|&t| frames.presented(ms(t)));
        frames
    }

    fn ms10() -> Duration {
        Duration::from_millis(10)
    }

    #[test]
    fn late_samples_say_where_their_time_went() {
        let frames = frames_at(&[10, 50, 100, 150]);
        // Sampled at 50, a 20 ms round trip: best frame 100. Each is shown at 150.
        let late = |frame_wait: u64, round_trip: Option<Duration>| {
            let (presented, mut s) = sample(50, 150, 20);
            (s.frame_wait, s.round_trip) = (Duration::from_millis(frame_wait), round_trip);
            judge(&[(presented, s)], &frames, |s| s.round_trip.unwrap_or(ms10()), ms10()).late
        };
        // Arrived at 97, 3 ms before the best frame, which did not show it: a missed frame.
        let missed = late(53, Some(ms10() * 2));
        assert_eq!((missed.missed_frame, missed.held, missed.unknown_round_trip), (1, 0, 0));
        assert!((missed.missed_by_ms - 3.0).abs() < 1e-9, "{missed:?}");
        // Arrived at 110, after the best frame: the hold pushed it past.
        let held = late(40, Some(ms10() * 2));
        assert_eq!((held.missed_frame, held.held, held.unknown_round_trip), (0, 1, 0));
        // No hold reported: judged on the smoothed round trip, counted apart.
        let unknown = late(40, None);
        assert_eq!((unknown.missed_frame, unknown.held, unknown.unknown_round_trip), (0, 0, 1));
    }
}

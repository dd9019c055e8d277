//! Interpolation of remote objects: smooth motion at the least latency the link allows.
//!
//! A client that shows each entity's newest state shows motion as it arrives: when the link's
//! jitter delays one update and bunches it with the next, a frame shows nothing new and the
//! next jumps two steps. Mainstream engines hide this behind a fixed buffer of two or three
//! updates (28 to 75 ms at their defaults); the buffer here is sized to the jitter measured,
//! per object class, and is zero on a link without jitter.
//!
//! Each update carries its server time: a snapshot's tick times the tick period, a fast-path
//! pose its tick plus the offset at which the server sent it. For every update the client
//! records `offset = arrival - server time` (its clock and the server's need not agree: only
//! differences of offsets are used). The smallest recent offset is the fastest path; how far
//! each update came behind it is its jitter. A class's buffer is a high quantile of its recent
//! jitter, so it starts at zero, grows only as far as the jitter seen, and shrinks when the
//! jitter goes. A frame at `now` shows the server time `now - floor - buffer`, interpolated
//! between the two updates around it; past the newest update the motion is extrapolated from
//! the last two, for at most [`InterpolationConfig::extrapolation_max`], and then holds.
//!
//! Classes matter because their updates take different paths: hands and the objects they
//! hold arrive on the fast path the moment their player's input reaches the server, so their
//! timing carries that player's uplink jitter as well; free bodies arrive on the server's
//! ticks. A state that repeats its entity's newest pose is not an update: an entity at rest
//! keeps the time it stopped, and a snapshot repeating a fast-path pose at its later tick
//! does not stall the motion between the two.

use rally_wire::EntityState;
use std::cmp::Ordering::Greater;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::config::{self, ConfigError};
use crate::EntityId;
use rally_proto::Instant;

/// What kind of motion an entity has, which decides whose jitter its buffer absorbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ObjectClass {
    /// A player's hand or controller, driven by that player's inputs.
    Hand,
    /// An object a hand holds, down its grab chain.
    Held,
    /// Anything else: physics bodies, scenery.
    #[default]
    Free,
}

/// Every class, in index order.
pub const CLASSES: [ObjectClass; 3] = [ObjectClass::Hand, ObjectClass::Held, ObjectClass::Free];

impl ObjectClass {
    fn index(self) -> usize {
        self as usize
    }
}

/// How the interpolator sizes its buffers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterpolationConfig {
    /// Recent updates per class whose jitter sizes its buffer (at 128 Hz, 256 is two seconds).
    pub jitter_window: usize,
    /// The fraction of recent updates the buffer must cover: the buffer is this quantile of
    /// their jitter.
    pub jitter_quantile: f64,
    /// How far past its newest update an entity's motion is carried on; then it holds.
    pub extrapolation_max: Duration,
    /// Updates kept per entity.
    pub history_max: usize,
}

impl InterpolationConfig {
    /// Checks every setting against its range (see [`crate::config`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        config::count("interpolation.jitter_window", self.jitter_window, 1..=1 << 16)?;
        let quantile = self.jitter_quantile;
        config::fraction("interpolation.jitter_quantile", quantile, 0.0..=1.0)?;
        let extrapolation = Duration::ZERO..=Duration::from_secs(1);
        config::duration("interpolation.extrapolation_max", self.extrapolation_max, extrapolation)?;
        // Two updates to interpolate between.
        config::count("interpolation.history_max", self.history_max, 2..=1024)
    }
}

impl Default for InterpolationConfig {
    fn default() -> Self {
        Self {
            jitter_window: 256,
            jitter_quantile: 0.98,
            extrapolation_max: Duration::from_millis(25),
            history_max: 16,
        }
    }
}

/// An entity's state for a frame, and how it was made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interpolated {
    /// The state to show.
    pub state: EntityState,
    /// How far the state shown is behind the newest update held, in server time: what
    /// interpolation adds to latency (negative when extrapolating ahead).
    pub behind: f64,
    /// Whether the frame is past the newest update by more than `extrapolation_max`, so the
    /// entity holds still: the buffer was too small for this update's lateness.
    pub starved: bool,
}

/// What one class's timeline measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClassStats {
    /// Updates seen.
    pub updates: u64,
    /// The buffer now, seconds.
    pub buffer: f64,
    /// Entity frames sampled, and those starved.
    pub frames: u64,
    /// Entity frames past the newest update by more than `extrapolation_max`.
    pub starved: u64,
}

/// One class's clock mapping: recent offsets, their floor and the buffer.
#[derive(Debug, Default)]
struct Timeline {
    /// The recent offsets in arrival order, to know which one leaves the window.
    offsets: VecDeque<f64>,
    /// The same offsets ascending: the floor is the first, the buffer a rank above it. Kept
    /// sorted as offsets come and go (a search and a short move each), since this runs for
    /// every update of every class (every snapshot, every fast-path pose) and a fresh
    /// minimum and selection over the window each time cost more than the rest of the update.
    sorted: Vec<f64>,
    floor: f64,
    stats: ClassStats,
}

/// A fresh copy of `source` made by `clone_from`, which the types here write by hand.
fn cloned_from<T: Default + Clone>(source: &T) -> T {
    let mut copy = T::default();
    copy.clone_from(source);
    copy
}

// By hand, so that `clone_from` reuses the copy's buffers: a client that publishes the
// interpolator to another thread copies it at every update, and must not allocate to do so.
impl Clone for Timeline {
    fn clone(&self) -> Self {
        cloned_from(self)
    }

    fn clone_from(&mut self, source: &Self) {
        self.offsets.clone_from(&source.offsets);
        self.sorted.clone_from(&source.sorted);
        self.floor = source.floor;
        self.stats = source.stats;
    }
}

impl Timeline {
    fn observe(&mut self, offset: f64, config: &InterpolationConfig) {
        let place = |sorted: &[f64], o: f64| sorted.partition_point(|x| x.total_cmp(&o).is_lt());
        while self.offsets.len() >= config.jitter_window {
            let Some(old) = self.offsets.pop_front() else { break };
            let at = place(&self.sorted, old);
            self.sorted.remove(at);
        }
        self.offsets.push_back(offset);
        let at = place(&self.sorted, offset);
        self.sorted.insert(at, offset);
        debug_assert_eq!(self.sorted.len(), self.offsets.len());
        self.floor = self.sorted[0];
        let rank = (config.jitter_quantile * (self.sorted.len() - 1) as f64).round() as usize;
        // The rank-th of the offsets less the floor is the rank-th offset less the floor.
        self.stats.buffer = self.sorted[rank] - self.floor;
        self.stats.updates += 1;
    }

    /// The server time a frame at `now` shows, once an update has been seen.
    fn render_time(&self, now: f64) -> Option<f64> {
        (!self.offsets.is_empty()).then_some(now - self.floor - self.stats.buffer)
    }
}

/// An entity's recent updates, by server time.
#[derive(Debug, Default)]
struct Track {
    id: EntityId,
    class: ObjectClass,
    updates: VecDeque<(f64, EntityState)>,
    /// The latest server time at which the newest pose was still current: later than the
    /// newest update when the entity has been at rest since.
    confirmed: f64,
}

impl Clone for Track {
    fn clone(&self) -> Self {
        cloned_from(self)
    }

    fn clone_from(&mut self, source: &Self) {
        (self.id, self.class, self.confirmed) = (source.id, source.class, source.confirmed);
        // A client copies the interpolator to another thread at every update, and most
        // tracks (entities at rest) have not changed: leave their updates unwritten, which
        // spares the copy and keeps those lines clean in the reading thread's cache.
        if !self.same_updates(source) {
            self.updates.clone_from(&source.updates);
        }
    }
}

impl Track {
    /// Whether `other` holds the same updates, looking only at the ends: updates are only
    /// pushed at the back (times strictly rising), dropped at the front, and the newest
    /// replaced in place, so the same length, oldest time and newest update are the same
    /// updates.
    fn same_updates(&self, other: &Self) -> bool {
        let (mine, theirs) = (&self.updates, &other.updates);
        self.id == other.id
            && mine.len() == theirs.len()
            && mine.front().map(|u| u.0) == theirs.front().map(|u| u.0)
            && mine.back() == theirs.back()
    }
}

/// Buffers, interpolates and extrapolates remote entities' states; see the module docs.
/// `clone_from` reuses the copy's buffers: a copy kept up to date allocates nothing once it
/// has seen as many entities and updates as its source.
#[derive(Debug, Default)]
pub struct Interpolator {
    config: InterpolationConfig,
    timelines: [Timeline; 3],
    /// Every entity's track, ids ascending: snapshots list their entities in id order and a
    /// frame reads them so, so the next track is found where the last one ended (`hint`)
    /// without a search, and a new entity is pushed at the end.
    tracks: Vec<Track>,
    hint: usize,
    classes: BTreeMap<EntityId, ObjectClass>,
}

impl Clone for Interpolator {
    fn clone(&self) -> Self {
        cloned_from(self)
    }

    fn clone_from(&mut self, source: &Self) {
        self.config = source.config;
        for (mine, theirs) in self.timelines.iter_mut().zip(&source.timelines) {
            mine.clone_from(theirs);
        }
        // `Vec::clone_from` calls each kept track's `clone_from`.
        self.tracks.clone_from(&source.tracks);
        self.hint = source.hint;
        // A map's `clone_from` builds a new one: only when the classes changed (rarely).
        if self.classes != source.classes {
            self.classes.clone_from(&source.classes);
        }
    }
}

impl Interpolator {
    /// An interpolator with nothing seen yet. Refuses a config that
    /// [`InterpolationConfig::validate`] refuses, rather than clamp it: a window of no updates,
    /// a quantile outside 0..=1 or a history of one update has no meaning.
    pub fn new(config: InterpolationConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self { config, ..Self::default() })
    }

    /// Puts entity `id` in `class` (entities are [`ObjectClass::Free`] until said otherwise).
    pub fn set_class(&mut self, id: EntityId, class: ObjectClass) {
        match class {
            ObjectClass::Free => self.classes.remove(&id),
            _ => self.classes.insert(id, class),
        };
        if let Ok(at) = self.find(id) {
            self.tracks[at].class = class;
        }
    }

    /// Where `id`'s track is (`Ok`), or where it would go (`Err`): at the hint when the calls
    /// come in id order, else by a search.
    fn find(&self, id: EntityId) -> Result<usize, usize> {
        self.find_from(self.hint, id)
    }

    /// [`Interpolator::find`] from the hint `hint`.
    fn find_from(&self, hint: usize, id: EntityId) -> Result<usize, usize> {
        match self.tracks.get(hint) {
            Some(track) if track.id == id => Ok(hint),
            // Past the last track and above it: a new entity at the end.
            None if self.tracks.last().is_some_and(|last| last.id < id) => Err(self.tracks.len()),
            _ => self.tracks.binary_search_by_key(&id, |track| track.id),
        }
    }

    /// What `class`'s timeline measured.
    pub fn stats(&self, class: ObjectClass) -> ClassStats {
        self.timelines[class.index()].stats
    }

    /// States of server time `server_time` arrived at `arrived`.
    pub fn update(
        &mut self,
        arrived: Instant,
        server_time: Duration,
        states: impl IntoIterator<Item = EntityState>,
    ) {
        let time = server_time.as_secs_f64();
        let mut seen = [false; 3];
        for state in states {
            // Most rooms put nothing in a class: skip the look-up then.
            let class = match self.classes.is_empty() {
                true => ObjectClass::Free,
                false => self.classes.get(&state.id).copied().unwrap_or_default(),
            };
            seen[class.index()] = true;
            let at = self.find(state.id).unwrap_or_else(|at| {
                let updates = VecDeque::with_capacity(self.config.history_max);
                let track = Track { id: state.id, class, updates, confirmed: time };
                self.tracks.insert(at, track);
                at
            });
            self.hint = at + 1;
            let track = &mut self.tracks[at];
            track.confirmed = track.confirmed.max(time);
            match track.updates.back_mut() {
                // An older update than one held adds nothing; the same pose again only says
                // it is still current (a snapshot repeating the fast path's pose at its later
                // tick would otherwise stall the motion between the two).
                Some((newest, _)) if *newest > time => continue,
                Some((_, old))
                    if old.position == state.position && old.rotation == state.rotation =>
                {
                    continue
                }
                Some((newest, old)) if *newest == time => *old = state,
                _ => {
                    if track.updates.len() >= self.config.history_max {
                        track.updates.pop_front();
                    }
                    track.updates.push_back((time, state));
                }
            }
        }
        let offset = arrived.as_secs_f64() - time;
        for class in CLASSES.into_iter().filter(|c| seen[c.index()]) {
            self.timelines[class.index()].observe(offset, &self.config);
        }
    }

    /// Forgets every entity `keep` refuses (despawned ones).
    pub fn retain(&mut self, mut keep: impl FnMut(EntityId) -> bool) {
        self.tracks.retain(|track| keep(track.id));
        self.classes.retain(|id, _| keep(*id));
    }

    /// Forgets every entity not in `present` (ids ascending, as a snapshot lists them): what
    /// [`Interpolator::retain`] does, in one pass over both lists instead of a search per track.
    pub fn retain_present(&mut self, present: &[EntityState]) {
        // The steady state: the same entities as tracks, nothing to forget.
        let same = self.tracks.len() == present.len()
            && self.tracks.iter().zip(present).all(|(track, state)| track.id == state.id);
        if !same {
            let mut at = 0;
            // `Vec::retain` visits the tracks in order, and they ascend by id as `present` does.
            self.tracks.retain(|track| {
                while present.get(at).is_some_and(|state| state.id < track.id) {
                    at += 1;
                }
                present.get(at).is_some_and(|state| state.id == track.id)
            });
        }
        if !self.classes.is_empty() {
            let listed = |id: &EntityId| present.binary_search_by_key(id, |s| s.id).is_ok();
            self.classes.retain(|id, _| listed(id));
        }
    }

    /// Entity `id`'s state for a frame at `now`, if it has had an update.
    pub fn sample(&mut self, now: Instant, id: EntityId) -> Option<Interpolated> {
        let frame = self.frame(now);
        self.sample_at(&frame, id)
    }

    /// Each of `states` as a frame at `now` should show it, or the state itself where its
    /// entity has had no update: [`Interpolator::sample`] for a whole frame, with the render
    /// times worked out once. In id order (as snapshots list entities) each track is found
    /// where the last one ended, without a search.
    pub fn sample_each<'a>(
        &'a mut self,
        now: Instant,
        states: impl IntoIterator<Item = &'a EntityState> + 'a,
    ) -> impl Iterator<Item = EntityState> + 'a {
        let frame = self.frame(now);
        states.into_iter().map(move |state| match self.sample_at(&frame, state.id) {
            Some(sampled) => sampled.state,
            None => *state,
        })
    }

    /// What a reader needs to show each of `states` (ids ascending, as
    /// [`Interpolator::sample_each`] takes them) without sampling it, in their order: see
    /// [`Resting`]. Worked out once per update by the thread that owns the interpolator, so
    /// that a frame copies the newest states and samples only the entities in motion.
    pub fn resting<'a>(&'a self, states: &'a [EntityState]) -> impl Iterator<Item = Resting> + 'a {
        let mut hint = 0;
        states.iter().map(move |state| {
            let found = self.find_from(hint, state.id).ok();
            hint = found.map_or(hint, |at| at + 1);
            let newest = found.and_then(|at| Some((at, self.tracks[at].updates.back()?)));
            let Some((at, &(time, newest))) = newest else {
                // No track (or none with an update): the state itself, whatever the frame.
                return Resting {
                    state: *state,
                    track: u32::MAX,
                    class: 0,
                    from: f64::NEG_INFINITY,
                };
            };
            let track = &self.tracks[at];
            // `sample_track` shows the newest as it is from its time on when the entity
            // rested since (or has one update); a moving one extrapolates past it.
            let rests = track.updates.len() < 2 || track.confirmed > time;
            Resting {
                state: newest,
                track: at as u32,
                class: track.class.index() as u8,
                from: if rests { time } else { f64::INFINITY },
            }
        })
    }

    /// The state of the entity of track `track` (a [`Resting::track`] of this interpolator)
    /// for `frame`: what [`Interpolator::sample`] gives, without counting it in the class's
    /// stats (a reader's copy is replaced at the next update anyway).
    pub fn sample_track(&self, frame: &RenderFrame, track: u32) -> Option<EntityState> {
        let track = self.tracks.get(track as usize)?;
        let newest = track.confirmed.max(track.updates.back()?.0);
        let t = frame.times[track.class.index()].unwrap_or(newest);
        sample_track(track, t, frame.extrapolation_max).map(|sampled| sampled.state)
    }

    /// The frame at `now`: the server time it shows per class, and how far it may extrapolate
    /// (for [`Interpolator::sample_track`] and [`Resting`]).
    pub fn frame(&self, now: Instant) -> RenderFrame {
        let now = now.as_secs_f64();
        RenderFrame {
            times: self.timelines.each_ref().map(|timeline| timeline.render_time(now)),
            extrapolation_max: self.config.extrapolation_max.as_secs_f64(),
        }
    }

    fn sample_at(&mut self, frame: &RenderFrame, id: EntityId) -> Option<Interpolated> {
        let at = self.find(id).ok()?;
        self.hint = at + 1;
        let track = &self.tracks[at];
        let class = track.class.index();
        // A class with no update yet (its first entity just put in it) shows the newest.
        let newest = track.confirmed.max(track.updates.back()?.0);
        let t = frame.times[class].unwrap_or(newest);
        let sampled = sample_track(track, t, frame.extrapolation_max)?;
        let stats = &mut self.timelines[class].stats;
        stats.frames += 1;
        stats.starved += u64::from(sampled.starved);
        Some(sampled)
    }
}

/// The state at server time `t` in `track`: interpolated between the two updates around it,
/// past the newest held if the entity has rested since, else extrapolated from the last two
/// for at most `extrapolation_max`.
/// How one entity shows, for a reader that copies the newest states and samples only the
/// entities in motion ([`Interpolator::resting`]): a frame whose server time for the entity's
/// class ([`RenderFrame::time`]) is at or past `from` shows `state` as it is; an earlier one
/// samples track `track` ([`Interpolator::sample_track`]). Exactly what
/// [`Interpolator::sample_each`] shows, either way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resting {
    /// The newest state the interpolator holds (the state itself without a track).
    pub state: EntityState,
    /// The entity's track, `u32::MAX` for none.
    pub track: u32,
    /// Its class's index, for [`RenderFrame::time`].
    pub class: u8,
    /// The server time from which the frame shows `state` as it is: its update's time for an
    /// entity at rest, infinity for one in motion (always sampled), minus infinity without a
    /// track (never sampled).
    pub from: f64,
}

/// What every entity of a frame is sampled with, worked out once per frame.
#[derive(Debug, Clone, Copy)]
pub struct RenderFrame {
    /// The server time the frame shows, per class (`None` for a class not yet updated).
    times: [Option<f64>; 3],
    /// [`InterpolationConfig::extrapolation_max`], seconds.
    extrapolation_max: f64,
}

impl RenderFrame {
    /// The server time the frame shows for class `class` (a [`Resting::class`]): minus
    /// infinity for a class with no update yet, whose entities are always sampled (they show
    /// their own newest time).
    pub fn time(&self, class: u8) -> f64 {
        let time = self.times.get(usize::from(class)).copied().flatten();
        time.unwrap_or(f64::NEG_INFINITY)
    }
}

/// `track` at server time `t`, extrapolating `extrapolation_max` seconds at most.
fn sample_track(track: &Track, t: f64, extrapolation_max: f64) -> Option<Interpolated> {
    let updates = &track.updates;
    let &(newest_time, newest) = updates.back()?;
    let current = track.confirmed.max(newest_time);
    let behind = current - t;
    // The first update later than `t`: none when `t` is at or past the newest (an entity at
    // rest, most of a room: no search then), else times ascend and a search finds it (a NaN
    // `t` finds none, as a scan would).
    let after = match t >= newest_time {
        true => None,
        false => {
            let after = updates.partition_point(|(time, _)| time.partial_cmp(&t) != Some(Greater));
            (after < updates.len()).then_some(after)
        }
    };
    let state = match after {
        // Before the oldest update held: show the oldest.
        Some(0) => updates[0].1,
        Some(i) => {
            let ((t0, a), (t1, b)) = (updates[i - 1], updates[i]);
            blend(&a, &b, ((t - t0) / (t1 - t0)) as f32)
        }
        None if updates.len() < 2 || current > newest_time => newest,
        None => {
            let (t0, before) = updates[updates.len() - 2];
            let ahead = (t - newest_time).min(extrapolation_max);
            blend(&before, &newest, (1.0 + ahead / (newest_time - t0)) as f32)
        }
    };
    let starved = t - current > extrapolation_max;
    Some(Interpolated { state, behind, starved })
}

/// `a` moved toward `b` by `s` (0: a, 1: b, beyond 1: carried on along the same motion).
fn blend(a: &EntityState, b: &EntityState, s: f32) -> EntityState {
    let rotation = if s <= 1.0 {
        a.rotation.slerp(b.rotation, s)
    } else {
        // Carry the rotation from a to b on by the fraction past b.
        let step = b.rotation * a.rotation.inverse();
        let (axis, angle) = step.to_axis_angle();
        (glam::Quat::from_axis_angle(axis, angle * (s - 1.0)) * b.rotation).normalize()
    };
    EntityState {
        id: b.id,
        position: a.position.lerp(b.position, s),
        rotation,
        linear_velocity: a.linear_velocity.lerp(b.linear_velocity, s.min(1.0)),
        angular_velocity: a.angular_velocity.lerp(b.angular_velocity, s.min(1.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glam::{Quat, Vec3};

    fn at(x: f32) -> EntityState {
        EntityState {
            id: 1,
            position: Vec3::new(x, 0.0, 0.0),
            rotation: Quat::IDENTITY,
            linear_velocity: Vec3::ZERO,
            angular_velocity: Vec3::ZERO,
        }
    }

    fn ms(ms: f64) -> Duration {
        Duration::from_secs_f64(ms / 1000.0)
    }

    #[test]
    fn each_entity_keeps_its_own_track_in_any_order_of_updates_and_reads() {
        // Goal: tracks found at the hint or by a search are each entity's own, whatever order
        // snapshots list entities in and frames read them, as entities come and go. Method:
        // entities whose x is their id times the update's number, fed and read in shuffled
        // orders; each read must show its own entity's motion.
        let mut interpolator = Interpolator::new(InterpolationConfig::default()).unwrap();
        let orders: [&[u32]; 4] = [&[5, 1, 9], &[9, 5, 1, 3], &[1, 3, 5, 7, 9], &[7, 3, 1, 9, 5]];
        for (k, order) in orders.iter().cycle().take(12).enumerate() {
            let state = |id: u32| EntityState { id, ..at(id as f32 * k as f32) };
            let server = ms(k as f64 * 10.0);
            interpolator.update(Instant::ZERO + server, server, order.iter().map(|id| state(*id)));
            interpolator.retain(|id| order.contains(&id));
            let now = Instant::ZERO + server;
            for id in order.iter().rev().chain(order.iter()) {
                let shown = interpolator.sample(now, *id).unwrap().state;
                assert_eq!(shown.id, *id);
                assert_eq!(shown.position.x, *id as f32 * k as f32, "entity {id}, update {k}");
            }
            assert!(interpolator.sample(now, 2).is_none(), "never fed");
        }
    }

    #[test]
    fn a_copy_kept_by_clone_from_samples_as_its_source_as_entities_come_and_go() {
        // Goal: a reader on another thread samples a copy exactly as the session would, each
        // time it is brought up to date over an older copy (more tracks, fewer, other ones).
        let mut source = Interpolator::new(InterpolationConfig::default()).unwrap();
        let mut copy = Interpolator::default();
        let rooms: [&[u32]; 4] = [&[1, 2, 3, 4], &[2, 4], &[1, 2, 3, 4, 5, 6], &[6]];
        for (k, room) in rooms.iter().cycle().take(10).enumerate() {
            let server = ms(k as f64 * 10.0);
            // Arrivals jitter, so that the timelines' buffers differ from update to update.
            let arrived = Instant::ZERO + server + ms((k % 3) as f64 * 2.0);
            let states: Vec<_> =
                room.iter().map(|&id| EntityState { id, ..at(id as f32 + k as f32) }).collect();
            source.update(arrived, server, states.iter().copied());
            source.retain_present(&states);
            copy.clone_from(&source);
            let now = arrived + ms(5.0);
            let theirs: Vec<_> = source.sample_each(now, &states).collect();
            let ours: Vec<_> = copy.sample_each(now, &states).collect();
            assert_eq!(ours, theirs, "update {k}");
        }
    }

    #[test]
    fn copies_brought_up_to_date_in_turn_hold_their_sources_updates() {
        // Goal: a copy that skips the updates of tracks that did not change still holds what
        // its source holds, whether brought up to date after every update or only every third
        // (as the client's triple buffer does): a track moving past its history, one at rest,
        // one whose newest update is replaced in place, one that comes late.
        let mut source = Interpolator::new(InterpolationConfig::default()).unwrap();
        let mut every = Interpolator::default();
        let mut copies: [Interpolator; 3] = Default::default();
        for k in 0..40u32 {
            let server = ms(f64::from(k) * 10.0);
            let arrived = Instant::ZERO + server + ms(f64::from(k % 4));
            let x = k as f32;
            let mut states = vec![EntityState { id: 1, ..at(x) }, EntityState { id: 2, ..at(5.0) }];
            states.push(EntityState { id: 3, ..at(x * 2.0) });
            if k > 20 {
                states.push(EntityState { id: 4, ..at(-x) });
            }
            source.update(arrived, server, states.iter().copied());
            every.clone_from(&source);
            assert_same_tracks(&every, &source, k);
            // The same tick again, entity 3 elsewhere: its newest update replaced in place.
            source.update(arrived, server, [EntityState { id: 3, ..at(x * 2.0 + 0.5) }]);
            every.clone_from(&source);
            assert_same_tracks(&every, &source, k);
            let copy = &mut copies[k as usize % 3];
            copy.clone_from(&source);
            assert_same_tracks(copy, &source, k);
        }
    }

    fn assert_same_tracks(copy: &Interpolator, source: &Interpolator, k: u32) {
        assert_eq!(copy.tracks.len(), source.tracks.len(), "update {k}");
        for (ours, theirs) in copy.tracks.iter().zip(&source.tracks) {
            assert_eq!(ours.id, theirs.id, "update {k}");
            assert_eq!(ours.updates, theirs.updates, "update {k}, entity {}", ours.id);
            assert_eq!(ours.confirmed, theirs.confirmed, "update {k}, entity {}", ours.id);
        }
    }

    #[test]
    fn copying_the_resting_states_and_sampling_the_rest_shows_what_sample_each_shows() {
        // Goal: a reader that takes `resting`'s states as they are and samples only the
        // entities a frame is before (`from`) shows, bit for bit, what `sample_each` shows:
        // entities moving, at rest, with one update, repeating a pose with new velocities,
        // in a class with no update yet, and one without a track, at frames before, among and
        // past the updates, with jittered arrivals (a buffer, so frames show the past).
        let mut interpolator = Interpolator::default();
        // Entity 4 goes in a class whose timeline has had no update when it is read.
        interpolator.set_class(4, ObjectClass::Hand);
        for k in 0..40u32 {
            let server = ms(f64::from(k) * 8.0);
            let arrived = Instant::ZERO + server + ms(20.0 + f64::from(k % 5) * 1.5);
            let x = k as f32;
            let mut shown = vec![
                EntityState { id: 1, ..at(x) },
                // At rest from update 10 on, its velocity still changing (a repeated pose).
                EntityState { id: 2, linear_velocity: Vec3::splat(x), ..at(x.min(10.0)) },
                // One update only, then the same pose.
                EntityState { id: 3, ..at(3.0) },
                EntityState {
                    id: 5,
                    rotation: Quat::from_rotation_y(x * 0.1),
                    angular_velocity: Vec3::Y,
                    ..at(-x)
                },
                // Never fed to the interpolator: no track.
                EntityState { id: 6, ..at(6.0) },
            ];
            let fed: Vec<_> = shown.iter().copied().filter(|s| s.id != 6).collect();
            interpolator.update(arrived, server, fed.clone());
            if k == 39 {
                interpolator.update(arrived, server, [EntityState { id: 4, ..at(4.0) }]);
            }
            shown.insert(3, EntityState { id: 4, ..at(4.0) });
            let resting: Vec<_> = interpolator.resting(&shown).collect();
            for dt in [-40.0, -12.0, -3.0, 0.0, 2.5, 7.0, 30.0, 400.0] {
                let nanos = arrived.as_nanos() as f64 + dt * 1e6;
                let now = Instant::from_nanos(nanos.max(0.0) as u64);
                let frame = interpolator.frame(now);
                let ours: Vec<_> = resting
                    .iter()
                    .map(|r| match frame.time(r.class) < r.from {
                        true => interpolator.sample_track(&frame, r.track).unwrap(),
                        false => r.state,
                    })
                    .collect();
                let theirs: Vec<_> = interpolator.sample_each(now, &shown).collect();
                assert_eq!(ours, theirs, "update {k}, frame {dt} ms");
            }
        }
        assert!(interpolator.stats(ObjectClass::Free).buffer > 0.001, "no buffer: no past");
    }

    #[test]
    fn the_buffer_is_the_quantile_of_the_windows_jitter_above_its_floor_at_every_update() {
        // The timeline keeps its window sorted as it slides: at every update its floor and
        // buffer must equal a fresh minimum and selection over the window (duplicates, window
        // sizes and quantiles of every kind).
        for (window, quantile) in [(1, 0.98), (5, 0.5), (16, 0.98), (64, 0.0), (64, 1.0)] {
            let config = InterpolationConfig {
                jitter_window: window,
                jitter_quantile: quantile,
                ..InterpolationConfig::default()
            };
            let mut timeline = Timeline::default();
            let mut seed = 7u64;
            let mut recent = VecDeque::new();
            for _ in 0..500 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Few distinct values, so that equal offsets come and go.
                let offset = 0.03 + (seed >> 58) as f64 * 1e-3;
                timeline.observe(offset, &config);
                recent.push_back(offset);
                if recent.len() > window {
                    recent.pop_front();
                }
                let floor = recent.iter().copied().fold(f64::INFINITY, f64::min);
                let mut jitter: Vec<f64> = recent.iter().map(|o| o - floor).collect();
                jitter.sort_by(f64::total_cmp);
                let rank = (quantile * (jitter.len() - 1) as f64).round() as usize;
                assert_eq!((timeline.floor, timeline.stats.buffer), (floor, jitter[rank]));
            }
        }
    }

    /// Updates every 10 ms of server time moving 1 m each, arriving 30 ms later plus `late`.
    fn feed(interpolator: &mut Interpolator, count: u32, late: impl Fn(u32) -> f64) {
        for k in 0..count {
            let server = ms(f64::from(k) * 10.0);
            let arrived = Instant::ZERO + server + ms(30.0 + late(k));
            interpolator.update(arrived, server, [at(k as f32)]);
        }
    }

    #[test]
    fn without_jitter_the_buffer_stays_zero_and_frames_show_the_newest_state() {
        let mut interpolator = Interpolator::default();
        feed(&mut interpolator, 50, |_| 0.0);
        assert!(interpolator.stats(ObjectClass::Free).buffer < 1e-9);
        // The frame as update 49 arrives shows it, and nothing older.
        let now = Instant::ZERO + ms(490.0 + 30.0);
        let shown = interpolator.sample(now, 1).unwrap();
        assert!((shown.state.position.x - 49.0).abs() < 1e-3, "{shown:?}");
        assert!(shown.behind.abs() < 1e-9);
        // Half an update later the motion carries on.
        let later = interpolator.sample(now + ms(5.0), 1).unwrap();
        assert!((later.state.position.x - 49.5).abs() < 1e-3, "{later:?}");
    }

    #[test]
    fn the_buffer_grows_to_the_jitter_and_interpolates_within_it() {
        let mut interpolator = Interpolator::default();
        // Every fourth update comes 8 ms late.
        feed(&mut interpolator, 100, |k| if k % 4 == 0 { 8.0 } else { 0.0 });
        let buffer = interpolator.stats(ObjectClass::Free).buffer;
        assert!((buffer - 0.008).abs() < 1e-6, "buffer {buffer}");
        // 8 ms of buffer: a frame shows server time 8 ms before the fastest arrival allows.
        let now = Instant::ZERO + ms(990.0 + 30.0);
        let shown = interpolator.sample(now, 1).unwrap();
        assert!((shown.state.position.x - 98.2).abs() < 1e-3, "{shown:?}");
        assert!((shown.behind - 0.008).abs() < 1e-6);
        assert!(!shown.starved);
    }

    #[test]
    fn an_entity_keeps_history_max_updates() {
        // Goal: however many updates arrive, an entity holds the newest `history_max` and
        // still interpolates between them. Method: fifty updates against a history of four.
        let config = InterpolationConfig { history_max: 4, ..InterpolationConfig::default() };
        let mut interpolator = Interpolator::new(config).expect("a valid config");
        feed(&mut interpolator, 50, |_| 0.0);
        assert_eq!(interpolator.tracks[0].updates.len(), 4);
        let oldest = interpolator.tracks[0].updates.front().unwrap().1.position.x;
        assert_eq!(oldest, 46.0);
        let shown = interpolator.sample(Instant::ZERO + ms(490.0 + 30.0), 1).unwrap();
        assert!((shown.state.position.x - 49.0).abs() < 1e-3, "{shown:?}");
    }

    #[test]
    fn the_buffer_forgets_jitter_older_than_the_jitter_window() {
        // Goal: the buffer is sized on the last `jitter_window` updates only, so it shrinks
        // back once a link calms down. Method: a hundred updates with every fourth 8 ms late,
        // then a hundred on time, against a window of 32.
        let config = InterpolationConfig { jitter_window: 32, ..InterpolationConfig::default() };
        let mut interpolator = Interpolator::new(config).expect("a valid config");
        feed(&mut interpolator, 200, |k| if k < 100 && k % 4 == 0 { 8.0 } else { 0.0 });
        let buffer = interpolator.stats(ObjectClass::Free).buffer;
        assert!(buffer < 1e-9, "buffer {buffer}");
    }

    #[test]
    fn a_config_without_meaning_is_refused_not_clamped() {
        // Goal: an interpolator is never built on a window of no updates, a quantile outside
        // 0..=1 or a history of one update. Method: each such config, straight to `new`.
        let refused = [
            InterpolationConfig { jitter_window: 0, ..InterpolationConfig::default() },
            InterpolationConfig { jitter_quantile: 1.5, ..InterpolationConfig::default() },
            InterpolationConfig { history_max: 1, ..InterpolationConfig::default() },
        ];
        for config in refused {
            assert!(Interpolator::new(config).is_err(), "{config:?}");
        }
        assert!(Interpolator::new(InterpolationConfig::default()).is_ok());
    }

    #[test]
    fn extrapolation_is_bounded_and_then_the_entity_holds() {
        let mut interpolator = Interpolator::default();
        feed(&mut interpolator, 10, |_| 0.0);
        let last = Instant::ZERO + ms(90.0 + 30.0);
        let far = interpolator.sample(last + ms(200.0), 1).unwrap();
        // Carried 25 ms at 100 m/s, no further.
        assert!((far.state.position.x - 11.5).abs() < 1e-3, "{far:?}");
        assert!(far.starved);
        assert_eq!(interpolator.stats(ObjectClass::Free).starved, 1);
    }

    #[test]
    fn classes_keep_their_own_buffers_and_despawned_entities_go() {
        let mut interpolator = Interpolator::default();
        interpolator.set_class(2, ObjectClass::Hand);
        for k in 0..60u32 {
            let server = ms(f64::from(k) * 10.0);
            let late = if k % 3 == 0 { 6.0 } else { 0.0 };
            let hand = EntityState { id: 2, ..at(k as f32) };
            interpolator.update(Instant::ZERO + server + ms(20.0 + late), server, [hand]);
            interpolator.update(Instant::ZERO + server + ms(20.0), server, [at(k as f32)]);
        }
        assert!(interpolator.stats(ObjectClass::Hand).buffer > 0.005);
        assert!(interpolator.stats(ObjectClass::Free).buffer < 1e-9);
        interpolator.retain(|id| id != 2);
        assert!(interpolator.sample(Instant::ZERO + ms(700.0), 2).is_none());
        assert!(interpolator.sample(Instant::ZERO + ms(700.0), 1).is_some());
    }
}

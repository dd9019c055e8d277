//! The column delta (format `0x03`, docs/wire.md section 6): a delta whose updates are laid
//! out as columns, one per component, each value of a column the same width. No record's position
//! depends on the one before it, so both sides work eight updates at a time, with shifts fixed
//! at compile time, instead of following a chain of variable-length records.
//!
//! Layout, each section starting on a byte: the header; the edits (spawns and despawns by id);
//! the gaps between the updates' indices into the result; twelve columns of zigzagged deltas,
//! one per component of position, rotation and the two velocities; the exceptions (fields too
//! wide for their columns, or a rotation whose largest index changed), as absolute values.

use std::cell::RefCell;

use super::decode::{check_count, read_id, read_velocity};
use super::encode::{id_gap, same_ids, too_small};
use super::*;
use crate::bits::{mask, BitReader, BitWriter, BITS_PER_CALL_MAX};
use crate::error::{DecodeError, EncodeError, Field};
use crate::varint::{unzigzag, zigzag};

/// The format byte of a column delta.
pub const FORMAT_DELTA_COLUMNS: u8 = 0x03;
/// Updates held in rows at once, eight blocks of eight: a block is whole bytes of every column
/// (`W` bytes of a `W`-bit column), so each chunk's part of a column starts on a byte.
/// Eight-update chunks measured slower (more calls per column).
const CHUNK: usize = 64;
/// Updates whose column values the encoder's first pass holds, so that a delta of up to this
/// many is packed from them rather than walked and diffed again: past 64 (one `CHUNK`; a
/// scene room's 94 moving entities) the second walk had tripled the encode's instructions.
/// Whole chunks, so that packing them at once lays the columns out as chunk by chunk would.
const HELD: usize = 4 * CHUNK;
/// The widest gap column: indices are below [`ENTITIES_MAX_FORMAT`], 15 bits.
const GAP_WIDTH_MAX: u32 = 15;
/// The four fields, in wire order, as errors name them.
const FIELDS: [Field; 4] =
    [Field::Position, Field::Rotation, Field::LinearVelocity, Field::AngularVelocity];

/// One difference between a baseline and the current snapshot, in id order.
enum Step<'a> {
    /// Entity `index` of the current snapshot, in both.
    Update {
        old: &'a QuantizedEntity,
        new: &'a QuantizedEntity,
        index: usize,
    },
    Despawn {
        id: u32,
    },
    Spawn {
        new: &'a QuantizedEntity,
    },
}

/// The differences between a baseline (`old`) and the current snapshot (`new`), found by
/// comparing entities, or told by a history.
struct Changes<'a, M, U> {
    old: &'a [QuantizedEntity],
    new: &'a [QuantizedEntity],
    /// Given only when both hold the same ids: for each run of 64 entities (`chunk`), a bit
    /// set of those that may differ; a clear bit skips the entity without comparing it.
    moved: Option<M>,
    /// Otherwise, whether entity `j` of `new` is known unchanged since the baseline.
    unchanged: U,
}

impl<'a, M: Fn(usize) -> u64, U: Fn(usize) -> bool> Changes<'a, M, U> {
    /// Calls `f` for every difference, in id order. An update may carry the same codes on both
    /// sides (a history's moved entity that came back); [`row`] tells.
    fn for_each(&self, mut f: impl FnMut(Step<'a>)) {
        if let Some(moved) = &self.moved {
            return for_each_moved(self.old, self.new, moved, |old, new, index| {
                f(Step::Update { old, new, index })
            });
        }
        let (old, new) = (self.old, self.new);
        let (mut i, mut j) = (0, 0);
        loop {
            match (old.get(i), new.get(j)) {
                (Some(o), Some(n)) if o.id == n.id => {
                    if !(self.unchanged)(j) {
                        f(Step::Update { old: o, new: n, index: j });
                    }
                    (i, j) = (i + 1, j + 1);
                }
                (Some(o), Some(n)) if o.id < n.id => {
                    f(Step::Despawn { id: o.id });
                    i += 1;
                }
                (Some(o), None) => {
                    f(Step::Despawn { id: o.id });
                    i += 1;
                }
                (_, Some(n)) => {
                    f(Step::Spawn { new: n });
                    j += 1;
                }
                (None, None) => return,
            }
        }
    }
}

/// Calls `f` with each entity of `new` whose bit is set in `moved` (a bit set per run of 64),
/// and its baseline in `old`, which holds the same ids.
#[inline(always)]
fn for_each_moved<'a>(
    old: &'a [QuantizedEntity],
    new: &'a [QuantizedEntity],
    moved: &impl Fn(usize) -> u64,
    mut f: impl FnMut(&'a QuantizedEntity, &'a QuantizedEntity, usize),
) {
    for chunk in 0..new.len().div_ceil(64) {
        let mut bits = moved(chunk);
        while bits != 0 {
            let index = 64 * chunk + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let (Some(o), Some(n)) = (old.get(index), new.get(index)) else { return };
            f(o, n, index);
        }
    }
}

/// Each field's first lane in [`lanes`], in column order (position, rotation, linear and
/// angular velocity).
const FIRST_LANE: [usize; 4] = [0, 9, 3, 6];
/// The row lane of each component column, in wire order: position x, y, z, the three rotation
/// codes, linear velocity x, y, z, angular velocity x, y, z.
const COLUMNS: [usize; 12] = [0, 1, 2, 9, 10, 11, 3, 4, 5, 6, 7, 8];
/// The field of each lane.
const FIELD_OF_LANE: [usize; 12] = [0, 0, 0, 2, 2, 2, 3, 3, 3, 1, 1, 1];

/// An entity's twelve delta-coded components: position, linear and angular velocity, rotation.
/// The rotation comes last so that the nine 32-bit codes, which lie together in an entity, are
/// together in a row too, and adding a row to an entity is a few vector additions.
#[inline(always)]
fn lanes(e: &QuantizedEntity) -> [i32; 12] {
    let [p0, p1, p2] = e.position.map(|c| c as i32);
    let [r0, r1, r2] = e.rotation.components.map(i32::from);
    let [l0, l1, l2] = e.linear_velocity;
    let [a0, a1, a2] = e.angular_velocity;
    [p0, p1, p2, l0, l1, l2, a0, a1, a2, r0, r1, r2]
}

/// The lanes of field `f`.
#[inline(always)]
fn field_lanes<T: Copy>(row: &[T; 12], f: usize) -> [T; 3] {
    [row[FIRST_LANE[f]], row[FIRST_LANE[f] + 1], row[FIRST_LANE[f] + 2]]
}

/// An update's column values, the zigzagged differences of its twelve lanes, and which fields
/// (bit `f`) are exceptions, whose values are left zero; `None` when both sides hold the same
/// codes. Exceptions are rare, so one test of all twelve lanes keeps them off the common path.
#[inline(always)]
fn row(old: &QuantizedEntity, new: &QuantizedEntity) -> Option<([u32; 12], u32)> {
    let (a, b) = (lanes(old), lanes(new));
    let z: [u32; 12] = std::array::from_fn(|k| zigzag(b[k].wrapping_sub(a[k])));
    let any = z.iter().fold(0, |any, v| any | v);
    let layout = old.rotation.largest != new.rotation.largest;
    if any >> DELTA_WIDTH_MAX == 0 && !layout {
        return (any != 0).then_some((z, 0));
    }
    Some(split_exceptions(z, layout))
}

/// [`row`] in three groups of four lanes ([`lanes`]' order), each group one vector.
#[inline(always)]
fn row_groups(old: &QuantizedEntity, new: &QuantizedEntity) -> Option<([Group; 3], u32)> {
    let (a, b) = (lane_groups(old), lane_groups(new));
    let z: [Group; 3] = std::array::from_fn(|g| group::zigzag_difference(b[g], a[g]));
    let any = group::or(group::or(z[0], z[1]), z[2]);
    let layout = old.rotation.largest != new.rotation.largest;
    // One test for the common row (narrow, not zero), the two apart only off its path.
    if group::narrow_and_not_zero(any) && !layout {
        return Some((z, 0));
    }
    if group::narrow(any) && !layout {
        return None;
    }
    let row: [u32; 12] = std::array::from_fn(|k| group::to_array(z[k / 4])[k % 4]);
    let (row, fields) = split_exceptions(row, layout);
    let groups = std::array::from_fn(|g| group::of(std::array::from_fn(|k| row[4 * g + k])));
    Some((groups, fields))
}

/// [`lanes`] in three groups of four.
#[inline(always)]
fn lane_groups(e: &QuantizedEntity) -> [Group; 3] {
    let [p0, p1, p2] = e.position;
    let [l0, l1, l2] = e.linear_velocity.map(|c| c as u32);
    let [a0, a1, a2] = e.angular_velocity.map(|c| c as u32);
    let last = group::with_rotation(a2, e.rotation.components);
    [group::of([p0, p1, p2, l0]), group::of([l1, l2, a0, a1]), last]
}

use group::Group;

/// Four lanes of 32 bits in one SSE2 vector, which x86_64 always has: the encoder's row
/// arithmetic on them, through safe_arch's safe wrappers (as the quantizer's kernels).
#[cfg(target_arch = "x86_64")]
mod group {
    use super::DELTA_WIDTH_MAX;
    use safe_arch::{
        bitor_m128i, bitxor_m128i, byte_shl_imm_u128_m128i, cmp_eq_mask_i32_m128i,
        get_i32_from_m128i_s, m128i, move_mask_i8_m128i, set_i16_m128i, set_i32_m128i_s,
        shl_imm_u32_m128i, shr_imm_i32_m128i, shr_imm_u32_m128i, shuffle_ai_f32_all_m128i,
        sub_i32_m128i, unpack_low_i16_m128i, zeroed_m128i,
    };

    pub(super) type Group = m128i;

    #[inline(always)]
    pub(super) fn of(lanes: [u32; 4]) -> Group {
        m128i::from(lanes)
    }

    #[inline(always)]
    pub(super) fn to_array(g: Group) -> [u32; 4] {
        g.into()
    }

    /// `[first, rotation[0], rotation[1], rotation[2]]`: the three 16-bit codes widened in the
    /// vector (a few shuffles, where four lanes set one by one took twice as many).
    #[inline(always)]
    pub(super) fn with_rotation(first: u32, rotation: [u16; 3]) -> Group {
        let [r0, r1, r2] = rotation.map(|r| r as i16);
        let codes = set_i16_m128i(0, 0, 0, 0, 0, r2, r1, r0);
        let widened = unpack_low_i16_m128i(codes, zeroed_m128i());
        bitor_m128i(byte_shl_imm_u128_m128i::<4>(widened), set_i32_m128i_s(first as i32))
    }

    #[inline(always)]
    pub(super) fn zero() -> Group {
        zeroed_m128i()
    }

    #[inline(always)]
    pub(super) fn or(a: Group, b: Group) -> Group {
        bitor_m128i(a, b)
    }

    /// Each lane's `zigzag(new - old)`, as [`crate::varint::zigzag`].
    #[inline(always)]
    pub(super) fn zigzag_difference(new: Group, old: Group) -> Group {
        let d = sub_i32_m128i(new, old);
        bitxor_m128i(shl_imm_u32_m128i::<1>(d), shr_imm_i32_m128i::<31>(d))
    }

    #[inline(always)]
    pub(super) fn is_zero(g: Group) -> bool {
        move_mask_i8_m128i(cmp_eq_mask_i32_m128i(g, zeroed_m128i())) == 0xFFFF
    }

    /// Whether every lane fits [`DELTA_WIDTH_MAX`] bits.
    #[inline(always)]
    pub(super) fn narrow(g: Group) -> bool {
        is_zero(shr_imm_u32_m128i::<{ DELTA_WIDTH_MAX as i32 }>(g))
    }

    /// [`narrow`] and not [`is_zero`] in one comparison: the OR of the four lanes is below
    /// 2^[`DELTA_WIDTH_MAX`] exactly when every lane is, and above zero when some lane is, so
    /// the OR less one is below 2^[`DELTA_WIDTH_MAX`] - 1 exactly when both hold.
    #[inline(always)]
    pub(super) fn narrow_and_not_zero(g: Group) -> bool {
        let halves = bitor_m128i(g, shuffle_ai_f32_all_m128i::<0b01_00_11_10>(g));
        let all = bitor_m128i(halves, shuffle_ai_f32_all_m128i::<0b10_11_00_01>(halves));
        let any = get_i32_from_m128i_s(all) as u32;
        any.wrapping_sub(1) < (1 << DELTA_WIDTH_MAX) - 1
    }
}

/// [`group`] on other targets, in plain arrays.
#[cfg(not(target_arch = "x86_64"))]
mod group {
    use super::DELTA_WIDTH_MAX;
    use crate::varint::zigzag;

    pub(super) type Group = [u32; 4];

    #[inline(always)]
    pub(super) fn of(lanes: [u32; 4]) -> Group {
        lanes
    }

    #[inline(always)]
    pub(super) fn to_array(g: Group) -> [u32; 4] {
        g
    }

    #[inline(always)]
    pub(super) fn with_rotation(first: u32, rotation: [u16; 3]) -> Group {
        let [r0, r1, r2] = rotation.map(u32::from);
        [first, r0, r1, r2]
    }

    #[inline(always)]
    pub(super) fn zero() -> Group {
        [0; 4]
    }

    #[inline(always)]
    pub(super) fn or(a: Group, b: Group) -> Group {
        std::array::from_fn(|k| a[k] | b[k])
    }

    #[inline(always)]
    pub(super) fn zigzag_difference(new: Group, old: Group) -> Group {
        std::array::from_fn(|k| zigzag(new[k].wrapping_sub(old[k]) as i32))
    }

    #[inline(always)]
    pub(super) fn is_zero(g: Group) -> bool {
        g == [0; 4]
    }

    #[inline(always)]
    pub(super) fn narrow(g: Group) -> bool {
        g.iter().all(|v| v >> DELTA_WIDTH_MAX == 0)
    }

    #[inline(always)]
    pub(super) fn narrow_and_not_zero(g: Group) -> bool {
        narrow(g) && !is_zero(g)
    }
}

/// [`row`] for an update with an exception: fields wider than [`DELTA_WIDTH_MAX`], and the
/// rotation when its smallest-three layout changed.
#[cold]
fn split_exceptions(z: [u32; 12], layout: bool) -> ([u32; 12], u32) {
    let mut fields = u32::from(layout) << 1;
    for f in 0..4 {
        // Wider than the limit exactly when a bit at or above it is set.
        let any = field_lanes(&z, f).iter().fold(0, |any, v| any | v);
        fields |= u32::from(any >> DELTA_WIDTH_MAX != 0) << f;
    }
    let row = std::array::from_fn(|k| if fields >> FIELD_OF_LANE[k] & 1 == 1 { 0 } else { z[k] });
    (row, fields)
}

/// What the first pass over the differences finds: the counts and widths of the header.
#[derive(Default)]
struct Plan {
    updates: usize,
    exceptions: usize,
    edits: usize,
    /// The OR of each lane's column values.
    lanes: [u32; 12],
    /// The OR of the index gaps.
    gaps: u32,
    /// The index of the first update, and the index after the last update's.
    first: usize,
    next: usize,
    /// The length of the exceptions section.
    exception_bits: usize,
    /// The update of the last exception, which the next one's gap counts from.
    last_exception: usize,
}

impl Plan {
    /// Walks the changes once, writing the edits into `edits` as it meets them; the first
    /// [`HELD`] updates' column values go to `first` (the whole delta's, in the common case, so
    /// that they need not be computed again).
    fn of<M: Fn(usize) -> u64, U: Fn(usize) -> bool>(
        config: &SnapshotConfig,
        changes: &Changes<'_, M, U>,
        first: &mut Held,
        edits: &mut BitWriter<'_>,
    ) -> Self {
        let mut plan = Plan::default();
        // A single call of `add` per loop, so that it is inlined into the common one.
        match &changes.moved {
            Some(moved) => return Plan::of_moved(config, changes.old, changes.new, moved, first),
            None => {
                let mut previous = None;
                changes.for_each(|step| {
                    let (id, spawn) = match step {
                        Step::Update { old, new, index } => {
                            return plan.add(config, first, old, new, index)
                        }
                        Step::Despawn { id } => (id, None),
                        Step::Spawn { new } => (new.id, Some(new)),
                    };
                    config.write_edit(edits, previous, id, spawn);
                    (plan.edits, previous) = (plan.edits + 1, Some(id));
                })
            }
        }
        plan
    }

    /// [`Plan::of`] between snapshots with the same ids, told which entities may differ (a
    /// history's change sets): no edits, only updates, the common case of every tick. Its
    /// sums are locals and each row three groups of four lanes, so that they stay in
    /// registers over the loop: as the fields of a plan that a closure wrote, they were loaded
    /// and stored for every update, and four of the twelve lanes were left out of the vector
    /// instructions.
    fn of_moved(
        config: &SnapshotConfig,
        old: &[QuantizedEntity],
        new: &[QuantizedEntity],
        moved: &impl Fn(usize) -> u64,
        first: &mut Held,
    ) -> Self {
        let mut plan = Plan::default();
        let (mut lanes, mut gaps, mut updates, mut next) = ([group::zero(); 3], 0, 0, 0);
        for_each_moved(old, new, moved, |old, new, index| {
            let Some((row, fields)) = row_groups(old, new) else { return };
            for (sum, group) in lanes.iter_mut().zip(row) {
                *sum = group::or(*sum, group);
            }
            if updates == 0 {
                // The header holds the first index, so that the gaps start from it.
                (plan.first, next) = (index, index);
            }
            let gap = (index - next) as u32;
            gaps |= gap;
            if let (Some(held), Some(held_gap)) =
                (first.rows.get_mut(updates), first.gaps.get_mut(updates))
            {
                for (lanes, group) in held.chunks_exact_mut(4).zip(row) {
                    lanes.copy_from_slice(&group::to_array(group));
                }
                *held_gap = gap;
            }
            if fields != 0 {
                plan.updates = updates;
                plan.add_exceptions(config, first, fields, new, index);
            }
            next = index + 1;
            updates += 1;
        });
        plan.lanes = std::array::from_fn(|k| group::to_array(lanes[k / 4])[k % 4]);
        (plan.gaps, plan.updates, plan.next) = (gaps, updates, next);
        plan
    }

    /// Counts the update from `old` to `new` (entity `index`), if the codes differ.
    #[inline(always)]
    fn add(
        &mut self,
        config: &SnapshotConfig,
        first: &mut Held,
        old: &QuantizedEntity,
        new: &QuantizedEntity,
        index: usize,
    ) {
        let Some((row, fields)) = row(old, new) else { return };
        for (lane, value) in self.lanes.iter_mut().zip(row) {
            *lane |= value;
        }
        if self.updates == 0 {
            // The header holds the first index, so that the gaps start from it.
            (self.first, self.next) = (index, index);
        }
        let gap = (index - self.next) as u32;
        self.gaps |= gap;
        if let (Some(held), Some(held_gap)) =
            (first.rows.get_mut(self.updates), first.gaps.get_mut(self.updates))
        {
            (*held, *held_gap) = (row, gap);
        }
        if fields != 0 {
            self.add_exceptions(config, first, fields, new, index);
        }
        self.next = index + 1;
        self.updates += 1;
    }

    /// Counts the exceptions of the current update, and holds them if it is among the first.
    #[cold]
    fn add_exceptions(
        &mut self,
        config: &SnapshotConfig,
        first: &mut Held,
        fields: u32,
        new: &QuantizedEntity,
        index: usize,
    ) {
        for field in (0..4).filter(|f| fields >> f & 1 == 1) {
            let gap_bits = ID_TIERS.encode((self.updates - self.last_exception) as u64).1;
            let bits = gap_bits + 2 + config.absolute(field, new).1;
            self.exception_bits += bits as usize;
            self.last_exception = self.updates;
            self.exceptions += 1;
        }
        if let Some(held) = first.exceptions.get_mut(self.updates) {
            *held = (index as u32, fields);
            first.excepted[self.updates / 64] |= 1 << (self.updates % 64);
        }
    }

    /// The delta's widths and where its sections end, given where the edits end.
    fn layout(&self, edits_end: usize) -> Layout {
        let widths = self.widths();
        let columns_end = edits_end + column_bytes(widths, self.updates).iter().sum::<usize>();
        let len = columns_end + self.exception_bits.div_ceil(8);
        Layout { widths, edits_end, columns_end, len }
    }

    /// The gap width, then the twelve component widths in [`COLUMNS`] order.
    fn widths(&self) -> [u32; 13] {
        let bits = |v: u32| 32 - v.leading_zeros();
        std::array::from_fn(|c| match c {
            0 => bits(self.gaps),
            _ => bits(self.lanes[COLUMNS[c - 1]]),
        })
    }
}

/// A planned delta's widths ([`Plan::widths`]) and the ends of its sections, in bytes: the
/// edits, the columns, and the exceptions (the whole length).
#[derive(Clone, Copy)]
struct Layout {
    widths: [u32; 13],
    edits_end: usize,
    columns_end: usize,
    len: usize,
}

/// Up to [`HELD`] updates' column values: each row's zigzags (zero for an exception's field),
/// its index gap, and for the updates with exceptions (bits of `excepted`, 64 to a word) the
/// entity's index in the current snapshot and their fields.
struct Held {
    rows: [[u32; 12]; HELD],
    gaps: [u32; HELD],
    exceptions: [(u32, u32); HELD],
    excepted: [u64; HELD / 64],
}

impl Held {
    fn new() -> Box<Self> {
        let exceptions = [(0, 0); HELD];
        let excepted = [0; HELD / 64];
        Box::new(Self { rows: [[0; 12]; HELD], gaps: [0; HELD], exceptions, excepted })
    }
}

/// A decoder's rows for `CHUNK` updates at a time: their indices into the result, and their
/// twelve lanes (zigzagged deltas, then the sums).
struct Rows {
    indices: [u32; CHUNK],
    lanes: [[i32; 12]; CHUNK],
}

thread_local! {
    // Each thread's rows, kept between calls rather than made on the stack for each: zeroing
    // their 3 KiB was 3% of an encode, and as much of a decode. Nothing is read from them that
    // the same call did not write first. The encoder's 15 KiB are made on the thread's first
    // encode, so that a thread that never encodes does not carry them.
    static ENCODER_ROWS: RefCell<Option<Box<Held>>> = const { RefCell::new(None) };
    static DECODER_ROWS: RefCell<Rows> =
        const { RefCell::new(Rows { indices: [0; CHUNK], lanes: [[0; 12]; CHUNK] }) };
}

/// The header's length: format, ticks, counts, first index and widths.
const HEADER_BYTES: usize = 26;

/// Bytes of each column for `updates` updates with `widths` (gap width first).
fn column_bytes(widths: [u32; 13], updates: usize) -> [usize; 13] {
    widths.map(|width| (updates * width as usize).div_ceil(8))
}

impl SnapshotConfig {
    /// Encodes the changes from `baseline` to `current` into `out` as a column delta (format
    /// `0x03`) and returns the bytes written. Entities whose codes did not change cost nothing.
    /// A server that keeps its snapshots in a [`SnapshotHistory`] should encode through it,
    /// which skips unchanged entities without comparing them.
    pub fn encode_delta(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let same_ids = same_ids(baseline.entities(), current.entities());
        let every = |_: usize| u64::MAX;
        self.encode_columns_with(baseline, current, out, same_ids.then_some(every), |_| false)
    }

    /// [`SnapshotConfig::encode_delta`] told what changed, as
    /// [`SnapshotConfig::encode_records_with`] is.
    pub(super) fn encode_columns_with(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
        moved: Option<impl Fn(usize) -> u64>,
        unchanged: impl Fn(usize) -> bool,
    ) -> Result<usize, EncodeError> {
        self.check_count(baseline)?;
        self.check_count(current)?;
        let changes =
            Changes { old: baseline.entities(), new: current.entities(), moved, unchanged };
        ENCODER_ROWS.with_borrow_mut(|held| {
            let first = held.get_or_insert_with(Held::new);
            self.encode_changes(baseline, current, out, &changes, first)
        })
    }

    /// [`SnapshotConfig::encode_columns_with`] with the thread's rows in `first`.
    fn encode_changes<M: Fn(usize) -> u64, U: Fn(usize) -> bool>(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
        changes: &Changes<'_, M, U>,
        first: &mut Held,
    ) -> Result<usize, EncodeError> {
        first.excepted = [0; HELD / 64];
        let capacity = out.len();
        // The edits are written as the walk meets them, after the header, which waits for
        // the counts the walk finds.
        let mut edits = BitWriter::new(out.get_mut(HEADER_BYTES..).unwrap_or_default());
        let plan = Plan::of(self, changes, first, &mut edits);
        // Every section's length is known before the columns are written, so that a short
        // buffer is reported with the whole length it needs.
        let edits_end = HEADER_BYTES + edits.finish().unwrap_or_else(|needed| needed);
        let layout = plan.layout(edits_end);
        if layout.len > capacity {
            return Err(too_small(layout.len, capacity));
        }
        self.write_planned(baseline, current, out, changes, first, (&plan, &layout))
    }

    /// [`SnapshotConfig::encode_columns_with`] between snapshots with the same ids (no edits),
    /// into `out`, which is cleared and then holds exactly the encoding: refused, as a buffer
    /// of `max` bytes would be, if longer. The bytes past the encoding are not written at
    /// all, where a buffer sized for the largest first had them zeroed each time.
    pub(super) fn encode_same_ids_into(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut Vec<u8>,
        max: usize,
        moved: impl Fn(usize) -> u64,
    ) -> Result<usize, EncodeError> {
        self.check_count(baseline)?;
        self.check_count(current)?;
        let (old, new) = (baseline.entities(), current.entities());
        ENCODER_ROWS.with_borrow_mut(|held| {
            let first = held.get_or_insert_with(Held::new);
            first.excepted = [0; HELD / 64];
            let plan = Plan::of_moved(self, old, new, &moved, first);
            let layout = plan.layout(HEADER_BYTES);
            out.clear();
            if layout.len > max {
                return Err(too_small(layout.len, max));
            }
            out.resize(layout.len, 0);
            let changes = Changes { old, new, moved: Some(moved), unchanged: |_| false };
            let planned = (&plan, &layout);
            self.write_planned(baseline, current, out, &changes, first, planned)
        })
    }

    /// Writes the header, the columns and the exceptions of a delta planned by the first pass
    /// (`plan`, laid out as `layout`) into `out`, which holds at least its length, and returns
    /// that length.
    fn write_planned<M: Fn(usize) -> u64, U: Fn(usize) -> bool>(
        &self,
        baseline: &Snapshot,
        current: &Snapshot,
        out: &mut [u8],
        changes: &Changes<'_, M, U>,
        first: &Held,
        (plan, layout): (&Plan, &Layout),
    ) -> Result<usize, EncodeError> {
        let capacity = out.len();
        let Layout { widths, edits_end, columns_end, len } = *layout;
        let header = &mut out[..HEADER_BYTES];
        // Every header field is whole bytes, so its bit stream is the little-endian bytes.
        let packed = widths[1..].iter().rev().fold(0, |packed, w| packed << 4 | u64::from(*w));
        let fields: [&[u8]; 9] = [
            &[FORMAT_DELTA_COLUMNS],
            &current.tick.to_le_bytes(),
            &baseline.tick.to_le_bytes(),
            &(plan.updates as u16).to_le_bytes(),
            &(plan.exceptions as u32).to_le_bytes(),
            &(plan.edits as u16).to_le_bytes(),
            &(plan.first as u16).to_le_bytes(),
            &[widths[0] as u8],
            &packed.to_le_bytes()[..6],
        ];
        let mut at = 0;
        for field in fields {
            header[at..at + field.len()].copy_from_slice(field);
            at += field.len();
        }
        // The exceptions' writer may use the buffer past `len` (zeros, whole words at a time),
        // which keeps its last words off the byte-by-byte path.
        let (columns, exceptions) = out[edits_end..].split_at_mut(columns_end - edits_end);
        let mut w = BitWriter::new(exceptions);
        if plan.updates <= HELD {
            self.write_held(plan, first, current.entities(), columns, &mut w);
        } else {
            self.write_columns(plan, changes, columns, &mut w);
        }
        w.finish().map_err(|needed| too_small(columns_end + needed, capacity))?;
        Ok(len)
    }

    /// One edit: the despawn of `id`, or the spawn of `spawn`, after the edit of `previous`.
    fn write_edit(
        &self,
        w: &mut BitWriter<'_>,
        previous: Option<u32>,
        id: u32,
        spawn: Option<&QuantizedEntity>,
    ) {
        ID_TIERS.write(w, id_gap(previous, id));
        w.write(u64::from(spawn.is_some()), 1);
        if let Some(entity) = spawn {
            self.write_body(w, entity);
        }
    }
}

impl SnapshotConfig {
    /// Packs the gap and field columns into `out`, which holds exactly their bytes, `CHUNK`
    /// updates at a time (whole bytes of every column, so each chunk's part of a column starts
    /// on a byte), and writes the exceptions met on the way into `exceptions`.
    fn write_columns<M: Fn(usize) -> u64, U: Fn(usize) -> bool>(
        &self,
        plan: &Plan,
        changes: &Changes<'_, M, U>,
        out: &mut [u8],
        exceptions: &mut BitWriter<'_>,
    ) {
        let widths = plan.widths();
        let sizes = column_bytes(widths, plan.updates);
        let mut starts = [0; 13];
        for c in 1..13 {
            starts[c] = starts[c - 1] + sizes[c - 1];
        }
        let mut rows = [[0u32; 12]; CHUNK];
        let mut gaps = [0u32; CHUNK];
        let (mut n, mut done, mut next, mut previous) = (0, 0, plan.first, 0);
        let flush = |rows: &[[u32; 12]], gaps: &[u32], done: usize, out: &mut [u8]| {
            let at = |c: usize| starts[c] + done * widths[c] as usize / 8;
            pack_values(widths[0], gaps, &mut out[at(0)..]);
            for (c, lane) in COLUMNS.iter().enumerate() {
                pack_lane(widths[c + 1], rows, *lane, &mut out[at(c + 1)..]);
            }
        };
        changes.for_each(|step| {
            let Step::Update { old, new, index } = step else { return };
            // An exception's column holds zeros; its absolute value follows the columns.
            let Some((row, fields)) = row(old, new) else { return };
            rows[n] = row;
            if fields != 0 {
                let update = (done + n) as u64;
                self.write_exceptions(exceptions, fields, update - previous, new);
                previous = update;
            }
            gaps[n] = (index - next) as u32;
            next = index + 1;
            n += 1;
            if n == CHUNK {
                flush(&rows, &gaps, done, out);
                (done, n) = (done + CHUNK, 0);
            }
        });
        if n > 0 {
            flush(&rows[..n], &gaps[..n], done, out);
        }
    }

    /// [`SnapshotConfig::write_columns`] for a delta of at most [`HELD`] updates, all held in
    /// `held` by the first pass. Packed at once, eight updates to a block as chunk by chunk:
    /// a chunk is whole blocks, so each chunk's part of a column starts on a byte all the same.
    fn write_held(
        &self,
        plan: &Plan,
        held: &Held,
        new: &[QuantizedEntity],
        out: &mut [u8],
        exceptions: &mut BitWriter<'_>,
    ) {
        let (widths, n) = (plan.widths(), plan.updates);
        let sizes = column_bytes(widths, n);
        let mut at = 0;
        pack_values(widths[0], &held.gaps[..n], &mut out[at..]);
        for (c, lane) in COLUMNS.iter().enumerate() {
            at += sizes[c];
            pack_lane(widths[c + 1], &held.rows[..n], *lane, &mut out[at..]);
        }
        let mut previous = 0;
        for (word, mut excepted) in held.excepted.into_iter().enumerate() {
            while excepted != 0 {
                let k = 64 * word + excepted.trailing_zeros() as usize;
                excepted &= excepted - 1;
                let (index, fields) = held.exceptions[k];
                if let Some(entity) = new.get(index as usize) {
                    self.write_exceptions(exceptions, fields, (k - previous) as u64, entity);
                    previous = k;
                }
            }
        }
    }

    /// The exceptions of one update: for each field set in `fields`, the update's index gap
    /// (`gap` for the first, 0 after), the field's number and its absolute form.
    fn write_exceptions(
        &self,
        w: &mut BitWriter<'_>,
        fields: u32,
        gap: u64,
        new: &QuantizedEntity,
    ) {
        let mut gap = gap;
        for field in (0..4).filter(|f| fields >> f & 1 == 1) {
            ID_TIERS.write(w, gap);
            w.write(field as u64, 2);
            let (value, bits) = self.absolute(field, new);
            let low = bits.min(BITS_PER_CALL_MAX);
            w.write(value as u64 & mask(low), low);
            w.write((value >> low) as u64, bits - low);
            gap = 0;
        }
    }
}

/// Eight values of `W` bits, the first lowest, as one little-endian word.
#[inline(always)]
fn pack8<const W: usize>(values: [u32; 8]) -> u128 {
    if W <= 8 {
        // Eight values fit one 64-bit word, which is cheaper to build than a 128-bit one.
        let mut word = 0u64;
        for (k, value) in values.iter().enumerate() {
            word |= u64::from(*value) << (k * W);
        }
        return u128::from(word);
    }
    let mut word = 0u128;
    for (k, value) in values.iter().enumerate() {
        word |= u128::from(*value) << (k * W);
    }
    word
}

/// Writes `values` (at most 8 per group, only the last group short) as `W`-bit fields.
#[inline(always)]
fn pack_groups<const W: usize>(values: &[u32], out: &mut [u8], at: &mut usize) {
    for group in values.chunks(8) {
        let word = pack8::<W>(std::array::from_fn(|k| group.get(k).copied().unwrap_or(0)));
        let bytes = (group.len() * W).div_ceil(8);
        out[*at..*at + bytes].copy_from_slice(&word.to_le_bytes()[..bytes]);
        *at += bytes;
    }
}

/// Packs `values`, eight (`W` bytes) at a time.
fn pack_values_w<const W: usize>(values: &[u32], out: &mut [u8]) {
    let mut blocks = values.chunks_exact(8);
    // Each block's bytes from a zipped chunk of `out`, not an index: no bounds check.
    for (block, bytes) in (&mut blocks).zip(out.chunks_exact_mut(W)) {
        let Some(block) = block.first_chunk::<8>() else { continue };
        bytes.copy_from_slice(&pack8::<W>(*block).to_le_bytes()[..W]);
    }
    let mut at = values.len() / 8 * W;
    pack_groups::<W>(blocks.remainder(), out, &mut at);
}

/// Packs lane `lane` of each row, eight rows (`W` bytes) at a time.
fn pack_lane_w<const W: usize>(rows: &[[u32; 12]], lane: usize, out: &mut [u8]) {
    // Below 12, which the compiler can see: no bounds check per value.
    let lane = lane.min(11);
    if W <= 8 {
        return pack_lane_words::<W>(rows, lane, out);
    }
    let mut blocks = rows.chunks_exact(8);
    // Each block's bytes from a zipped chunk of `out`, not an index: no bounds check.
    for (block, bytes) in (&mut blocks).zip(out.chunks_exact_mut(W)) {
        let Some(block) = block.first_chunk::<8>() else { continue };
        let word = pack8::<W>(std::array::from_fn(|r| block[r][lane]));
        bytes.copy_from_slice(&word.to_le_bytes()[..W]);
    }
    let mut at = rows.len() / 8 * W;
    let rest = blocks.remainder();
    let values: [u32; 8] = std::array::from_fn(|r| rest.get(r).map_or(0, |row| row[lane]));
    pack_groups::<W>(&values[..rest.len()], out, &mut at);
}

/// [`pack_lane_w`] for `W` of at most 8, 64 rows at a time: their column is `W` whole 64-bit
/// words, each built in a register from its blocks and stored once, where a block's `W` bytes
/// took up to three stores.
#[inline(always)]
fn pack_lane_words<const W: usize>(rows: &[[u32; 12]], lane: usize, out: &mut [u8]) {
    let lane = lane.min(11);
    let mut chunks = rows.chunks_exact(64);
    for (chunk, bytes) in (&mut chunks).zip(out.chunks_exact_mut(8 * W)) {
        let Some(chunk) = chunk.first_chunk::<64>() else { continue };
        let mut words = [0u64; W];
        for b in 0..8 {
            let block: [u32; 8] = std::array::from_fn(|r| chunk[8 * b + r][lane]);
            let (word, bit) = (pack8::<W>(block) as u64, 8 * W * b);
            words[bit / 64] |= word << (bit % 64);
            if bit % 64 + 8 * W > 64 {
                words[bit / 64 + 1] |= word >> (64 - bit % 64);
            }
        }
        for (word, bytes) in words.iter().zip(bytes.chunks_exact_mut(8)) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
    }
    let rest = chunks.remainder();
    let mut blocks = rest.chunks_exact(8);
    let at = (rows.len() - rest.len()) / 8 * W;
    let tail = out.get_mut(at..).unwrap_or_default();
    for (block, bytes) in (&mut blocks).zip(tail.chunks_exact_mut(W)) {
        let Some(block) = block.first_chunk::<8>() else { continue };
        let word = pack8::<W>(std::array::from_fn(|r| block[r][lane]));
        bytes.copy_from_slice(&word.to_le_bytes()[..W]);
    }
    let mut at = rows.len() / 8 * W;
    let last = blocks.remainder();
    let values: [u32; 8] = std::array::from_fn(|r| last.get(r).map_or(0, |row| row[lane]));
    pack_groups::<W>(&values[..last.len()], out, &mut at);
}

/// Eight values of `W` bits from the start of `bytes`; bytes past its end read as zero.
#[inline(always)]
fn unpack8<const W: usize>(bytes: &[u8]) -> [u32; 8] {
    let word = match bytes.first_chunk::<16>() {
        Some(word) => u128::from_le_bytes(*word),
        None => {
            let mut word = [0u8; 16];
            let n = bytes.len().min(16);
            word[..n].copy_from_slice(&bytes[..n]);
            u128::from_le_bytes(word)
        }
    };
    std::array::from_fn(|k| (word >> (k * W)) as u32 & mask(W as u32) as u32)
}

fn unpack_values_w<const W: usize>(bytes: &[u8], values: &mut [u32]) {
    for (g, group) in values.chunks_mut(8).enumerate() {
        let unpacked = unpack8::<W>(bytes.get(g * W..).unwrap_or_default());
        group.copy_from_slice(&unpacked[..group.len()]);
    }
}

/// Unpacks values, still zigzagged (undone with the addition, where it vectorises), into lane
/// `lane` of each row, eight rows (`W` bytes) at a time, each value from an 8-byte load at an
/// offset fixed at compile time.
fn unpack_lane_w<const W: usize>(bytes: &[u8], rows: &mut [[i32; 12]], lane: usize) {
    // Below 12, which the compiler can see: no bounds check per value.
    let lane = lane.min(11);
    let m = mask(W as u32) as u32;
    let mut blocks = rows.chunks_exact_mut(8);
    let mut at = 0;
    for block in &mut blocks {
        match bytes.get(at..at + W + 8) {
            Some(b) => {
                for (r, row) in block.iter_mut().enumerate() {
                    let bit = r * W;
                    // `b` holds W + 8 bytes and `bit / 8` is below W, so eight follow.
                    let word = b[bit / 8..bit / 8 + 8].try_into().expect("eight bytes");
                    row[lane] = ((u64::from_le_bytes(word) >> (bit % 8)) as u32 & m) as i32;
                }
            }
            None => unpack_lane_slow::<W>(&bytes[at.min(bytes.len())..], block, lane),
        }
        at += W;
    }
    unpack_lane_slow::<W>(bytes.get(at..).unwrap_or_default(), blocks.into_remainder(), lane);
}

/// [`unpack_lane_w`] near the end of the column, where fewer than eight bytes follow a value.
#[cold]
fn unpack_lane_slow<const W: usize>(bytes: &[u8], rows: &mut [[i32; 12]], lane: usize) {
    let reader = BitReader::new(bytes);
    for (r, row) in rows.iter_mut().enumerate() {
        row[lane] = (reader.peek_at(r * W) & mask(W as u32)) as i32;
    }
}

/// Calls the monomorphised `$f::<W>` for a width known only at run time.
macro_rules! by_width {
    ($width:expr, $f:ident, $($arg:expr),*) => {
        match $width {
            1 => $f::<1>($($arg),*), 2 => $f::<2>($($arg),*), 3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*), 5 => $f::<5>($($arg),*), 6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*), 8 => $f::<8>($($arg),*), 9 => $f::<9>($($arg),*),
            10 => $f::<10>($($arg),*), 11 => $f::<11>($($arg),*), 12 => $f::<12>($($arg),*),
            13 => $f::<13>($($arg),*), 14 => $f::<14>($($arg),*), _ => $f::<15>($($arg),*),
        }
    };
}

fn pack_values(width: u32, values: &[u32], out: &mut [u8]) {
    if width > 0 {
        by_width!(width, pack_values_w, values, out);
    }
}

fn pack_lane(width: u32, rows: &[[u32; 12]], lane: usize, out: &mut [u8]) {
    if width > 0 {
        by_width!(width, pack_lane_w, rows, lane, out);
    }
}

fn unpack_values(width: u32, bytes: &[u8], values: &mut [u32]) {
    match width {
        0 => values.fill(0),
        _ => by_width!(width, unpack_values_w, bytes, values),
    }
}

fn unpack_lane(width: u32, bytes: &[u8], rows: &mut [[i32; 12]], lane: usize) {
    match width {
        0 => rows.iter_mut().for_each(|row| row[lane] = 0),
        _ => by_width!(width, unpack_lane_w, bytes, rows, lane),
    }
}

/// The rest of a column delta's header, after the update count.
struct Counts {
    exceptions: usize,
    edits: usize,
    /// The index of the first update in the result.
    first: u64,
    /// The gap width, then the twelve component widths ([`COLUMNS`] order), each checked
    /// against its limit.
    widths: [u32; 13],
}

/// Reads [`Counts`].
fn read_counts(r: &mut BitReader<'_>) -> Result<Counts, DecodeError> {
    let exceptions = r.read(32, Field::EntityCount) as usize;
    let edits = r.read(16, Field::EntityCount) as usize;
    let first = r.read(16, Field::EntityId);
    let gap_width = r.read(8, Field::FieldWidths);
    r.check(Field::FieldWidths, gap_width, u64::from(GAP_WIDTH_MAX));
    let packed = r.read(48, Field::FieldWidths);
    r.status()?;
    let widths: [u32; 13] = std::array::from_fn(|c| match c {
        0 => gap_width as u32,
        _ => (packed >> (4 * (c - 1)) & 15) as u32,
    });
    if let Some(width) = widths[1..].iter().find(|w| **w > DELTA_WIDTH_MAX) {
        let (value, max) = (u64::from(*width), u64::from(DELTA_WIDTH_MAX));
        return Err(DecodeError::OutOfBounds { field: Field::FieldWidths, value, max });
    }
    Ok(Counts { exceptions, edits, first, widths })
}

/// Where a column delta's sections start, in bytes, once its edits are read.
struct Sections {
    updates: usize,
    exceptions: usize,
    /// The index of the first update in the result.
    first: u64,
    /// The gap width, then the twelve component widths.
    widths: [u32; 13],
    /// The byte each column starts at, and the byte after the last column.
    starts: [usize; 14],
}

impl Sections {
    /// Column `c` and whatever follows it: reading past a column's last value in whole words
    /// is what lets the last block take the fast path, and no value is taken from there.
    fn column<'a>(&self, bytes: &'a [u8], c: usize) -> &'a [u8] {
        &bytes[self.starts[c]..]
    }
}

impl SnapshotConfig {
    /// Rebuilds the snapshot from a column delta whose header the reader has read up to the
    /// update count: the baseline merged with the edits, then the updates added by index, then
    /// the exceptions written over them. `bytes` is the whole datagram. Without edits, the
    /// updates' indices go to `updated`, if given, and the result says they did.
    pub(super) fn read_columns(
        &self,
        r: &mut BitReader<'_>,
        bytes: &[u8],
        updates: u16,
        baseline: &Snapshot,
        out: &mut Snapshot,
        updated: Option<&mut Vec<u32>>,
    ) -> Result<bool, DecodeError> {
        let counts = read_counts(r)?;
        check_count(baseline.len(), self.entities_max())?;
        if counts.edits == 0 {
            out.entities.extend_from_slice(baseline.entities());
        } else {
            self.merge_edits(r, counts.edits, baseline, out)?;
        }
        let sections = self.sections(r, bytes, usize::from(updates), &counts)?;
        r.seek(8 * sections.starts[13], Field::AngularVelocity);
        // With edits the indices are into the merged entities, not the baseline's: unlisted.
        let updated = updated.filter(|_| counts.edits == 0);
        let listed = updated.is_some();
        self.add_updates(r, bytes, &sections, out, updated)?;
        Ok(listed)
    }

    /// The baseline with the edits' spawns and despawns, merged by id into `out`.
    fn merge_edits(
        &self,
        r: &mut BitReader<'_>,
        edits: usize,
        baseline: &Snapshot,
        out: &mut Snapshot,
    ) -> Result<(), DecodeError> {
        let (base, max) = (baseline.entities(), self.entities_max());
        let (mut i, mut previous) = (0, None);
        for _ in 0..edits {
            let id = read_id(r, previous);
            let spawn = r.read_bit(Field::RecordKind);
            r.status()?;
            let j = i + base[i..].partition_point(|e| e.id < id);
            check_count(out.len() + j - i, max)?;
            out.entities.extend_from_slice(&base[i..j]);
            i = j;
            let present = base.get(i).is_some_and(|e| e.id == id);
            if spawn == present {
                return Err(DecodeError::BaselineConflict { id });
            }
            if spawn {
                let flags = r.read(2, Field::MovingFlags);
                let entity = self.read_body(r, id, flags);
                r.status()?;
                check_count(out.len() + 1, max)?;
                out.entities.push(entity);
            } else {
                i += 1;
            }
            previous = Some(id);
        }
        check_count(out.len() + base.len() - i, max)?;
        out.entities.extend_from_slice(&base[i..]);
        Ok(())
    }

    /// Places the columns after the edits (whose padding must be zero) and checks that they
    /// fit the datagram.
    fn sections(
        &self,
        r: &BitReader<'_>,
        bytes: &[u8],
        updates: usize,
        counts: &Counts,
    ) -> Result<Sections, DecodeError> {
        let end = r.bit_pos();
        if end % 8 != 0 && r.peek_at(end) & mask((8 - end % 8) as u32) != 0 {
            return Err(DecodeError::NonZeroPadding);
        }
        let widths = counts.widths;
        let sizes = column_bytes(widths, updates);
        let mut starts = [end.div_ceil(8); 14];
        for c in 0..13 {
            starts[c + 1] = starts[c] + sizes[c];
        }
        if starts[13] > bytes.len() {
            let c = (0..13).find(|c| starts[c + 1] > bytes.len()).unwrap_or(12);
            let field =
                if c == 0 { Field::EntityId } else { FIELDS[FIELD_OF_LANE[COLUMNS[c - 1]]] };
            return Err(DecodeError::Truncated { field });
        }
        // The bits of each column's last byte past its last value, ORed: all must be zero.
        let mut spare = 0;
        for c in 0..13 {
            let used = widths[c] as usize * updates % 8;
            let last = bytes[..starts[c + 1]].last().copied().unwrap_or(0);
            spare |= if used == 0 { 0 } else { last >> used };
        }
        if spare != 0 {
            return Err(DecodeError::NonZeroPadding);
        }
        let (exceptions, first) = (counts.exceptions, counts.first);
        Ok(Sections { updates, exceptions, first, widths, starts })
    }

    /// Adds every update's deltas to its entity of `out`, `CHUNK` at a time, and writes the
    /// exceptions (read from `r`, in update order) over the chunk they belong to.
    fn add_updates(
        &self,
        r: &mut BitReader<'_>,
        bytes: &[u8],
        s: &Sections,
        out: &mut Snapshot,
        updated: Option<&mut Vec<u32>>,
    ) -> Result<(), DecodeError> {
        DECODER_ROWS.with_borrow_mut(|rows| self.add_rows_of(r, bytes, s, out, rows, updated))
    }

    /// [`SnapshotConfig::add_updates`] with the thread's rows.
    fn add_rows_of(
        &self,
        r: &mut BitReader<'_>,
        bytes: &[u8],
        s: &Sections,
        out: &mut Snapshot,
        scratch: &mut Rows,
        mut updated: Option<&mut Vec<u32>>,
    ) -> Result<(), DecodeError> {
        let Rows { indices, lanes: rows } = scratch;
        let mut next = s.first;
        let mut exceptions = Exceptions { left: s.exceptions, ready: false, update: 0, field: 0 };
        exceptions.read(r)?;
        for done in (0..s.updates).step_by(CHUNK) {
            let n = (s.updates - done).min(CHUNK);
            let at = |c: usize| {
                s.column(bytes, c).get(done * s.widths[c] as usize / 8..).unwrap_or_default()
            };
            unpack_values(s.widths[0], at(0), &mut indices[..n]);
            for index in &mut indices[..n] {
                next += u64::from(*index);
                *index = next.min(u64::from(u32::MAX)) as u32;
                next += 1;
            }
            let len = out.entities.len() as u64;
            if next > len {
                let value = u64::from(
                    indices[..n].iter().copied().find(|i| u64::from(*i) >= len).unwrap_or(u32::MAX),
                );
                let max = len.saturating_sub(1);
                return Err(DecodeError::OutOfBounds { field: Field::EntityId, value, max });
            }
            if let Some(updated) = updated.as_deref_mut() {
                updated.extend_from_slice(&indices[..n]);
            }
            for (c, lane) in COLUMNS.iter().enumerate() {
                unpack_lane(s.widths[c + 1], at(c + 1), &mut rows[..n], *lane);
            }
            self.add_rows(&indices[..n], &mut rows[..n], &mut out.entities)?;
            while exceptions.pending() && exceptions.update < (done + n) as u64 {
                let index = indices[exceptions.update as usize - done] as usize;
                self.write_over(r, exceptions.field, &mut out.entities[index])?;
                exceptions.read(r)?;
            }
        }
        match exceptions.pending() {
            false => Ok(()),
            true => Err(DecodeError::OutOfBounds {
                field: Field::EntityId,
                value: exceptions.update,
                max: (s.updates as u64).saturating_sub(1),
            }),
        }
    }

    /// Adds each row's twelve zigzagged deltas to the entity at its index, leaving the sums in
    /// `rows`, and checks that every code is within its range.
    fn add_rows(
        &self,
        indices: &[u32],
        rows: &mut [[i32; 12]],
        entities: &mut [QuantizedEntity],
    ) -> Result<(), DecodeError> {
        for (index, row) in indices.iter().zip(rows.iter_mut()) {
            let Some(e) = entities.get_mut(*index as usize) else { continue };
            let base = lanes(e);
            let sum: [i32; 12] =
                std::array::from_fn(|k| base[k].wrapping_add(unzigzag(row[k] as u32)));
            e.position = [sum[0] as u32, sum[1] as u32, sum[2] as u32];
            e.linear_velocity = [sum[3], sum[4], sum[5]];
            e.angular_velocity = [sum[6], sum[7], sum[8]];
            e.rotation.components = [sum[9] as u16, sum[10] as u16, sum[11] as u16];
            *row = sum;
        }
        // Limits are below 2^31, so a code is above its limit exactly when it or the limit
        // minus it has the sign bit set. A loop of its own over the sums makes each row three
        // vector operations; it stops at the first row out of range in its first lane, and
        // that exit keeps the compiler from vectorising across rows instead (with a gather
        // for each value).
        let (limits, offsets) = self.lane_bounds();
        let limits = limits.map(|limit| limit as i32);
        let mut over = [0i32; 12];
        for row in rows.iter() {
            for k in 0..12 {
                let code = row[k].wrapping_add(offsets[k]);
                over[k] |= limits[k].wrapping_sub(code) | code;
            }
            if over[0] < 0 {
                break;
            }
        }
        match over.iter().any(|o| *o < 0) {
            false => Ok(()),
            true => Err(self.first_out_of_range(indices, entities)),
        }
    }

    /// For each lane, the largest code plus its offset (below 2^31: positions have at most 28
    /// bits, velocities 18), and the offset that makes the smallest code zero (velocities are
    /// signed).
    fn lane_bounds(&self) -> ([u32; 12], [i32; 12]) {
        let [sx, sy, sz] = self.position.steps();
        let rotation = mask(self.rotation.bits()) as u32;
        let (lh, ah) = (self.linear_velocity.half(), self.angular_velocity.half());
        let (lr, ar) = (2 * lh as u32, 2 * ah as u32);
        let limits = [sx, sy, sz, lr, lr, lr, ar, ar, ar, rotation, rotation, rotation];
        let offsets = [0, 0, 0, lh, lh, lh, ah, ah, ah, 0, 0, 0];
        (limits, offsets)
    }

    /// The error for the first updated entity with a code out of its range; rare, so looked
    /// for again.
    #[cold]
    fn first_out_of_range(&self, indices: &[u32], entities: &[QuantizedEntity]) -> DecodeError {
        let (limits, offsets) = self.lane_bounds();
        let codes = indices
            .iter()
            .filter_map(|index| entities.get(*index as usize))
            .flat_map(|e| (0..12).map(|k| (k, lanes(e)[k].wrapping_add(offsets[k]) as u32)));
        let (lane, value) =
            codes.into_iter().find(|(k, code)| *code > limits[*k]).unwrap_or((0, u32::MAX));
        DecodeError::OutOfBounds {
            field: FIELDS[FIELD_OF_LANE[lane]],
            value: u64::from(value),
            max: u64::from(limits[lane]),
        }
    }

    /// Reads one exception's absolute value over its field of `entity`.
    fn write_over(
        &self,
        r: &mut BitReader<'_>,
        field: u64,
        entity: &mut QuantizedEntity,
    ) -> Result<(), DecodeError> {
        match field {
            0 => entity.position = self.read_position(r),
            1 => entity.rotation = self.read_rotation(r),
            2 => entity.linear_velocity = read_velocity(r, &self.linear_velocity, FIELDS[2]),
            _ => entity.angular_velocity = read_velocity(r, &self.angular_velocity, FIELDS[3]),
        }
        r.status()
    }
}

/// The exceptions still to read, and the update and field of the one read and not yet
/// applied, if any.
struct Exceptions {
    left: usize,
    ready: bool,
    update: u64,
    field: u64,
}

impl Exceptions {
    fn pending(&self) -> bool {
        self.ready
    }

    /// Reads the next exception's update index gap and field, if any is left; the absolute
    /// value follows in the reader.
    fn read(&mut self, r: &mut BitReader<'_>) -> Result<(), DecodeError> {
        self.ready = self.left > 0;
        if !self.ready {
            return Ok(());
        }
        self.update += ID_TIERS.read(r, Field::EntityId);
        self.field = r.read(2, Field::RecordKind);
        self.left -= 1;
        r.status()
    }
}

/// A column delta as the wire carries it, for `rally inspect`: the baseline is not at hand, so
/// updates show as entity indices and deltas.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnsListing {
    /// The gap width, then the widths of the twelve component columns: position x, y, z, the
    /// three rotation codes, linear velocity x, y, z, angular velocity x, y, z.
    pub widths: [u32; 13],
    /// Spawns and despawns, by id.
    pub edits: Vec<DeltaRecord>,
    /// Each update's index into the result and its twelve deltas (position, rotation codes,
    /// linear and angular velocity).
    pub updates: Vec<(u64, [i32; 12])>,
    /// Each exception's update, and its entity with that field's absolute value (the other
    /// fields zero).
    pub exceptions: Vec<(u64, QuantizedEntity)>,
}

impl SnapshotConfig {
    /// Reads a column delta without its baseline (see [`ColumnsListing`]).
    pub fn list_columns(&self, bytes: &[u8]) -> Result<ColumnsListing, DecodeError> {
        let mut r = BitReader::new(bytes);
        let header = read_header(&mut r)?;
        let counts = read_counts(&mut r)?;
        let mut listing = ColumnsListing {
            widths: counts.widths,
            edits: Vec::new(),
            updates: Vec::new(),
            exceptions: Vec::new(),
        };
        let mut previous = None;
        for _ in 0..counts.edits {
            let id = read_id(&mut r, previous);
            let edit = match r.read_bit(Field::RecordKind) {
                true => {
                    let flags = r.read(2, Field::MovingFlags);
                    DeltaRecord::Spawn(self.read_body(&mut r, id, flags))
                }
                false => DeltaRecord::Despawn { id },
            };
            r.status()?;
            listing.edits.push(edit);
            previous = Some(id);
        }
        let updates = usize::from(header.count);
        let s = self.sections(&r, bytes, updates, &counts)?;
        let mut index = None::<u64>;
        for done in (0..updates).step_by(CHUNK) {
            let n = (updates - done).min(CHUNK);
            let (mut gaps, mut rows) = ([0u32; CHUNK], [[0i32; 12]; CHUNK]);
            let at = |c: usize| &s.column(bytes, c)[done * s.widths[c] as usize / 8..];
            unpack_values(s.widths[0], at(0), &mut gaps[..n]);
            for (c, lane) in COLUMNS.iter().enumerate() {
                unpack_lane(s.widths[c + 1], at(c + 1), &mut rows[..n], *lane);
            }
            for (gap, row) in gaps[..n].iter().zip(&rows[..n]) {
                let gap = u64::from(*gap);
                let i = index.map_or(s.first + gap, |i| i + 1 + gap);
                let fields: [[i32; 3]; 4] =
                    std::array::from_fn(|f| field_lanes(row, f).map(|z| unzigzag(z as u32)));
                listing.updates.push((i, *fields.as_flattened().first_chunk().expect("12")));
                index = Some(i);
            }
        }
        r.seek(8 * s.starts[13], Field::AngularVelocity);
        let mut pending = Exceptions { left: counts.exceptions, ready: false, update: 0, field: 0 };
        pending.read(&mut r)?;
        while pending.pending() {
            let mut entity = QuantizedEntity::default();
            self.write_over(&mut r, pending.field, &mut entity)?;
            listing.exceptions.push((pending.update, entity));
            pending.read(&mut r)?;
        }
        r.finish()?;
        Ok(listing)
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the packing's blocks (written into zipped chunks of the output) and the first
    //! pass's one-test row give the bytes and rows of the forms they replace, whatever the
    //! buffer held before and after the columns. Method: property tests against a
    //! [`BitWriter`] writing each column's values one by one (the format's definition), and
    //! against [`row`], on random values, widths and entity pairs.

    use super::*;
    use proptest::prelude::*;

    /// Each column's values through a bit writer, padded to a byte: the column layout.
    fn written(widths: [u32; 13], gaps: &[u32], rows: &[[u32; 12]]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (c, width) in widths.iter().enumerate() {
            let mut column = vec![0u8; (gaps.len() * *width as usize).div_ceil(8)];
            let mut w = BitWriter::new(&mut column);
            for (gap, row) in gaps.iter().zip(rows) {
                w.write(u64::from(if c == 0 { *gap } else { row[COLUMNS[c - 1]] }), *width);
            }
            w.finish().expect("sized for the column");
            bytes.extend_from_slice(&column);
        }
        bytes
    }

    /// Values below 2^width, for each column's width.
    fn columns() -> impl Strategy<Value = ([u32; 13], Vec<u32>, Vec<[u32; 12]>)> {
        let component = proptest::array::uniform12(0u32..=DELTA_WIDTH_MAX);
        let widths = (0u32..=GAP_WIDTH_MAX, component)
            .prop_map(|(gap, w)| std::array::from_fn(|c| if c == 0 { gap } else { w[c - 1] }));
        (widths, 0usize..=HELD + 70).prop_flat_map(|(widths, n)| {
            let value = |c: usize| any::<u32>().prop_map(move |v| v & mask(widths[c]) as u32);
            let gaps = proptest::collection::vec(value(0), n);
            let row = proptest::array::uniform12(any::<u32>()).prop_map(move |row| {
                std::array::from_fn(|k| {
                    let c = COLUMNS.iter().position(|lane| *lane == k).expect("a lane") + 1;
                    row[k] & mask(widths[c]) as u32
                })
            });
            (Just(widths), gaps, proptest::collection::vec(row, n))
        })
    }

    proptest! {
        #[test]
        fn held_columns_are_the_written_ones(
            (widths, gaps, rows) in columns(), tail in 0usize..24, junk in any::<u8>(),
        ) {
            // As write_held packs them: the columns at once, into a buffer of the columns'
            // length (then what follows them, here junk that must stay), reused.
            let expected = written(widths, &gaps, &rows);
            let mut out = vec![junk; expected.len() + tail];
            let sizes = column_bytes(widths, gaps.len());
            let columns = &mut out[..expected.len()];
            pack_values(widths[0], &gaps, columns);
            let mut at = 0;
            for (c, lane) in COLUMNS.iter().enumerate() {
                at += sizes[c];
                pack_lane(widths[c + 1], &rows, *lane, &mut columns[at..]);
            }
            prop_assert_eq!(&out[..expected.len()], &expected[..]);
            prop_assert!(out[expected.len()..].iter().all(|b| *b == junk));
        }

        #[test]
        fn chunked_columns_are_the_written_ones((widths, gaps, rows) in columns()) {
            // As write_columns packs them: a chunk of every column at a time.
            let expected = written(widths, &gaps, &rows);
            let mut out = vec![0xA5; expected.len()];
            let sizes = column_bytes(widths, gaps.len());
            let starts: [usize; 13] =
                std::array::from_fn(|c| sizes[..c].iter().sum::<usize>());
            for done in (0..gaps.len()).step_by(CHUNK) {
                let n = (gaps.len() - done).min(CHUNK);
                let at = |c: usize| starts[c] + done * widths[c] as usize / 8;
                pack_values(widths[0], &gaps[done..done + n], &mut out[at(0)..]);
                for (c, lane) in COLUMNS.iter().enumerate() {
                    let rows = &rows[done..done + n];
                    pack_lane(widths[c + 1], rows, *lane, &mut out[at(c + 1)..]);
                }
            }
            prop_assert_eq!(out, expected);
        }

        #[test]
        fn a_row_in_groups_is_the_row(
            old in entity(), steps in proptest::array::uniform12(-3i32..=3),
            still in any::<bool>(), wide in 0usize..16, largest in 0u8..6,
            far in prop_oneof![
                Just(1 << 13), Just((1 << 13) - 1), Just(-(1 << 13)), Just(-(1 << 13) - 1),
                -(1 << 20)..(1 << 20),
            ],
        ) {
            // Small steps (none at all half the time: an unchanged row), one lane sometimes
            // far (at the column width's edge: a zigzag of 2^14 - 1 or 2^14), the rotation's
            // layout sometimes changed.
            let base = lanes(&old);
            let mut lanes = base;
            for (lane, step) in lanes.iter_mut().zip(steps) {
                *lane = lane.wrapping_add(if still { 0 } else { step });
            }
            if let (Some(lane), Some(from)) = (lanes.get_mut(wide), base.get(wide)) {
                *lane = from.wrapping_add(far);
            }
            let mut new = old;
            new.position = [lanes[0] as u32, lanes[1] as u32, lanes[2] as u32];
            new.linear_velocity = [lanes[3], lanes[4], lanes[5]];
            new.angular_velocity = [lanes[6], lanes[7], lanes[8]];
            new.rotation.components = [lanes[9] as u16, lanes[10] as u16, lanes[11] as u16];
            if largest < 4 {
                new.rotation.largest = largest;
            }
            let grouped = row_groups(&old, &new).map(|(groups, fields)| {
                let row: [u32; 12] = std::array::from_fn(|k| group::to_array(groups[k / 4])[k % 4]);
                (row, fields)
            });
            prop_assert_eq!(grouped, row(&old, &new));
        }
    }

    fn entity() -> impl Strategy<Value = QuantizedEntity> {
        let codes = proptest::array::uniform3(any::<u16>());
        (any::<[u32; 3]>(), any::<[i32; 3]>(), any::<[i32; 3]>(), codes, 0u8..4).prop_map(
            |(position, linear_velocity, angular_velocity, components, largest)| {
                let rotation = QuantizedRotation { largest, components };
                QuantizedEntity { id: 1, position, rotation, linear_velocity, angular_velocity }
            },
        )
    }
}

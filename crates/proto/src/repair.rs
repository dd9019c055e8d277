//! Streaming repair of reliable-ordered channels: a systematic sliding-window random linear
//! code over GF(2^8), after RFC 8681, tuned for latency.
//!
//! Every message goes out once, as usual. With [`crate::Repair::Adaptive`] on and loss
//! measured on the path, a **repair** follows each new message `repair_interval` later, in a
//! packet of its own: a random linear combination of every message from the oldest one not yet
//! acknowledged to the newest sent (its **window**). One repair fills any one hole in its
//! window, so when a message and the repair after it are both lost, the next message's repair
//! recovers it one send interval later instead of after a round trip. The receiver reports in
//! a repair ack (frame `0x05`) the next message it must deliver (which acknowledges what it
//! decoded) and its **shortfall**, the holes its repairs do not yet cover; a shortfall makes the
//! sender send that many repairs at once. It sends one only for a round trip after it decoded
//! a message and while it is short: the packet acks tell the sender of every other message.
//! Repairs start on, and stop when the measured loss falls to zero.
//!
//! **Symbols.** Message `seq` is coded as the symbol `len u16 || check u32 || payload`, where
//! `check` is [`checksum`] of the payload; a repair's data is `sum(c_seq * symbol_seq)` over its
//! window, each symbol zero-padded to the longest, with `c_seq = coefficient(seed, seq)` (never
//! zero). The receiver subtracts the symbols it has, keeps the remaining equations over its
//! holes in reduced row echelon form, and delivers a message the moment one equation is left
//! with a single unknown: only if its length fits, its padding is zero and its checksum
//! matches, so that a wrong combination is counted and dropped, never delivered. It keeps the
//! repairs as they arrived beside the reduced rows, so that a wrong one found out costs only
//! itself: the rows are rebuilt without it ([`Decoder`]'s recovery), and the true repairs held
//! with it still count.
//!
//! **Limits.** A repair covers at most [`WINDOW_MAX`] messages, and its unknowns must lie
//! within [`WINDOW_MAX`] of the next message to deliver. What the decoder holds (equations and
//! the symbols of recent messages it may have to subtract) counts against
//! `receive_bytes_max`, like messages held behind a gap; past it a repair is dropped (and
//! counted), and the channel's resends repair the hole instead.

use crate::gf256;
use crate::time::Instant;
use rally_wire::seq::seq16_newer;
use std::collections::VecDeque;
use std::time::Duration;

/// Messages one repair may combine, and how far past the next message to deliver its unknowns
/// may lie.
pub const WINDOW_MAX: usize = 32;
/// Bytes in front of a message's payload in its symbol: length u16 and checksum u32.
pub const SYMBOL_HEADER: usize = 6;

/// The coefficient of message `seq` in the repair with `seed`: a hash of both, never zero, so
/// that every message of the window takes part.
pub fn coefficient(seed: u16, seq: u16) -> u8 {
    let mut x = (u64::from(seed) << 16 | u64::from(seq)) ^ 0x9E37_79B9_7F4A_7C15;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    1 + (x % 255) as u8
}

/// A 32-bit check of a payload that a decoded symbol must match: eight bytes at a time through
/// a multiply and a rotation, so that it costs little per message. It catches a wrong
/// combination (random bytes pass with odds of 2^-32); it is no defence against a forger,
/// which the packets' AEAD is.
pub fn checksum(payload: &[u8]) -> u32 {
    const K: u64 = 0x9FB2_1C65_1E98_DF25;
    let mut h = (payload.len() as u64).wrapping_mul(K) ^ 0x2545_F491_4F6C_DD1D;
    let mut chunks = payload.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of eight"));
        h = (h ^ word).wrapping_mul(K).rotate_left(29);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    h ^= h >> 32;
    h as u32
}

/// The symbol header of `payload` with its checksum `check`.
fn symbol_header(len: usize, check: u32) -> [u8; SYMBOL_HEADER] {
    let mut header = [0u8; SYMBOL_HEADER];
    header[..2].copy_from_slice(&(len as u16).to_le_bytes());
    header[2..].copy_from_slice(&check.to_le_bytes());
    header
}

/// Adds `c` times the symbol of `payload` (with checksum `check`) to `data`.
fn add_symbol(data: &mut [u8], c: u8, payload: &[u8], check: u32) {
    let header = symbol_header(payload.len(), check);
    gf256::mul_add(&mut data[..SYMBOL_HEADER], c, &header);
    gf256::mul_add(&mut data[SYMBOL_HEADER..], c, payload);
}

/// One message of a repair's window, as the sender holds it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// Its sequence on the channel.
    pub seq: u16,
    /// Its [`checksum`].
    pub check: u32,
    /// The message.
    pub payload: &'a [u8],
}

/// Writes the repair of `window` (at most [`WINDOW_MAX`] messages) with `seed` into `out`
/// and returns its length, the longest symbol's; `None` for an empty or too long window.
pub fn encode<'a, W>(window: W, seed: u16, out: &mut Vec<u8>) -> Option<usize>
where
    W: Iterator<Item = Source<'a>> + Clone,
{
    let count = window.clone().count();
    if count == 0 || count > WINDOW_MAX {
        return None;
    }
    let len = SYMBOL_HEADER + window.clone().map(|s| s.payload.len()).max()?;
    out.clear();
    out.resize(len, 0);
    for source in window {
        add_symbol(out, coefficient(seed, source.seq), source.payload, source.check);
    }
    Some(len)
}

/// Why the decoder set a repair aside. A connection counts each in
/// `ConnectionStats::repairs_dropped`, `Inconsistent` in `repairs_failed`, `Redundant` not at
/// all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dropped {
    /// Its window holds a message delivered too long ago to subtract, or unknowns too far
    /// ahead of the next message to deliver.
    OutOfWindow,
    /// It is shorter than a message it claims to combine.
    TooShort,
    /// Holding it would pass `receive_bytes_max`.
    NoRoom,
    /// It says nothing new (every message it combines is known, or it depends on the others).
    Redundant,
    /// It contradicts what is known: a wrong combination (counted as failed).
    Inconsistent,
}

/// One equation over the holes: coefficients by offset from the decoder's base, and data.
/// A kept row has coefficient 1 at its pivot column and every other kept row 0 there.
#[derive(Debug, Clone)]
struct Row {
    coefficients: [u8; WINDOW_MAX],
    data: Vec<u8>,
    /// Its pivot column, once kept. Tracked, not searched for: eliminating another row's pivot
    /// may leave nonzero coefficients before it.
    pivot: usize,
}

impl Row {
    fn first_nonzero(&self) -> Option<usize> {
        self.coefficients.iter().position(|c| *c != 0)
    }

    fn is_solved(&self) -> bool {
        self.coefficients.iter().filter(|c| **c != 0).count() == 1
    }

    fn is_empty(&self) -> bool {
        self.coefficients.iter().all(|c| *c == 0)
    }

    /// `self -= c * other`.
    fn subtract(&mut self, c: u8, other: &Row) {
        if c == 0 {
            return;
        }
        for (x, y) in self.coefficients.iter_mut().zip(&other.coefficients) {
            *x ^= gf256::mul(c, *y);
        }
        if self.data.len() < other.data.len() {
            self.data.resize(other.data.len(), 0);
        }
        gf256::mul_add(&mut self.data, c, &other.data);
    }

    fn normalize(&mut self, pivot: usize) {
        let inverse = gf256::inverse(self.coefficients[pivot]).expect("a pivot is nonzero");
        gf256::scale(&mut self.coefficients, inverse);
        gf256::scale(&mut self.data, inverse);
    }

    /// What it counts against the receive limit.
    fn cost(&self) -> usize {
        std::mem::size_of::<Row>() + self.data.len()
    }
}

/// A message the decoder knows: what it subtracts from repairs that combine it.
#[derive(Debug)]
struct Known {
    seq: u16,
    check: u32,
    payload: Vec<u8>,
}

impl Known {
    fn cost(&self) -> usize {
        std::mem::size_of::<Known>() + self.payload.len()
    }
}

/// A repair as it arrived: its window and its data.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// The window's first message.
    pub start: u16,
    /// Messages in the window.
    pub count: u8,
    /// The seed of its coefficients.
    pub seed: u16,
    /// The combined symbols.
    pub data: &'a [u8],
}

/// The receiving side of one channel's repairs. A connection keeps one per repaired channel;
/// it is public for tools and benchmarks that drive the code without a connection.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The channel's next message to deliver when the rows were last rebased: column `i` of a
    /// row is message `base + i`.
    base: u16,
    rows: Vec<Row>,
    /// The repairs behind `rows` as they arrived (less the messages known since), so that a
    /// wrong one can be found and taken out ([`Decoder::recover`]) instead of every row going.
    equations: Vec<Row>,
    /// Wrong combinations found: each a repair the connection counts as failed.
    inconsistent: u64,
    /// Messages received recently (delivered, or held behind a gap), oldest first, at most
    /// two windows' worth.
    known: VecDeque<Known>,
    /// The newest message the peer is known to have sent (by a message or a repair's window).
    newest: Option<u16>,
    /// What `rows` and `known` count against the receive limit.
    bytes: usize,
    /// Whether a repair has arrived: only then are recent messages kept, and repair acks sent
    /// (when owed: `report_until`, or a shortfall).
    pub(crate) active: bool,
    /// Until when packets carry a repair ack after a message was decoded: only a decoded
    /// message needs one, the packet acks tell the sender of every other.
    pub(crate) report_until: Option<crate::time::Instant>,
    /// Buffers of forgotten messages, for the next ones: a steady stream would otherwise
    /// allocate one per message.
    spare: Vec<Vec<u8>>,
}

/// Spare message buffers a decoder keeps.
const SPARE_MAX: usize = 4;

/// A message a repair gave back, verified.
pub type Decoded = (u16, Vec<u8>);

impl Decoder {
    /// What the decoder holds against the receive limit.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes the count of wrong combinations found since the last call.
    pub fn take_failures(&mut self) -> u64 {
        std::mem::take(&mut self.inconsistent)
    }

    /// Notes that the channel's next message to deliver is now `next`: columns of messages
    /// now delivered leave the rows (they were subtracted when the messages arrived), and
    /// messages delivered more than a window ago are forgotten.
    pub fn rebase(&mut self, next: u16) {
        let shift = usize::from(next.wrapping_sub(self.base));
        if shift != 0 && shift < 0x8000 {
            let shifted = shift.min(WINDOW_MAX);
            shift_columns(&mut self.rows, shifted);
            shift_columns(&mut self.equations, shifted);
            self.base = next;
        }
        let oldest = next.wrapping_sub(WINDOW_MAX as u16);
        while self.known.front().is_some_and(|k| seq16_newer(oldest, k.seq)) {
            let k = self.known.pop_front().expect("front exists");
            self.bytes -= k.cost();
            if self.spare.len() < SPARE_MAX {
                self.spare.push(k.payload);
            }
        }
        self.recount();
    }

    /// Forgets what it must to hold at most `bytes`: the oldest known messages first, then
    /// equations. Repairs that needed them are dropped later, and resends fill those holes.
    pub(crate) fn shed(&mut self, bytes: usize) {
        while self.bytes > bytes {
            if let Some(k) = self.known.pop_front() {
                self.bytes -= k.cost();
            } else if let Some(equation) = self.equations.pop() {
                self.bytes -= equation.cost();
            } else if let Some(row) = self.rows.pop() {
                self.bytes -= row.cost();
            } else {
                break;
            }
        }
    }

    fn recount(&mut self) {
        self.bytes = self.rows.iter().chain(&self.equations).map(Row::cost).sum::<usize>()
            + self.known.iter().map(Known::cost).sum::<usize>();
    }

    /// Message `seq` arrived (or was decoded): it is subtracted from every equation, and kept
    /// for later repairs if active and `room` allows. Returns messages this solved.
    pub fn learn(&mut self, seq: u16, payload: &[u8], room: usize) -> Vec<Decoded> {
        self.note_newest(seq);
        if !self.active {
            return Vec::new();
        }
        let check = checksum(payload);
        if let Some(column) = self.column(seq) {
            self.substitute(column, payload, check);
            self.reduce();
        }
        let mut buffer = self.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(payload);
        let known = Known { seq, check, payload: buffer };
        if known.cost() <= room && self.known.len() < 2 * WINDOW_MAX && !self.knows(seq) {
            self.bytes += known.cost();
            let at = self.known.iter().position(|k| seq16_newer(k.seq, seq));
            self.known.insert(at.unwrap_or(self.known.len()), known);
        }
        self.solve().unwrap_or_default()
    }

    fn knows(&self, seq: u16) -> bool {
        self.known.iter().any(|k| k.seq == seq)
    }

    fn note_newest(&mut self, seq: u16) {
        if self.newest.is_none_or(|n| seq16_newer(seq, n)) {
            self.newest = Some(seq);
        }
    }

    /// The row column of message `seq`, if within the window past the base.
    fn column(&self, seq: u16) -> Option<usize> {
        let offset = usize::from(seq.wrapping_sub(self.base));
        (offset < WINDOW_MAX).then_some(offset)
    }

    /// Subtracts the message in `column` from the rows and the equations; an equation left
    /// with no unknown is spent (and was a wrong combination if its data is not zero).
    fn substitute(&mut self, column: usize, payload: &[u8], check: u32) {
        substitute_into(&mut self.rows, column, payload, check);
        spend(&mut self.equations, column, payload, check);
    }

    /// Brings the rows back to reduced echelon form after a substitution took a pivot away:
    /// each is reduced by the others again. A row that turns out to contradict the rest means
    /// a wrong combination among the equations: [`Decoder::recover`] takes it out.
    fn reduce(&mut self) {
        let rows = std::mem::take(&mut self.rows);
        let mut consistent = true;
        for row in rows {
            consistent &= eliminate(&mut self.rows, row, usize::MAX) != Err(Dropped::Inconsistent);
        }
        if !consistent {
            self.recover();
        }
        self.recount();
    }

    /// Some equation is a wrong combination (garbage from the peer, or a repair of messages
    /// the receiver holds differently). Takes out the one equation whose removal leaves the
    /// others consistent and solving the most, the oldest on a tie (a true repair more often
    /// exposes an older wrong one than the reverse), and rebuilds the rows from the rest; so a
    /// true repair is not lost with the garbage. With no such equation among at most
    /// [`RECOVER_MAX`] (which bounds the work bad input can cause), every row goes. Returns
    /// whether one was found.
    fn recover(&mut self) -> bool {
        self.inconsistent += 1;
        let mut best: Option<(usize, usize, Vec<Row>)> = None;
        if self.equations.len() <= RECOVER_MAX {
            for skip in 0..self.equations.len() {
                let others = self.equations.iter().enumerate().filter(|(i, _)| *i != skip);
                let Some((rows, solved)) = consistent_rows(others.map(|(_, e)| e.clone())) else {
                    continue;
                };
                if best.as_ref().is_none_or(|(_, most, _)| solved > *most) {
                    best = Some((skip, solved, rows));
                }
            }
        }
        let found = best.map(|(skip, _, rows)| {
            self.equations.remove(skip);
            self.rows = rows;
        });
        if found.is_none() {
            self.rows.clear();
            self.equations.clear();
        }
        self.recount();
        found.is_some()
    }

    /// Takes a repair. `held` gives the messages the channel holds behind a gap; `room` is
    /// what the decoder may newly hold. Returns the messages it solved, verified.
    pub fn receive<'h>(
        &mut self,
        repair: Incoming<'_>,
        held: impl Fn(u16) -> Option<&'h [u8]>,
        room: usize,
    ) -> Result<Vec<Decoded>, Dropped> {
        self.active = true;
        let failures = self.inconsistent;
        if repair.count == 0 || usize::from(repair.count) > WINDOW_MAX {
            return Err(Dropped::OutOfWindow);
        }
        let last = repair.start.wrapping_add(u16::from(repair.count) - 1);
        self.note_newest(last);
        // The common case on a lossy path: nothing of the window is missing. Checked first,
        // so that it costs no arithmetic on the data.
        let missing = |seq: u16| !self.knows(seq) && held(seq).is_none();
        if !(0..u16::from(repair.count)).any(|k| missing(repair.start.wrapping_add(k))) {
            return Err(Dropped::Redundant);
        }
        let mut row = Row { coefficients: [0; WINDOW_MAX], data: repair.data.to_vec(), pivot: 0 };
        // Room for the row and the equation kept beside it.
        if 2 * row.cost() > room {
            return Err(Dropped::NoRoom);
        }
        for k in 0..u16::from(repair.count) {
            let seq = repair.start.wrapping_add(k);
            let c = coefficient(repair.seed, seq);
            let delivered = seq16_newer(self.base, seq);
            if let Some(known) = self.known.iter().find(|k| k.seq == seq) {
                if known.payload.len() + SYMBOL_HEADER > row.data.len() {
                    return Err(Dropped::TooShort);
                }
                add_symbol(&mut row.data, c, &known.payload, known.check);
            } else if let Some(payload) = held(seq).filter(|_| !delivered) {
                if payload.len() + SYMBOL_HEADER > row.data.len() {
                    return Err(Dropped::TooShort);
                }
                add_symbol(&mut row.data, c, payload, checksum(payload));
            } else {
                let column = self.column(seq).filter(|_| !delivered);
                row.coefficients[column.ok_or(Dropped::OutOfWindow)?] = c;
            }
        }
        // The common case, one hole and nothing else held, solves at once: its equation need
        // not be kept (if it fails its checks, there is nothing else to keep either).
        let lone = self.rows.is_empty() && row.is_solved();
        let equation = (!lone).then(|| row.clone());
        match eliminate(&mut self.rows, row, room) {
            Ok(()) => self.equations.extend(equation),
            Err(Dropped::Inconsistent) => {
                self.equations.extend(equation);
                self.recover();
            }
            Err(dropped) => return Err(dropped),
        }
        self.recount();
        match self.solve() {
            Ok(solved) if solved.is_empty() && self.inconsistent > failures => {
                Err(Dropped::Inconsistent)
            }
            result => result,
        }
    }

    /// Takes out every row left with one unknown and verifies its message. A message that
    /// fails its checks means some equation was a wrong combination: [`Decoder::recover`]
    /// takes it out, or failing that every row goes.
    fn solve(&mut self) -> Result<Vec<Decoded>, Dropped> {
        let mut solved = Vec::new();
        while let Some(at) = self.rows.iter().position(Row::is_solved) {
            let row = self.rows.swap_remove(at);
            let column = row.pivot;
            let seq = self.base.wrapping_add(column as u16);
            let Some(payload) = verify(&row.data) else {
                if self.recover() {
                    continue;
                }
                return if solved.is_empty() { Err(Dropped::Inconsistent) } else { Ok(solved) };
            };
            // In reduced echelon form no other row has this column: nothing to eliminate.
            debug_assert!(self.rows.iter().all(|r| r.coefficients[column] == 0));
            let check = checksum(payload);
            spend(&mut self.equations, column, payload, check);
            // Known from now on, for the repairs still on their way that combine it.
            if !self.knows(seq) && self.known.len() < 2 * WINDOW_MAX {
                let known = Known { seq, check, payload: payload.to_vec() };
                let at = self.known.iter().position(|k| seq16_newer(k.seq, seq));
                self.known.insert(at.unwrap_or(self.known.len()), known);
            }
            solved.push((seq, payload.to_vec()));
        }
        self.recount();
        Ok(solved)
    }

    /// Holes in the messages up to the newest known, less the equations held over them: how
    /// many more independent repairs the receiver needs to deliver everything it knows of.
    pub fn shortfall(&self, next: u16, is_held: impl Fn(u16) -> bool) -> u8 {
        let Some(newest) = self.newest.filter(|n| *n == next || seq16_newer(*n, next)) else {
            return 0;
        };
        let span = usize::from(newest.wrapping_sub(next)) + 1;
        let holes = (0..span.min(WINDOW_MAX) as u16)
            .map(|k| next.wrapping_add(k))
            .filter(|seq| !is_held(*seq))
            .count();
        holes.saturating_sub(self.rows.len()).min(usize::from(u8::MAX)) as u8
    }
}

/// Equations [`Decoder::recover`] tries leaving out at most: each try rebuilds the rows.
const RECOVER_MAX: usize = 8;

/// Reduces `row` by `rows` and adds it, keeping them in reduced echelon form; `room` bounds
/// the row's cost.
fn eliminate(rows: &mut Vec<Row>, mut row: Row, room: usize) -> Result<(), Dropped> {
    for other in rows.iter() {
        let c = row.coefficients[other.pivot];
        row.subtract(c, other);
    }
    let Some(pivot) = row.first_nonzero() else {
        return Err(if row.data.iter().all(|b| *b == 0) {
            Dropped::Redundant
        } else {
            Dropped::Inconsistent
        });
    };
    if row.cost() > room {
        return Err(Dropped::NoRoom);
    }
    row.normalize(pivot);
    row.pivot = pivot;
    for other in rows.iter_mut() {
        let c = other.coefficients[pivot];
        other.subtract(c, &row);
    }
    rows.push(row);
    Ok(())
}

/// The reduced rows of `equations` and how many messages they solve, if they are consistent
/// and every message they solve passes its checks.
fn consistent_rows(equations: impl Iterator<Item = Row>) -> Option<(Vec<Row>, usize)> {
    let mut rows = Vec::new();
    for equation in equations {
        if eliminate(&mut rows, equation, usize::MAX) == Err(Dropped::Inconsistent) {
            return None;
        }
    }
    let mut solved = rows.iter().filter(|r| r.is_solved());
    let verified = solved.clone().all(|r| verify(&r.data).is_some());
    let count = solved.by_ref().count();
    verified.then_some((rows, count))
}

/// Subtracts the symbol of the message in `column` from each of `rows`.
fn substitute_into(rows: &mut [Row], column: usize, payload: &[u8], check: u32) {
    for row in rows {
        let c = std::mem::take(&mut row.coefficients[column]);
        if c != 0 {
            let need = SYMBOL_HEADER + payload.len();
            if row.data.len() < need {
                row.data.resize(need, 0);
            }
            add_symbol(&mut row.data, c, payload, check);
        }
    }
}

/// Subtracts the message in `column` from `equations`; an equation left with no unknown is
/// spent and goes (one whose only unknown it was, without the arithmetic).
fn spend(equations: &mut Vec<Row>, column: usize, payload: &[u8], check: u32) {
    equations.retain(|e| e.coefficients[column] == 0 || !e.is_solved());
    substitute_into(equations, column, payload, check);
    equations.retain(|e| !e.is_empty());
}

/// Drops the first `shifted` columns (messages now delivered) of `rows`; a row still nonzero
/// there was never subtracted and goes.
fn shift_columns(rows: &mut Vec<Row>, shifted: usize) {
    rows.retain(|row| row.coefficients[..shifted].iter().all(|c| *c == 0));
    for row in rows.iter_mut() {
        row.coefficients.copy_within(shifted.., 0);
        row.coefficients[WINDOW_MAX - shifted..].fill(0);
        row.pivot = row.pivot.saturating_sub(shifted);
    }
}

/// Repairs sent at once for a shortfall at most: a burst longer than this is left to the
/// repairs after the next messages, and to resends.
const REACTIVE_MAX: u8 = 4;
/// Repair bytes per byte of new messages at most, over the connection's life: with headers and
/// acks the wire stays within W1's budget of 2.5 bytes per payload byte.
const BUDGET_PER_PAYLOAD_BYTE: f64 = 1.1;
/// Repair bytes always allowed before the budget applies, so that the first losses of a
/// connection can be repaired.
const BUDGET_SLACK: u64 = 16 * 1024;

/// Repair send times remembered, to tell which repairs a receiver's report could not yet
/// have seen.
const RECENT_MAX: usize = 8;

/// The sending side of one channel's repairs: when they are due and how many.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    /// When the next proactive repair is due: `repair_interval` after a new message.
    pub(crate) due_at: Option<Instant>,
    /// Repairs owed now (proactive ones come due here, reactive ones are added).
    owed: u8,
    /// When the latest repairs went out, a ring.
    recent: [Instant; RECENT_MAX],
    recent_next: usize,
    /// Fractions of a repair owed by the rate (more than one per message on bursty paths).
    credit: f64,
    /// Payload bytes of new messages sent, and repair bytes sent.
    payload_bytes: u64,
    repair_bytes: u64,
    /// The repair being written, reused.
    pub(crate) scratch: Vec<u8>,
}

impl Encoder {
    /// A new message of `len` bytes went out at `now`; `plan` is the repairs per message and
    /// the interval after which they follow (no repairs at a rate of zero).
    pub(crate) fn on_fresh(&mut self, now: Instant, len: usize, plan: (f64, Duration)) {
        self.payload_bytes += len as u64;
        let (rate, interval) = plan;
        if rate > 0.0 {
            self.credit += rate;
            self.due_at.get_or_insert(now + interval);
        }
    }

    /// Moves proactive repairs that came due at `now` into those owed.
    pub(crate) fn tick(&mut self, now: Instant) {
        if self.due_at.is_some_and(|at| at <= now) {
            self.due_at = None;
            let whole = self.credit.floor().min(f64::from(REACTIVE_MAX));
            self.credit -= whole;
            self.owed = self.owed.saturating_add(whole as u8);
        }
    }

    /// The receiver reports `shortfall` holes its repairs do not cover, as of a report that
    /// could not have seen repairs sent after `unseen_after`: owe the difference now.
    pub(crate) fn on_shortfall(&mut self, shortfall: u8, unseen_after: Instant) {
        let unseen = self.recent.iter().filter(|t| **t > unseen_after).count();
        let unseen = u8::try_from(unseen).unwrap_or(u8::MAX);
        self.owed = self.owed.max(shortfall.saturating_sub(unseen).min(REACTIVE_MAX));
    }

    /// Whether a repair should go out at `now`.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.owed > 0 || self.due_at.is_some_and(|at| at <= now)
    }

    /// Whether another repair of `len` bytes stays within the byte budget.
    pub(crate) fn within_budget(&self, len: usize) -> bool {
        let allowed = self.payload_bytes as f64 * BUDGET_PER_PAYLOAD_BYTE + BUDGET_SLACK as f64;
        (self.repair_bytes + len as u64) as f64 <= allowed
    }

    /// A repair of `len` bytes goes out at `now` (its seed is its packet's sequence).
    pub(crate) fn on_sent(&mut self, now: Instant, len: usize) {
        self.owed = self.owed.saturating_sub(1);
        self.repair_bytes += len as u64;
        self.recent[self.recent_next % RECENT_MAX] = now;
        self.recent_next += 1;
    }

    /// Nothing to repair (every message acknowledged, or none that can be coded): forget
    /// what was owed.
    pub(crate) fn clear(&mut self) {
        self.owed = 0;
        self.due_at = None;
        self.credit = self.credit.min(1.0);
    }
}

/// The payload of a solved symbol, if its length fits, its padding is zero and its checksum
/// matches.
fn verify(symbol: &[u8]) -> Option<&[u8]> {
    let header = symbol.get(..SYMBOL_HEADER)?;
    let len = usize::from(u16::from_le_bytes([header[0], header[1]]));
    let check = u32::from_le_bytes(header[2..].try_into().expect("four bytes"));
    let payload = symbol.get(SYMBOL_HEADER..SYMBOL_HEADER + len)?;
    let padding_zero = symbol[SYMBOL_HEADER + len..].iter().all(|b| *b == 0);
    (padding_zero && checksum(payload) == check).then_some(payload)
}

#[cfg(test)]
mod tests;

//! Which of an endpoint's slots need looking at, and when, so that the endpoint's work follows
//! what happened rather than how many connections it holds: a host with thousands of
//! connections must not visit each one for every datagram it receives.
//!
//! A slot is *touched* when something happens to it (a datagram, a send, a close); at the end
//! of the endpoint's method its deadline is recomputed and its events gathered later. Deadlines
//! sit in a priority queue (`Timers`: entries armed in time order in a plain queue, the others
//! in a heap), one live entry per slot (its *armed* time) at most: a deadline moving later
//! leaves that entry where it is, and when it surfaces it is armed again at the slot's deadline
//! then, so a slot that sends every tick and pushes its keepalive later each time costs the heap
//! nothing until that entry comes round; a deadline moving earlier arms a new entry and leaves
//! the old one stale, skipped when it surfaces. The earliest entry may therefore be early; a
//! host that wakes by its next tick anyway has the entries armed before then whose slot's
//! deadline moved later armed again at it first ([`Schedule::rearm_before`]): otherwise every
//! connection that sends each tick would wake it once per keepalive interval for nothing (a
//! wake-up costs a host far more than the heap's pop and push). Slots whose deadline has come
//! move to the *due* queue, which `poll_transmit` works through in turn.

use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Armed entries ([`Schedule::entry`]s), earliest first, kept in two parts: a queue of
/// entries armed in nondecreasing order, and a heap of the others. An owed ack's entry is
/// armed at its input's time plus `ack_delay_max`, and re-armed at the next one when it
/// surfaces: connections' inputs come in time order, so nearly every such entry joins the
/// queue's back and leaves its front, in constant time, where the heap took a sift through
/// every level for each (the pop and the push of a re-arm were most of the schedule's cost).
/// An entry earlier than the queue's back (a deadline moved earlier than the last one armed)
/// goes to the heap; the earliest entry is the earlier of the two fronts, kept apart since
/// `poll_transmit` reads it for every packet.
#[derive(Debug)]
struct Timers {
    ordered: VecDeque<u128>,
    heap: BinaryHeap<Reverse<u128>>,
    /// The earliest entry of either, `NONE` if both are empty.
    first: u128,
}

impl Default for Timers {
    fn default() -> Self {
        Self { ordered: VecDeque::new(), heap: BinaryHeap::new(), first: Self::NONE }
    }
}

impl Timers {
    /// No entry: a slot's index never reaches `u64::MAX`, so no entry is this.
    const NONE: u128 = u128::MAX;

    fn push(&mut self, entry: u128) {
        if self.ordered.back().is_none_or(|&last| last <= entry) {
            self.ordered.push_back(entry);
        } else {
            self.heap.push(Reverse(entry));
        }
        self.first = self.first.min(entry);
    }

    /// The earliest entry.
    #[inline]
    fn peek(&self) -> Option<u128> {
        (self.first != Self::NONE).then_some(self.first)
    }

    /// Drops the earliest entry.
    fn pop(&mut self) {
        match (self.ordered.front(), self.heap.peek()) {
            (Some(&first), Some(&Reverse(top))) if top < first => {
                self.heap.pop();
            }
            (Some(_), _) => {
                self.ordered.pop_front();
            }
            (None, _) => {
                self.heap.pop();
            }
        }
        let ordered = self.ordered.front().copied().unwrap_or(Self::NONE);
        let heap = self.heap.peek().map_or(Self::NONE, |&Reverse(top)| top);
        self.first = ordered.min(heap);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ordered.len() + self.heap.len()
    }
}

/// Per-slot bookkeeping of an endpoint.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    /// Slots touched since their deadline was last computed.
    touched: Vec<usize>,
    /// Slots that may have events to gather, or may have drained.
    eventful: Vec<usize>,
    /// Armed times, earliest first, possibly stale.
    timers: Timers,
    /// Slots whose deadline has come, in the order they are served.
    due: VecDeque<usize>,
    /// Per slot: its current deadline (`None` while due or idle) and its list memberships.
    slots: Vec<SlotState>,
}

#[derive(Debug, Default, Clone, Copy)]
struct SlotState {
    deadline: Option<Instant>,
    /// The time of the slot's live heap entry, at or before `deadline` (if it has one).
    armed: Option<Instant>,
    touched: bool,
    eventful: bool,
    due: bool,
}

impl Schedule {
    /// A heap entry: `at` in the high half, `slot` in the low one, so that entries order as
    /// `(at, slot)` would but with one wide comparison instead of a tuple's two (a re-armed
    /// owed-ack timer sifts through every level of the heap, comparing at each).
    fn entry(at: Instant, slot: usize) -> u128 {
        u128::from(at.as_nanos()) << 64 | slot as u128
    }

    /// The earliest entry's time and slot.
    fn top(&self) -> Option<(Instant, usize)> {
        let entry = self.timers.peek()?;
        Some((Instant::from_nanos((entry >> 64) as u64), entry as u64 as usize))
    }

    fn state(&mut self, slot: usize) -> &mut SlotState {
        if slot >= self.slots.len() {
            self.slots.resize(slot + 1, SlotState::default());
        }
        &mut self.slots[slot]
    }

    /// Something happened to `slot`: its deadline and events need a look.
    pub(crate) fn touch(&mut self, slot: usize) {
        let state = self.state(slot);
        let (touched, eventful) = (state.touched, state.eventful);
        state.touched = true;
        state.eventful = true;
        if !touched {
            self.touched.push(slot);
        }
        if !eventful {
            self.eventful.push(slot);
        }
    }

    /// `slot` may have events to gather (or may have drained).
    pub(crate) fn mark_eventful(&mut self, slot: usize) {
        let state = self.state(slot);
        if !state.eventful {
            state.eventful = true;
            self.eventful.push(slot);
        }
    }

    /// The due slots, in turn order.
    pub(crate) fn due_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.due.iter().copied()
    }

    /// Whether any slot was touched since the last [`Schedule::take_touched`].
    pub(crate) fn has_touched(&self) -> bool {
        !self.touched.is_empty()
    }

    /// Takes the touched slots, for their deadlines to be recomputed with [`Schedule::set`].
    pub(crate) fn take_touched(&mut self) -> Vec<usize> {
        for &slot in &self.touched {
            self.slots[slot].touched = false;
        }
        std::mem::take(&mut self.touched)
    }

    /// Gives back the (emptied) list `take_touched` returned, to keep its allocation.
    pub(crate) fn return_touched(&mut self, mut list: Vec<usize>) {
        list.clear();
        if self.touched.is_empty() {
            self.touched = list;
        }
    }

    /// Takes the slots that may have events.
    pub(crate) fn take_eventful(&mut self) -> Vec<usize> {
        for &slot in &self.eventful {
            self.slots[slot].eventful = false;
        }
        std::mem::take(&mut self.eventful)
    }

    /// Gives back the list `take_eventful` returned, to keep its allocation (a host takes one
    /// every turn, as long as its connections).
    pub(crate) fn return_eventful(&mut self, mut list: Vec<usize>) {
        list.clear();
        if self.eventful.is_empty() {
            self.eventful = list;
        }
    }

    /// Records `slot`'s deadline (`None`: nothing to do until something happens). A slot in
    /// the due queue keeps its place there instead; it is set again when it leaves.
    #[inline]
    pub(crate) fn set(&mut self, slot: usize, deadline: Option<Instant>) {
        let state = self.state(slot);
        if state.due || state.deadline == deadline {
            return;
        }
        state.deadline = deadline;
        match deadline {
            // The live entry surfaces first and is armed again then.
            Some(at) if state.armed.is_some_and(|armed| armed <= at) => {}
            // The entry this leaves stale is later than the new one, so never at the top: the
            // heap's top need not be looked at.
            Some(at) => {
                state.armed = Some(at);
                self.timers.push(Self::entry(at, slot));
            }
            None => {}
        }
    }

    /// [`Schedule::set`], knowing it is `now`: a deadline already come puts the slot straight
    /// into the due queue (where [`Schedule::collect_due`] would move it at once), without a
    /// trip through the heap. A slot that sends every tick comes due this way each time.
    pub(crate) fn set_at(&mut self, slot: usize, deadline: Option<Instant>, now: Instant) {
        let state = self.state(slot);
        if state.due || state.deadline == deadline {
            return;
        }
        if deadline.is_some_and(|at| at <= now) {
            self.make_due(slot);
            return;
        }
        self.set(slot, deadline);
    }

    /// `slot` joins the due queue now, whatever its deadline; a slot already due keeps its
    /// place. Its armed entry, if any, stays armed: when it surfaces it finds the slot due and
    /// is dropped (at most an early wake-up meanwhile). No entry goes stale here, so the heap
    /// is not looked at (`Endpoint::send` makes a slot due for every message).
    pub(crate) fn make_due(&mut self, slot: usize) {
        let state = self.state(slot);
        if state.due {
            return;
        }
        state.deadline = None;
        state.due = true;
        self.due.push_back(slot);
    }

    /// Forgets `slot` (freed): it leaves the due queue and its deadline goes.
    pub(crate) fn forget(&mut self, slot: usize) {
        let state = self.state(slot);
        state.deadline = None;
        state.armed = None;
        if state.due {
            state.due = false;
            self.due.retain(|s| *s != slot);
        }
        self.drop_stale();
    }

    /// Moves every slot whose deadline is at or before `now` to the due queue.
    #[inline]
    pub(crate) fn collect_due(&mut self, now: Instant) {
        // Most calls (`poll_transmit` makes one a packet) find a live entry not yet come at
        // the top, and leave as the loop would: without its setup.
        match self.top() {
            None => {}
            Some((at, slot)) if at > now && self.slots[slot].armed == Some(at) => {}
            Some(_) => self.collect_come(now),
        }
    }

    /// [`Schedule::collect_due`] once an entry at the top has come or is stale.
    fn collect_come(&mut self, now: Instant) {
        while let Some((at, slot)) = self.top() {
            if at > now {
                break;
            }
            let state = &mut self.slots[slot];
            if state.armed != Some(at) {
                self.timers.pop();
                continue;
            }
            match state.deadline {
                _ if state.due => {
                    state.armed = None;
                    self.timers.pop();
                }
                Some(deadline) if deadline <= now => {
                    state.armed = None;
                    state.deadline = None;
                    state.due = true;
                    self.timers.pop();
                    self.due.push_back(slot);
                }
                _ => self.rearm_top(slot),
            }
        }
        self.drop_stale();
    }

    /// The live entry at the top, `slot`'s, whose deadline moved later than it (or went):
    /// armed again at the deadline, or dropped. The step `collect_due` takes when such an
    /// entry comes, and `rearm_before` before it does.
    #[inline]
    fn rearm_top(&mut self, slot: usize) {
        self.timers.pop();
        let state = &mut self.slots[slot];
        state.armed = state.deadline;
        if let Some(deadline) = state.deadline {
            self.timers.push(Self::entry(deadline, slot));
        }
    }

    /// The slot to serve next, if any is due.
    pub(crate) fn next_due(&self) -> Option<usize> {
        self.due.front().copied()
    }

    /// The slot at the front sent something: it goes to the back, so that no slot starves the
    /// others.
    pub(crate) fn rotate(&mut self) {
        if let Some(slot) = self.due.pop_front() {
            self.due.push_back(slot);
        }
    }

    /// The slot at the front has nothing more to send: it leaves the queue.
    pub(crate) fn leave(&mut self) -> Option<usize> {
        let slot = self.due.pop_front()?;
        self.slots[slot].due = false;
        Some(slot)
    }

    /// The earliest deadline, or an earlier time (an entry armed before its slot's deadline
    /// moved later, unless [`Schedule::rearm_before`] moved it): now, if a slot is due or
    /// touched.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        if !self.due.is_empty() || !self.touched.is_empty() {
            return Some(Instant::ZERO);
        }
        self.top().map(|(at, _)| at)
    }

    /// Arms again, at their slot's deadline, the entries armed before `by` at the top whose
    /// slot's deadline moved later since, and drops those of slots that have none: `earliest`
    /// then reads a deadline some slot really has (or one due now) or a time at or after `by`,
    /// not a wake-up that would find nothing to do. Each entry it moves is one `collect_due`
    /// would have moved when it surfaced; entries at or after `by` wait (moving them every turn
    /// would re-arm a slot that sends each tick at each of its packets).
    pub(crate) fn rearm_before(&mut self, by: Instant) {
        while let Some((at, slot)) = self.top() {
            if at >= by {
                return;
            }
            let state = &mut self.slots[slot];
            if state.armed != Some(at) {
                self.timers.pop();
                continue;
            }
            match state.deadline {
                // A due slot is served before any wake-up (`earliest` says now).
                _ if state.due => return,
                Some(deadline) if deadline <= at => return,
                _ => self.rearm_top(slot),
            }
        }
    }

    /// Pops stale entries off the top, so that `earliest` reads a current one. Only the steps
    /// that can leave the top stale take it (`forget`, `collect_due`); `set` and `make_due`
    /// cannot, and `rearm_before` may leave one from `by` on, dropped by the next
    /// `collect_due` (which `poll_transmit` and `handle_timeout` run before anything else).
    fn drop_stale(&mut self) {
        while let Some((at, slot)) = self.top() {
            if self.slots[slot].armed == Some(at) {
                return;
            }
            self.timers.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn deadlines_come_due_in_order_and_changed_ones_leave_no_trace() {
        let mut s = Schedule::default();
        s.set(0, Some(at(30)));
        s.set(1, Some(at(10)));
        s.set(2, Some(at(20)));
        // Slot 1 moves later: its entry stays armed for 10 ms, an early wake-up that comes
        // due nothing and arms it again for 40 ms.
        s.set(1, Some(at(40)));
        assert_eq!(s.earliest(), Some(at(10)));
        s.collect_due(at(10));
        assert_eq!(s.next_due(), None, "slot 1's deadline moved to 40 ms");
        assert_eq!(s.earliest(), Some(at(20)));
        s.collect_due(at(30));
        assert_eq!((s.leave(), s.leave(), s.leave()), (Some(2), Some(0), None));
        assert_eq!(s.earliest(), Some(at(40)));
        s.forget(1);
        assert_eq!(s.earliest(), None);
    }

    #[test]
    fn a_due_slot_is_served_in_turn_and_keeps_its_place() {
        let mut s = Schedule::default();
        s.set(0, Some(at(1)));
        s.set(1, Some(at(1)));
        s.collect_due(at(5));
        assert_eq!(s.next_due(), Some(0));
        s.rotate();
        assert_eq!(s.next_due(), Some(1));
        // While due, a new deadline does not take it out of the queue.
        s.set(1, Some(at(50)));
        assert_eq!(s.earliest(), Some(Instant::ZERO));
        assert_eq!((s.leave(), s.leave()), (Some(1), Some(0)));
        s.set(1, Some(at(50)));
        assert_eq!(s.earliest(), Some(at(50)));
    }

    #[test]
    fn a_deadline_already_come_joins_the_due_queue_at_once_and_leaves_nothing_stale() {
        // Goal: `set_at` with a deadline at or before `now` makes the slot due without
        // `collect_due`, and its earlier heap entry never brings it back twice.
        let mut s = Schedule::default();
        s.set(0, Some(at(20)));
        s.set_at(0, Some(at(5)), at(10));
        s.set_at(1, Some(at(30)), at(10));
        assert_eq!(s.next_due(), Some(0));
        assert_eq!(s.earliest(), Some(Instant::ZERO));
        assert_eq!(s.leave(), Some(0));
        s.collect_due(at(25));
        assert_eq!(s.next_due(), None, "slot 0's entry for 20 ms was stale");
        assert_eq!(s.earliest(), Some(at(30)));
    }

    #[test]
    fn a_slot_made_due_is_served_once_and_its_old_deadline_is_stale() {
        // Goal: `make_due` (a message queued) serves the slot now, once however many times it
        // is called, and its earlier deadline never brings it back.
        let mut s = Schedule::default();
        s.set(0, Some(at(20)));
        s.make_due(0);
        s.make_due(0);
        assert_eq!(s.earliest(), Some(Instant::ZERO));
        assert_eq!((s.leave(), s.leave()), (Some(0), None));
        s.collect_due(at(25));
        assert_eq!(s.next_due(), None, "slot 0's entry for 20 ms was stale");
        assert_eq!(s.earliest(), None);
    }

    #[test]
    fn a_slot_pushed_later_each_turn_keeps_one_heap_entry_and_comes_due_at_its_deadline() {
        // Goal: a slot made due and sent every tick, its deadline moving later each time,
        // leaves one entry in the heap (not one a tick), and still comes due at its last
        // deadline, not the time first armed.
        let mut s = Schedule::default();
        s.set(0, Some(at(100)));
        for tick in 1..=50 {
            s.make_due(0);
            assert_eq!(s.leave(), Some(0));
            s.set(0, Some(at(100 + tick)));
        }
        assert_eq!(s.timers.len(), 1);
        s.collect_due(at(120));
        assert_eq!(s.next_due(), None, "slot 0's deadline is 150 ms");
        assert_eq!(s.earliest(), Some(at(150)));
        s.collect_due(at(150));
        assert_eq!(s.leave(), Some(0));
        // Moving earlier arms a new entry; the old one surfaces stale and comes due nothing.
        s.set(0, Some(at(300)));
        s.set(0, Some(at(200)));
        s.collect_due(at(200));
        assert_eq!(s.leave(), Some(0));
        s.collect_due(at(300));
        assert_eq!(s.next_due(), None, "the entry for 300 ms was stale");
        assert_eq!(s.earliest(), None);
    }

    #[test]
    fn rearmed_the_earliest_time_is_a_deadline_some_slot_has() {
        // Goal: a host sleeping until `earliest` after `rearm_before` never wakes before `by`
        // for a slot whose deadline moved later (a keepalive pushed back by each send) or
        // went; entries from `by` on are left where they are.
        let mut s = Schedule::default();
        s.set(0, Some(at(100)));
        s.set(1, Some(at(50)));
        s.set(2, Some(at(70)));
        s.set(0, Some(at(110)));
        s.set(1, Some(at(120)));
        s.set(2, None);
        assert_eq!(s.earliest(), Some(at(50)), "armed before: an early wake-up");
        s.rearm_before(at(60));
        assert_eq!(s.earliest(), Some(at(70)), "slot 2's entry is at or after `by`");
        s.rearm_before(at(200));
        assert_eq!(s.earliest(), Some(at(110)));
        // The moved entries still come due at their deadlines, once each.
        s.collect_due(at(115));
        assert_eq!((s.leave(), s.leave()), (Some(0), None));
        s.collect_due(at(200));
        assert_eq!((s.leave(), s.leave()), (Some(1), None));
        assert_eq!(s.earliest(), None);
    }

    /// One step of `every_deadline_comes_due_exactly_at_its_time`: what a host does to the
    /// schedule, on slot `slot`, `dt` microseconds away.
    #[derive(Debug, Clone)]
    enum Step {
        /// A new deadline, `dt` from now (or none), as `settle` and `leave_due` set them.
        Set { slot: usize, dt: Option<u64> },
        /// A message queued.
        MakeDue { slot: usize },
        /// Time goes on by `dt` and the due slots are collected and served, each leaving with
        /// its next deadline (`dt` from then, or none).
        Advance { dt: u64, next: Option<u64> },
        /// A host that wakes by `dt` from now anyway asks when to wake.
        RearmBefore { dt: u64 },
        /// A slot freed.
        Forget { slot: usize },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let slot = 0..6usize;
        let dt = prop_oneof![0..40u64, 0..20_000u64];
        prop_oneof![
            4 => (slot.clone(), proptest::option::weighted(0.9, dt.clone()))
                .prop_map(|(slot, dt)| Step::Set { slot, dt }),
            1 => slot.clone().prop_map(|slot| Step::MakeDue { slot }),
            4 => (dt.clone(), proptest::option::weighted(0.9, dt.clone()))
                .prop_map(|(dt, next)| Step::Advance { dt, next }),
            1 => dt.prop_map(|dt| Step::RearmBefore { dt }),
            1 => slot.prop_map(|slot| Step::Forget { slot }),
        ]
    }

    proptest::proptest! {
        /// Goal: whatever the order of deadlines set, moved earlier or later, served and
        /// re-armed (entries in the ordered queue or the heap), every slot comes due at its
        /// deadline, not before and not after, and `earliest` is never later than the
        /// earliest deadline. Method: the schedule against a plain list of each slot's
        /// deadline, time advancing by whole microseconds (deadlines land exactly on them).
        #[test]
        fn every_deadline_comes_due_exactly_at_its_time(
            steps in proptest::collection::vec(step(), 1..200),
        ) {
            let us = |n: u64| Duration::from_micros(n);
            let mut s = Schedule::default();
            let mut now = at(1);
            // The model: each slot's deadline, and whether it is due.
            let mut deadline: [Option<Instant>; 6] = [None; 6];
            let mut due = [false; 6];
            for step in steps {
                match step {
                    Step::Set { slot, dt } => {
                        let when = dt.map(|dt| now + us(dt));
                        s.set_at(slot, when, now);
                        if !due[slot] {
                            deadline[slot] = when;
                            if when.is_some_and(|t| t <= now) {
                                (deadline[slot], due[slot]) = (None, true);
                            }
                        }
                    }
                    Step::MakeDue { slot } => {
                        s.make_due(slot);
                        (deadline[slot], due[slot]) = (None, true);
                    }
                    Step::Advance { dt, next } => {
                        now += us(dt);
                        s.collect_due(now);
                        for slot in 0..6 {
                            if deadline[slot].is_some_and(|t| t <= now) {
                                (deadline[slot], due[slot]) = (None, true);
                            }
                        }
                        let mut served: Vec<usize> = Vec::new();
                        while let Some(slot) = s.leave() {
                            served.push(slot);
                        }
                        served.sort();
                        let expected: Vec<usize> = (0..6).filter(|&i| due[i]).collect();
                        proptest::prop_assert_eq!(served, expected, "due at {:?}", now);
                        for slot in 0..6 {
                            if due[slot] {
                                let when = next.map(|dt| now + us(dt.max(1)));
                                s.set(slot, when);
                                (deadline[slot], due[slot]) = (when, false);
                            }
                        }
                    }
                    Step::RearmBefore { dt } => s.rearm_before(now + us(dt)),
                    Step::Forget { slot } => {
                        s.forget(slot);
                        (deadline[slot], due[slot]) = (None, false);
                    }
                }
                let first = deadline.iter().flatten().min().copied();
                let any_due = due.iter().any(|&d| d);
                match s.earliest() {
                    Some(t) if any_due => proptest::prop_assert_eq!(t, Instant::ZERO),
                    // Possibly earlier (an entry armed before its deadline moved later or
                    // went: an early wake-up), never later.
                    Some(t) => proptest::prop_assert!(first.is_none_or(|f| t <= f)),
                    None => proptest::prop_assert!(first.is_none() && !any_due),
                }
            }
        }
    }

    #[test]
    fn touched_slots_are_listed_once() {
        let mut s = Schedule::default();
        s.touch(3);
        s.touch(3);
        s.touch(1);
        assert_eq!(s.take_touched(), vec![3, 1]);
        assert_eq!(s.take_eventful(), vec![3, 1]);
        assert!(s.take_touched().is_empty());
    }
}

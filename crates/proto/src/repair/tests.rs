use super::*;
use crate::gf256::tests::rank;
use proptest::prelude::*;

/// Messages `first ..` of lengths `lens`, each filled from its sequence.
fn messages(first: u16, lens: &[usize]) -> Vec<(u16, Vec<u8>)> {
    lens.iter()
        .enumerate()
        .map(|(i, len)| {
            let seq = first.wrapping_add(i as u16);
            (seq, (0..*len).map(|k| (k as u8).wrapping_mul(31) ^ seq as u8).collect())
        })
        .collect()
}

fn repair_of(window: &[(u16, Vec<u8>)], seed: u16) -> Vec<u8> {
    let sources =
        window.iter().map(|(seq, payload)| Source { seq: *seq, check: checksum(payload), payload });
    let mut out = Vec::new();
    encode(sources, seed, &mut out).expect("a window within the limit");
    out
}

fn incoming<'a>(window: &[(u16, Vec<u8>)], seed: u16, data: &'a [u8]) -> Incoming<'a> {
    Incoming { start: window[0].0, count: window.len() as u8, seed, data }
}

const NOTHING_HELD: fn(u16) -> Option<&'static [u8]> = |_| None;

/// Goal: a receiver that lost some messages of a window gets every one back, exactly, once it
/// holds as many repairs as holes, and never a wrong one before. The brute-force rank of the
/// repairs' coefficients over the holes (plain Gaussian elimination, apart from the decoder's
/// incremental one) says when that is: the decoder must have delivered all holes exactly when
/// that rank equals their number. Method: random windows (wrapping sequences, lengths 0 to
/// 300), random holes, repairs with consecutive seeds, the received messages learned in order.
fn decode_case(first: u16, lens: Vec<usize>, lost_mask: u32, repairs: usize) {
    let window = messages(first, &lens);
    let lost: Vec<bool> = (0..window.len()).map(|i| lost_mask & (1 << i) != 0).collect();
    let mut decoder = Decoder { base: first, active: true, ..Decoder::default() };
    let mut got = std::collections::BTreeMap::new();
    for (i, (seq, payload)) in window.iter().enumerate() {
        if !lost[i] {
            for (s, p) in decoder.learn(*seq, payload, usize::MAX) {
                got.insert(s, p);
            }
        }
    }
    let holes: Vec<u16> = window.iter().zip(&lost).filter(|(_, l)| **l).map(|(m, _)| m.0).collect();
    let mut matrix = Vec::new();
    for seed in 0..repairs as u16 {
        let data = repair_of(&window, seed);
        if let Ok(solved) =
            decoder.receive(incoming(&window, seed, &data), NOTHING_HELD, usize::MAX)
        {
            got.extend(solved);
        }
        matrix.push(holes.iter().map(|seq| coefficient(seed, *seq)).collect::<Vec<u8>>());
    }
    for (seq, payload) in &got {
        let original = &window.iter().find(|m| m.0 == *seq).expect("a window message").1;
        assert_eq!(payload, original, "message {seq} decoded wrong");
    }
    let full = !holes.is_empty() && rank(&matrix) == holes.len();
    assert_eq!(got.len() == holes.len(), full || holes.is_empty(), "rank {}", rank(&matrix));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn holes_decode_exactly_when_the_repairs_have_full_rank(
        first: u16,
        lens in prop::collection::vec(0usize..300, 1..=12),
        lost_mask: u32,
        repairs in 0usize..6,
    ) {
        decode_case(first, lens, lost_mask, repairs);
    }

    /// Goal: a repair of garbage never delivers a message that was not sent. Method: random
    /// bytes as the repair of a window with one or two holes; whatever decodes must be one of
    /// the originals (with 2^-32 odds of a garbage symbol passing its checksum, never here).
    #[test]
    fn garbage_repairs_never_deliver(
        data in prop::collection::vec(any::<u8>(), 0..400),
        count in 1u8..8,
        seed: u16,
        lost in 0u8..8,
    ) {
        let window = messages(100, &vec![50; usize::from(count)]);
        let mut decoder = Decoder { base: 100, active: true, ..Decoder::default() };
        for (seq, payload) in &window {
            if (seq - 100) as u8 != lost {
                decoder.learn(*seq, payload, usize::MAX);
            }
        }
        let repair = Incoming { start: 100, count, seed, data: &data };
        let result = decoder.receive(repair, NOTHING_HELD, usize::MAX);
        prop_assert!(result.clone().map_or(true, |solved| solved.is_empty()), "{result:?}");
    }
}

/// Goal: a wrong combination (a repair claiming messages the receiver holds differently) is
/// counted as inconsistent and delivers nothing. Method: the receiver's message 1 differs
/// from the sender's; the repair over 0..3 then solves hole 2 to bytes that fail the checks.
#[test]
fn a_wrong_combination_fails_its_checks() {
    let sent = messages(0, &[40, 40, 40]);
    let mut held = sent.clone();
    held[1].1[3] ^= 0x55;
    let mut decoder = Decoder { active: true, ..Decoder::default() };
    decoder.learn(0, &held[0].1, usize::MAX);
    decoder.learn(1, &held[1].1, usize::MAX);
    let data = repair_of(&sent, 9);
    let result = decoder.receive(incoming(&sent, 9, &data), NOTHING_HELD, usize::MAX);
    assert!(matches!(result, Err(Dropped::Inconsistent)), "{result:?}");
    assert_eq!(decoder.rows.len(), 0);
}

/// Goal: the limits hold: a window longer than [`WINDOW_MAX`], unknowns past it, a message
/// delivered too long ago to subtract, and a repair with no room are dropped, and the decoder
/// never holds more than the room it is given. Method: one case each.
#[test]
fn repairs_past_the_limits_are_dropped() {
    let mut decoder = Decoder::default();
    let long = Incoming { start: 0, count: WINDOW_MAX as u8 + 1, seed: 1, data: &[0; 20] };
    assert_eq!(decoder.receive(long, NOTHING_HELD, usize::MAX), Err(Dropped::OutOfWindow));
    let empty = Incoming { start: 0, count: 0, seed: 1, data: &[0; 20] };
    assert_eq!(decoder.receive(empty, NOTHING_HELD, usize::MAX), Err(Dropped::OutOfWindow));
    let far = Incoming { start: WINDOW_MAX as u16, count: 1, seed: 1, data: &[0; 20] };
    assert_eq!(decoder.receive(far, NOTHING_HELD, usize::MAX), Err(Dropped::OutOfWindow));
    // Message 0 was delivered before the decoder knew it: it cannot be subtracted.
    decoder.rebase(1);
    let old = Incoming { start: 0, count: 2, seed: 1, data: &[0; 20] };
    assert_eq!(decoder.receive(old, NOTHING_HELD, usize::MAX), Err(Dropped::OutOfWindow));
    let window = messages(1, &[100, 100]);
    let data = repair_of(&window, 3);
    let room = 50;
    let result = decoder.receive(incoming(&window, 3, &data), NOTHING_HELD, room);
    assert_eq!(result, Err(Dropped::NoRoom));
    assert!(decoder.bytes() <= room);
    // Known messages are kept only within the room given.
    decoder.learn(1, &window[0].1, 10);
    assert_eq!(decoder.bytes(), 0);
}

/// Goal: a hole is filled from a message held behind it by the channel (not by the decoder),
/// and the shortfall counts holes less equations. Method: message 1 of 0..3 lost, 2 held.
#[test]
fn held_messages_take_part_and_the_shortfall_counts_holes() {
    let window = messages(0, &[10, 20, 30]);
    let mut decoder = Decoder { active: true, ..Decoder::default() };
    decoder.learn(0, &window[0].1, usize::MAX);
    decoder.rebase(1);
    let held_two = |seq: u16| (seq == 2).then_some(window[2].1.as_slice());
    // Messages 1 and 3 are missing (3 is known of through a repair's window below).
    let wider = messages(0, &[10, 20, 30, 5]);
    let data = repair_of(&wider[1..], 4);
    let repair = incoming(&wider[1..], 4, &data);
    let solved = decoder.receive(repair, held_two, usize::MAX).expect("kept");
    assert!(solved.is_empty(), "two unknowns, one equation");
    assert_eq!(decoder.shortfall(1, |seq| seq == 2), 1);
    let data = repair_of(&wider[1..], 5);
    let solved = decoder.receive(incoming(&wider[1..], 5, &data), held_two, usize::MAX);
    assert_eq!(solved, Ok(vec![(1, wider[1].1.clone()), (3, wider[3].1.clone())]));
    // Delivered up to 3: nothing missing.
    assert_eq!(decoder.shortfall(4, |_| false), 0);
}

/// Goal: the encoder owes a repair `interval` after a new message while repairing, more on a
/// shortfall its recent repairs do not cover, and none past the byte budget.
#[test]
fn the_encoder_owes_repairs_by_rate_shortfall_and_budget() {
    let mut encoder = Encoder::default();
    let ms = Instant::from_millis;
    let interval = Duration::from_millis(2);
    encoder.on_fresh(ms(10), 400, (0.0, interval));
    assert_eq!(encoder.due_at, None, "no repairs at rate zero");
    encoder.on_fresh(ms(20), 400, (1.0, interval));
    assert!(!encoder.is_due(ms(21)));
    encoder.tick(ms(22));
    assert!(encoder.is_due(ms(22)));
    encoder.on_sent(ms(22), 406);
    assert!(!encoder.is_due(ms(22)));
    // A shortfall of 3 reported by a packet sent before the repair at 22 ms: 3 owed; one sent
    // after the report left: 2.
    encoder.on_shortfall(3, ms(23));
    assert_eq!(encoder.owed, 3);
    let mut encoder = Encoder::default();
    encoder.on_sent(ms(22), 406);
    encoder.on_shortfall(3, ms(21));
    assert_eq!(encoder.owed, 2);
    assert!(encoder.within_budget(BUDGET_SLACK as usize / 2));
    assert!(!encoder.within_budget(BUDGET_SLACK as usize));
}

/// Random bytes as long as a true repair of `window`: garbage that passes the length checks.
fn garbage(window: &[(u16, Vec<u8>)], state: &mut u64) -> Vec<u8> {
    let len = repair_of(window, 0).len();
    (0..len)
        .map(|_| {
            *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (*state >> 33) as u8
        })
        .collect()
}

/// A decoder that holds `window` but for the messages at `holes`.
fn holding_all_but(window: &[(u16, Vec<u8>)], holes: &[usize]) -> Decoder {
    let mut decoder = Decoder { base: window[0].0, active: true, ..Decoder::default() };
    for (i, (seq, payload)) in window.iter().enumerate() {
        if !holes.contains(&i) {
            decoder.learn(*seq, payload, usize::MAX);
        }
    }
    decoder
}

/// Goal: a garbage repair the decoder already holds does not cost the true repairs after it:
/// as many true repairs as holes still decode every hole (before, the first true repair
/// exposed the garbage and every equation went with it, the true one too, so the holes
/// waited for one more repair, or for resends when none came). Method: holes 2 and 4 of six
/// messages, a garbage repair over the window, then two true repairs.
#[test]
fn a_true_repair_survives_the_garbage_before_it() {
    let window = messages(40, &[60; 6]);
    let mut decoder = holding_all_but(&window, &[2, 4]);
    let junk = garbage(&window, &mut 7);
    assert_eq!(decoder.receive(incoming(&window, 99, &junk), NOTHING_HELD, usize::MAX), Ok(vec![]));
    let first = repair_of(&window, 1);
    let result = decoder.receive(incoming(&window, 1, &first), NOTHING_HELD, usize::MAX);
    assert_eq!(result, Err(Dropped::Inconsistent), "the garbage is found out");
    let second = repair_of(&window, 2);
    let solved = decoder.receive(incoming(&window, 2, &second), NOTHING_HELD, usize::MAX);
    let want = vec![window[2].clone(), window[4].clone()];
    assert_eq!(
        solved.map(|mut s| {
            s.sort();
            s
        }),
        Ok(want)
    );
    assert_eq!(decoder.take_failures(), 1);
    assert!(decoder.rows.is_empty() && decoder.equations.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Goal: with one garbage repair anywhere among the true ones, the decoder never delivers
    /// a wrong message and still decodes every hole from true repairs alone, within twice as
    /// many as holes and one more (each wrong combination it finds costs at most one true
    /// equation). Method: random holes among eight messages, the garbage at a random place.
    #[test]
    fn one_garbage_repair_delays_decoding_by_little(
        hole_mask in 1u8..=255,
        at in 0usize..12,
        noise: u64,
    ) {
        let window = messages(7, &[80; 8]);
        let holes: Vec<usize> = (0..8).filter(|i| hole_mask & (1 << i) != 0).collect();
        let mut decoder = holding_all_but(&window, &holes);
        let mut got = std::collections::BTreeMap::new();
        let mut state = noise;
        for k in 0..=2 * holes.len() + 1 {
            if k == at {
                let junk = garbage(&window, &mut state);
                let junk = incoming(&window, 500, &junk);
                let delivered = decoder.receive(junk, NOTHING_HELD, usize::MAX);
                got.extend(delivered.unwrap_or_default());
            }
            let data = repair_of(&window, k as u16);
            let delivered =
                decoder.receive(incoming(&window, k as u16, &data), NOTHING_HELD, usize::MAX);
            got.extend(delivered.unwrap_or_default());
        }
        for (seq, payload) in &got {
            prop_assert_eq!(payload, &window[usize::from(seq - 7)].1);
        }
        prop_assert_eq!(got.len(), holes.len());
    }
}

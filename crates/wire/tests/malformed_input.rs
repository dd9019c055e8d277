//! Goal: bad bytes get a typed error naming the field, never a panic and never an allocation past
//! `entities_max`. Method: random bytes, every truncation and single-bit flip of valid snapshots,
//! and hand-built datagrams that break one bound each.

mod common;

use proptest::prelude::*;
use rally_wire::bits::BitWriter;
use rally_wire::debug::inspect_snapshot;
use rally_wire::snapshot::{FORMAT_DELTA_RECORDS, FORMAT_FULL};
use rally_wire::{DecodeError, Field, MessageCodec, MessageError, Snapshot, SnapshotConfig};

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let config = common::config();
        let baseline = rally_wire::reference::snapshots(&config, 3, 0).0;
        let mut out = Snapshot::default();
        let _ = config.decode(&bytes, Some(&baseline), &mut out);
        prop_assert!(out.len() <= config.entities_max);
        let _ = inspect_snapshot(&config, &bytes);
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic(
        tick in any::<u32>(), count in any::<u16>(), delta in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let config = common::config();
        let baseline = rally_wire::reference::snapshots(&config, 3, tick.wrapping_sub(1)).0;
        let bytes = header(delta, tick, tick.wrapping_sub(1), count, &body);
        let mut out = Snapshot::default();
        let _ = config.decode(&bytes, Some(&baseline), &mut out);
        prop_assert!(out.len() <= config.entities_max);
    }

    #[test]
    fn flipped_bits_are_an_error_or_a_valid_snapshot(bit in 0usize..8 * 700) {
        let config = common::config();
        let (baseline, current) = rally_wire::reference::snapshots(&config, 4, 10);
        let mut buf = vec![0u8; 8192];
        let len = config.encode_delta_records(&baseline, &current, &mut buf).unwrap();
        buf[(bit / 8) % len] ^= 1 << (bit % 8);
        let mut out = Snapshot::default();
        if config.decode(&buf[..len], Some(&baseline), &mut out).is_ok() {
            // Whatever decoded is a well-formed snapshot: sorted and within the limit.
            prop_assert!(out.entities().windows(2).all(|w| w[0].id < w[1].id));
        } else {
            prop_assert!(out.is_empty());
        }
    }
}

/// A datagram with a valid header followed by `body`.
fn header(delta: bool, tick: u32, baseline: u32, count: u16, body: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 16 + body.len()];
    let mut w = BitWriter::new(&mut buf);
    w.write(u64::from(if delta { FORMAT_DELTA_RECORDS } else { FORMAT_FULL }), 8);
    w.write(u64::from(tick), 32);
    if delta {
        w.write(u64::from(baseline), 32);
    }
    w.write(u64::from(count), 16);
    for &b in body {
        w.write(u64::from(b), 8);
    }
    let len = w.finish().unwrap();
    buf.truncate(len);
    buf
}

#[test]
fn every_truncation_names_the_field_it_cut() {
    let config = common::config();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 2, 50);
    let mut buf = vec![0u8; 8192];
    for delta in [false, true] {
        let len = if delta {
            config.encode_delta_records(&baseline, &current, &mut buf).unwrap()
        } else {
            config.encode_full(&current, &mut buf).unwrap()
        };
        let mut out = Snapshot::default();
        for cut in 0..len {
            let result = config.decode(&buf[..cut], Some(&baseline), &mut out);
            assert!(
                matches!(result, Err(DecodeError::Truncated { .. })),
                "cut at {cut}: {result:?}"
            );
            assert!(out.is_empty());
        }
    }
}

#[test]
fn counts_above_entities_max_are_refused_before_allocating() {
    let config = SnapshotConfig { entities_max: 100, ..common::config() };
    let bytes = header(false, 1, 0, 101, &[0; 64]);
    let mut out = Snapshot::default();
    let err = config.decode(&bytes, None, &mut out).unwrap_err();
    assert_eq!(err, DecodeError::OutOfBounds { field: Field::EntityCount, value: 101, max: 100 });
    assert_eq!(out.entities().len(), 0);
}

#[test]
fn deltas_cannot_grow_past_entities_max() {
    // A delta that spawns more entities than the limit, against a full baseline.
    let big = common::config();
    let small = SnapshotConfig { entities_max: 256, ..big };
    let (baseline, _) = rally_wire::reference::snapshots(&big, 2, 50);
    let mut grown = Snapshot::new(51);
    for e in baseline.entities() {
        grown.push(*e).unwrap();
    }
    grown.push(rally_wire::QuantizedEntity { id: 9999, ..Default::default() }).unwrap();
    let mut buf = vec![0u8; 8192];
    let len = big.encode_delta_records(&baseline, &grown, &mut buf).unwrap();
    let mut out = Snapshot::default();
    let err = small.decode(&buf[..len], Some(&baseline), &mut out).unwrap_err();
    assert!(matches!(err, DecodeError::OutOfBounds { field: Field::EntityCount, .. }), "{err}");
}

#[test]
fn out_of_range_codes_name_their_field() {
    let config = common::config();
    let steps = config.position.steps();
    // One entity at rest with an x code one past the box (columns: flags, position, rotation,
    // id gap "0").
    let [bx, by, bz] = config.position.bits();
    let mut buf = [0u8; 32];
    let mut w = BitWriter::new(&mut buf);
    w.write(u64::from(FORMAT_FULL), 8);
    w.write(7, 32);
    w.write(1, 16);
    w.write(0, 2);
    w.write(u64::from(steps[0]) + 1, bx);
    w.write(0, by + bz);
    w.write(0, 2 + 3 * config.rotation.bits());
    w.write(0, 1);
    let len = w.finish().unwrap();
    let mut out = Snapshot::default();
    let err = config.decode(&buf[..len], None, &mut out).unwrap_err();
    let want = u64::from(steps[0]) + 1;
    assert_eq!(
        err,
        DecodeError::OutOfBounds { field: Field::Position, value: want, max: want - 1 }
    );
    assert!(err.to_string().contains("position"), "{err}");
}

#[test]
fn unknown_formats_and_trailing_bytes_are_refused() {
    let config = common::config();
    let mut out = Snapshot::default();
    assert_eq!(config.decode(&[0x7F; 8], None, &mut out), Err(DecodeError::UnknownFormat(0x7F)));
    let mut bytes = header(false, 1, 0, 0, &[]);
    bytes.push(0);
    assert_eq!(config.decode(&bytes, None, &mut out), Err(DecodeError::TrailingBytes { count: 1 }));
}

#[test]
fn a_delta_needs_its_own_baseline() {
    let config = common::config();
    let (baseline, current) = rally_wire::reference::snapshots(&config, 2, 50);
    let mut buf = vec![0u8; 8192];
    let len = config.encode_delta_records(&baseline, &current, &mut buf).unwrap();
    let mut out = Snapshot::default();
    let missing = config.decode(&buf[..len], None, &mut out);
    assert_eq!(missing, Err(DecodeError::BaselineMismatch { wanted: 50, given: None }));
    // A baseline of the right tick but the wrong contents is a conflict, not silent corruption.
    let empty = Snapshot::new(50);
    let conflict = config.decode(&buf[..len], Some(&empty), &mut out);
    assert!(matches!(conflict, Err(DecodeError::BaselineConflict { .. })), "{conflict:?}");
}

#[test]
fn garbage_and_oversized_messages_are_errors() {
    let codec = MessageCodec { message_bytes_max: 64 };
    let garbage = [0xFFu8; 40];
    assert!(codec.decode::<Vec<String>>(&garbage).is_err());
    assert!(codec.decode::<(u8, String)>(&[]).is_err());
    let big = vec![0u8; 65];
    assert!(matches!(
        codec.decode::<Vec<u8>>(&big),
        Err(MessageError::TooLarge { len: 65, max: 64 })
    ));
    assert!(matches!(codec.encode(&"x".repeat(100)), Err(MessageError::TooLarge { .. })));
    assert!(codec.from_json::<Vec<u8>>("[1, 2,").is_err());
}

#[test]
fn short_output_buffers_are_an_error() {
    let config = common::config();
    let (_, current) = rally_wire::reference::snapshots(&config, 2, 50);
    let mut small = [0u8; 100];
    let err = config.encode_full(&current, &mut small).unwrap_err();
    assert!(matches!(err, rally_wire::EncodeError::BufferTooSmall { capacity: 100, .. }), "{err}");
}

/// A delta with one update record for entity 0 changing one field (`field`: 0 position, 1
/// rotation, 2 linear velocity) by +1 or -1 on its first component, against `baseline`.
fn one_step_delta(baseline: &Snapshot, field: u32, down: bool) -> Vec<u8> {
    let mut buf = [0u8; 32];
    let mut w = BitWriter::new(&mut buf);
    w.write(u64::from(FORMAT_DELTA_RECORDS), 8);
    w.write(u64::from(baseline.tick() + 1), 32);
    w.write(u64::from(baseline.tick()), 32);
    w.write(1, 16);
    // Id gap 0 ("0"), kind update ("0"), the field's width, then its three deltas: zigzag 1
    // (-1) needs one bit each, zigzag 2 (+1) two.
    w.write(0, 2);
    let width = if down { 1 } else { 2 };
    w.write(width << (4 * field), 16);
    w.write(if down { 1 } else { 2 }, 3 * width as u32);
    let len = w.finish().unwrap();
    buf[..len].to_vec()
}

#[test]
fn deltas_that_leave_a_range_name_the_field_and_bound() {
    let config = common::config();
    let (h, steps) = (config.linear_velocity.half(), config.position.steps());
    let rotation_max = (1u64 << config.rotation.bits()) - 1;
    let mut baseline = Snapshot::new(40);
    let mut entity = rally_wire::QuantizedEntity { id: 0, ..Default::default() };
    entity.rotation.components = [rotation_max as u16, 0, 0];
    entity.linear_velocity = [h, 0, 0];
    baseline.push(entity).unwrap();
    let mut out = Snapshot::default();
    let cases = [
        // Below the box's corner: -1 wraps to the largest value.
        (0, true, Field::Position, u64::MAX, u64::from(steps[0])),
        (1, false, Field::Rotation, rotation_max + 1, rotation_max),
        // Velocities are checked as `code + half` against `2 * half`.
        (2, false, Field::LinearVelocity, 2 * h as u64 + 1, 2 * h as u64),
    ];
    for (field, down, name, value, max) in cases {
        let bytes = one_step_delta(&baseline, field, down);
        let err = config.decode(&bytes, Some(&baseline), &mut out).unwrap_err();
        assert_eq!(err, DecodeError::OutOfBounds { field: name, value, max }, "field {field}");
        assert!(out.is_empty(), "a refused delta leaves no partial output");
        // The same step in the other direction is in range and applies.
        let fine = one_step_delta(&baseline, field, !down);
        config.decode(&fine, Some(&baseline), &mut out).unwrap();
        assert_ne!(out.entities()[0], entity, "field {field}");
    }
    // A record cut short is a truncation, not an out-of-range value.
    let bytes = one_step_delta(&baseline, 2, true);
    let cut = config.decode(&bytes[..bytes.len() - 1], Some(&baseline), &mut out);
    assert!(matches!(cut, Err(DecodeError::Truncated { .. })), "{cut:?}");
}

#[test]
fn consecutive_ids_past_the_largest_are_refused() {
    let config = common::config();
    // Three entities at rest whose ids would be u32::MAX - 1, u32::MAX and one more: the first
    // gap in the widest tier ("111" then 32 bits), then two gaps of 0 ("0" each).
    let [bx, by, bz] = config.position.bits();
    let mut buf = [0u8; 64];
    let mut w = BitWriter::new(&mut buf);
    w.write(u64::from(FORMAT_FULL), 8);
    w.write(7, 32);
    w.write(3, 16);
    w.write(0, 6);
    for _ in 0..3 {
        w.write(0, bx + by + bz);
    }
    for _ in 0..3 {
        w.write(0, 2 + 3 * config.rotation.bits());
    }
    w.write(0b111 | u64::from(u32::MAX - 1) << 3, 35);
    w.write(0, 2);
    let len = w.finish().unwrap();
    let mut out = Snapshot::default();
    let err = config.decode(&buf[..len], None, &mut out).unwrap_err();
    let (value, max) = (u64::from(u32::MAX) + 1, u64::from(u32::MAX));
    assert_eq!(err, DecodeError::OutOfBounds { field: Field::EntityId, value, max });
    assert!(out.is_empty());
}

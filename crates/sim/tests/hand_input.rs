//! Goal: the sandbox's fixed-offset input read ([`HandInput::decode`]) takes and refuses
//! exactly the bytes the engine's default read (postcard through serde) does, and returns the
//! same input and the same bytes after it. Method: a game that keeps the default read, fed
//! arbitrary bytes, short slices and inputs of arbitrary bit patterns (NaNs included), compared
//! bit for bit.

use proptest::prelude::*;
use rally_engine::{ClientId, Simulation, World};
use rally_sim::sandbox::{HandInput, Sandbox};
use std::time::Duration;

/// A game with the engine's default input read.
struct Serde;

impl Simulation for Serde {
    type Input = HandInput;
    type Message = ();
    fn apply_input(&mut self, _world: &mut World, _client: ClientId, _input: &HandInput) {}
    fn step(&mut self, _world: &mut World, _dt: Duration) {}
}

/// An input's fields as bits: a NaN equals itself here.
fn bits(input: &HandInput) -> [u32; 7] {
    let [a, b, c] = input.position;
    let [d, e, f, g] = input.rotation;
    [a, b, c, d, e, f, g].map(f32::to_bits)
}

/// Both reads of `bytes`, as bits and the length left.
fn both(bytes: &[u8]) -> [Option<([u32; 7], usize)>; 2] {
    let fixed = HandInput::decode(bytes).map(|(input, rest)| (bits(&input), rest.len()));
    let serde = Serde::decode_input(bytes).map(|(input, rest)| (bits(&input), rest.len()));
    [fixed, serde]
}

#[test]
fn short_slices_are_refused_by_both() {
    let bytes = [0x5Au8; HandInput::BYTES];
    for len in 0..HandInput::BYTES {
        assert_eq!(both(&bytes[..len]), [None, None], "{len} bytes");
    }
    assert_eq!(Sandbox::decode_input(&bytes).map(|(_, rest)| rest.len()), Some(0));
}

proptest! {
    #[test]
    fn arbitrary_bytes_read_alike(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let [fixed, serde] = both(&bytes);
        prop_assert_eq!(fixed, serde);
    }

    #[test]
    fn any_input_reads_back_bit_for_bit(words in any::<[u32; 7]>(), tail in any::<[u8; 5]>()) {
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.extend_from_slice(&tail);
        let [fixed, serde] = both(&bytes);
        prop_assert_eq!(fixed, Some((words, tail.len())));
        prop_assert_eq!(serde, fixed);
    }
}

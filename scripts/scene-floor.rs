//! The scene CPU target's floor: the least code that does what the sandbox scene's room must do
//! each tick beyond what the W3 reference room must, counted by callgrind
//! (scripts/scene-floor.sh). Not the engine's code: the smallest correct form of each job, so
//! that its count bounds every design that has to do that job.
//!
//! `scene-floor KERNEL` runs one kernel `ROUNDS` times over a batch and prints how many items
//! (updates, entities or inputs) it handled; the script divides the kernel's instructions by
//! that. Kernels:
//! - `forward`: write one update of an already-quantized pose (a client's, forwarded) into the
//!   shared delta: an id gap byte and the code's bytes, no re-quantizing.
//! - `bitmap`: the same in a column form: a presence bit per row, the codes packed in order
//!   (no id gap to write, no branch).
//! - `quantize`: quantize one body from floats (position, smallest-three rotation, two
//!   velocities) into the code `forward` writes.
//! - `quantize-simd`: `quantize` in SSE2 vector instructions (x86-64's baseline), the same
//!   codes: four lanes at a time, the casts' range checks done by a clamp and a saturating pack.
//! - `pose-input`: read one pose from an input's fixed offsets, check it, store it and mark the
//!   row touched (the reference room's input).
//! - `xr-input`: the same for three poses, with two hands' velocities (sent by the client, as
//!   XR runtimes give them: checked, not measured) and grip and trigger (the scene's input).
//! - `pose-code`, `xr-code`: the two inputs again, carrying the parts' codes as the snapshot
//!   has them (quantized by the client): positions checked against the box, codes stored.

use std::hint::black_box;

const ROUNDS: usize = 10_000;
/// Bytes of a quantized pose and velocities: 3 position words, the rotation's packed word, 6
/// velocity half-words, padded (an encoder copies it with two vector moves).
const CODE: usize = 32;
/// A pose on the wire: position and rotation as 7 little-endian f32.
const POSE: usize = 28;
/// The XR input: 3 poses, 2 hands' linear and angular velocities (12 f32), 4 bytes of grip
/// and trigger.
const XR: usize = 3 * POSE + 12 * 4 + 4;
/// Positions outside this box, in metres from the origin, are refused.
const REACH: f32 = 1000.0;
/// The largest position code: the box's width in millimetres.
const BOX: u32 = 2_000_000;
/// Velocity components beyond this (m/s, rad/s) are refused.
const SPEED: f32 = 100.0;

#[derive(Clone, Copy, Default)]
struct Row {
    position: [f32; 3],
    rotation: [f32; 4],
    linear: [f32; 3],
    angular: [f32; 3],
}

fn main() {
    let kernel = std::env::args().nth(1).unwrap_or_default();
    let items = match kernel.as_str() {
        "forward" => run_forward(),
        "bitmap" => run_bitmap(),
        "quantize" => run_quantize(),
        "quantize-simd" => run_quantize_simd(),
        "pose-input" => run_inputs(POSE, 1),
        "xr-input" => run_inputs(XR, 3),
        "pose-code" => run_code_inputs::<1>(),
        "xr-code" => run_code_inputs::<3>(),
        _ => {
            eprintln!(
                "usage: scene-floor forward|bitmap|quantize|quantize-simd|pose-input|xr-input|\
                 pose-code|xr-code"
            );
            std::process::exit(2);
        }
    };
    println!("{items}");
}

fn run_forward() -> usize {
    let rows: Vec<(u32, [u8; CODE])> = (0..30).map(|k| (k * 3 + 1, [k as u8; CODE])).collect();
    let mut out = vec![0u8; rows.len() * (CODE + 5)];
    for _ in 0..ROUNDS {
        black_box(encode_forwarded(black_box(&mut out), black_box(&rows)));
    }
    ROUNDS * rows.len()
}

/// Writes each row's id gap (one byte below 128, else a marker and the full id) and code.
#[inline(never)]
fn encode_forwarded(out: &mut [u8], rows: &[(u32, [u8; CODE])]) -> usize {
    let (mut at, mut last) = (0, 0u32);
    for (id, code) in rows {
        let gap = id.wrapping_sub(last);
        last = *id;
        let Some(slot) = out.get_mut(at..at + 5 + CODE) else { return at };
        if gap < 128 {
            slot[0] = gap as u8;
            at += 1;
        } else {
            slot[0] = 0x80;
            slot[1..5].copy_from_slice(&id.to_le_bytes());
            at += 5;
        }
        out[at..at + CODE].copy_from_slice(code);
        at += CODE;
    }
    at
}

fn run_bitmap() -> usize {
    let rows: Vec<(u32, [u8; CODE])> = (0..30).map(|k| (k * 3 + 1, [k as u8; CODE])).collect();
    let mut codes = vec![[0u8; CODE]; rows.len()];
    let mut present = [0u64; 4];
    for _ in 0..ROUNDS {
        present = [0; 4];
        encode_bitmap(black_box(&mut codes), &mut present, black_box(&rows));
        black_box(&codes);
    }
    black_box(present);
    ROUNDS * rows.len()
}

/// The column form: a bit for each row that changed, the changed rows' codes packed in order.
#[inline(never)]
fn encode_bitmap(codes: &mut [[u8; CODE]], present: &mut [u64; 4], rows: &[(u32, [u8; CODE])]) {
    for ((id, code), out) in rows.iter().zip(codes.iter_mut()) {
        present[(*id as usize >> 6) & 3] |= 1 << (id & 63);
        *out = *code;
    }
}

fn run_quantize() -> usize {
    let rows = sample_rows();
    let mut out = vec![[0u8; CODE]; rows.len()];
    for _ in 0..ROUNDS {
        quantize(black_box(&rows), black_box(&mut out));
    }
    ROUNDS * rows.len()
}

fn run_quantize_simd() -> usize {
    let mut rows = sample_rows();
    // Also the edges: beyond the ranges, negative, a largest component negative, ties.
    rows.push(Row {
        position: [-5000.0, 5000.0, 0.0],
        rotation: [-0.5, 0.5, -0.5, 0.5],
        linear: [1e9, -1e9, 0.0],
        angular: [-200.0, 200.0, 0.003],
    });
    rows.push(Row { rotation: [0.0, 0.0, -1.0, 0.0], ..rows[3] });
    let (mut want, mut out) = (vec![[0u8; CODE]; rows.len()], vec![[0u8; CODE]; rows.len()]);
    quantize(&rows, &mut want);
    quantize_simd(&rows, &mut out);
    assert!(want == out, "the vector quantizer gives the scalar one's codes");
    for _ in 0..ROUNDS {
        quantize_simd(black_box(&rows), black_box(&mut out));
    }
    ROUNDS * rows.len()
}

fn sample_rows() -> Vec<Row> {
    (0..10)
        .map(|k| {
            let a = k as f32 * 0.3;
            Row {
                position: [a, 1.0, -a],
                rotation: [0.0, a.sin() * 0.5, 0.0, (1.0 - a.sin() * a.sin() * 0.25).sqrt()],
                linear: [a, -a, 0.5],
                angular: [0.1, a, -a],
            }
        })
        .collect()
}

/// Millimetre positions from the box's corner, smallest-three rotation in 3 x 10 bits and the
/// largest's index, velocities in signed 16-bit steps (saturating, as `as` casts do), written
/// as the eight words `forward` copies.
#[inline(never)]
fn quantize(rows: &[Row], out: &mut [[u8; CODE]]) {
    for (row, code) in rows.iter().zip(out.iter_mut()) {
        let p = row.position.map(|c| ((c + REACH) * 1000.0) as u32);
        let v: [f32; 6] =
            std::array::from_fn(|k| if k < 3 { row.linear[k] } else { row.angular[k - 3] });
        let v = v.map(|c| (c * 300.0) as i16 as u16 as u32);
        let words = [
            p[0],
            p[1],
            p[2],
            smallest_three(row.rotation),
            v[0] | v[1] << 16,
            v[2] | v[3] << 16,
            v[4] | v[5] << 16,
            0,
        ];
        for (bytes, word) in code.chunks_exact_mut(4).zip(words) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
    }
}

/// `quantize` in SSE2: positions and velocities four lanes at a time, clamped where the casts
/// saturate; the rotation's largest component by a vector maximum and a mask.
#[inline(never)]
fn quantize_simd(rows: &[Row], out: &mut [[u8; CODE]]) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64's baseline; loads and stores are unaligned forms on
    // arrays of the right length.
    unsafe {
        let (zero, reach, milli) = (_mm_setzero_ps(), _mm_set1_ps(REACH), _mm_set1_ps(1000.0));
        // Codes below 2^31, where the signed cast is the unsigned one (the box is 2^21 wide).
        let top = _mm_set1_ps(2_147_483_520.0);
        let (speed, vmax) = (_mm_set1_ps(300.0), _mm_set1_ps(40000.0));
        let abs = _mm_castsi128_ps(_mm_set1_epi32(0x7fff_ffff));
        let (root2, one, half) =
            (_mm_set1_ps(std::f32::consts::SQRT_2), _mm_set1_ps(1.0), _mm_set1_ps(511.5));
        for (row, code) in rows.iter().zip(out.iter_mut()) {
            let p = _mm_set_ps(0.0, row.position[2], row.position[1], row.position[0]);
            let p = _mm_min_ps(_mm_max_ps(_mm_mul_ps(_mm_add_ps(p, reach), milli), zero), top);
            let p = _mm_cvttps_epi32(p);
            let v0 = _mm_set_ps(row.angular[0], row.linear[2], row.linear[1], row.linear[0]);
            let v1 = _mm_set_ps(0.0, 0.0, row.angular[2], row.angular[1]);
            let clamp =
                |v| _mm_min_ps(_mm_max_ps(_mm_mul_ps(v, speed), _mm_sub_ps(zero, vmax)), vmax);
            let v = _mm_packs_epi32(_mm_cvttps_epi32(clamp(v0)), _mm_cvttps_epi32(clamp(v1)));
            let q = _mm_loadu_ps(row.rotation.as_ptr());
            let a = _mm_and_ps(q, abs);
            let m = _mm_max_ps(a, _mm_shuffle_ps::<0b1011_0001>(a, a));
            let m = _mm_max_ps(m, _mm_shuffle_ps::<0b0100_1110>(m, m));
            let largest =
                (_mm_movemask_ps(_mm_cmpeq_ps(a, m)) as u32).trailing_zeros() as usize & 3;
            let sign = if row.rotation[largest] < 0.0 { -1.0 } else { 1.0 };
            let c = _mm_mul_ps(q, _mm_set1_ps(sign));
            let c = _mm_max_ps(_mm_mul_ps(_mm_add_ps(_mm_mul_ps(c, root2), one), half), zero);
            let mut steps = [0u32; 4];
            _mm_storeu_si128(steps.as_mut_ptr().cast(), _mm_cvttps_epi32(c));
            let pick = |slot: usize| steps[slot + usize::from(slot >= largest)] & 0x3ff;
            let rotation = (largest as u32) << 30 | pick(0) << 20 | pick(1) << 10 | pick(2);
            let mut words = [0u32; 8];
            _mm_storeu_si128(words.as_mut_ptr().cast(), p);
            words[3] = rotation;
            _mm_storeu_si128(words.as_mut_ptr().add(4).cast(), v);
            *code = std::mem::transmute::<[u32; 8], [u8; CODE]>(words);
        }
    }
}

/// The rotation's three smallest components (sign of the largest made positive) and its index.
#[inline(always)]
fn smallest_three(q: [f32; 4]) -> u32 {
    let mut largest = 0;
    for k in 1..4 {
        if q[k].abs() > q[largest].abs() {
            largest = k;
        }
    }
    let sign = if q[largest] < 0.0 { -1.0 } else { 1.0 };
    let mut packed = largest as u32;
    for (_, c) in q.iter().enumerate().filter(|(k, _)| *k != largest) {
        let step = ((c * sign * std::f32::consts::SQRT_2 + 1.0) * 511.5) as u32;
        packed = packed << 10 | (step & 0x3ff);
    }
    packed
}

fn run_inputs(len: usize, poses: usize) -> usize {
    let inputs: Vec<Vec<u8>> = (0..10).map(|k| sample_input(len, k)).collect();
    let mut rows = vec![Row::default(); 10 * poses];
    let mut touched = Vec::with_capacity(rows.len());
    for _ in 0..ROUNDS {
        touched.clear();
        let refused = if poses == 1 {
            apply_pose_inputs(black_box(&inputs), &mut rows, &mut touched)
        } else {
            apply_xr_inputs(black_box(&inputs), &mut rows, &mut touched)
        };
        assert_eq!(refused, 0, "the sample inputs are valid");
        black_box((&rows, &touched));
    }
    ROUNDS * inputs.len()
}

fn run_code_inputs<const PARTS: usize>() -> usize {
    let parts = PARTS;
    // Each part's code: three position words in the box, then rotation and velocity words.
    let code = |k: usize| (0..8u32).flat_map(move |w| (1_000_000 + w * 7 + k as u32).to_le_bytes());
    let inputs: Vec<Vec<u8>> =
        (0..10).map(|k| (0..parts).flat_map(|p| code(k * 3 + p)).collect()).collect();
    let mut codes = vec![[0u8; CODE]; 10 * parts];
    let mut touched = Vec::with_capacity(codes.len());
    for _ in 0..ROUNDS {
        touched.clear();
        let refused = apply_code_inputs::<PARTS>(black_box(&inputs), &mut codes, &mut touched);
        assert_eq!(refused, 0, "the sample inputs are valid");
        black_box((refused, &codes, &touched));
    }
    ROUNDS * inputs.len()
}

/// Inputs that carry their parts' codes (quantized by the client, as the snapshot has them):
/// each position word checked against the box, the code stored for `forward` to copy.
#[inline(never)]
fn apply_code_inputs<const PARTS: usize>(
    inputs: &[Vec<u8>],
    codes: &mut [[u8; CODE]],
    touched: &mut Vec<u32>,
) -> usize {
    let mut refused = 0;
    for (k, (input, rows)) in inputs.iter().zip(codes.chunks_exact_mut(PARTS)).enumerate() {
        let Some(bytes) = input.get(..PARTS * CODE) else {
            refused += 1;
            continue;
        };
        let ok = bytes.chunks_exact(CODE).all(|code| (0..3).all(|i| word_at(code, i) <= BOX));
        if !ok {
            refused += 1;
            continue;
        }
        for (row, code) in rows.iter_mut().zip(bytes.chunks_exact(CODE)) {
            row.copy_from_slice(code);
        }
        touched.extend((0..PARTS as u32).map(|p| (k * PARTS) as u32 + p));
    }
    refused
}

#[inline(always)]
fn word_at(bytes: &[u8], i: usize) -> u32 {
    let word = bytes.get(i * 4..i * 4 + 4).and_then(|b| b.try_into().ok());
    u32::from_le_bytes(word.unwrap_or([0xff; 4]))
}

/// An input of `len` bytes: poses near the origin, unit rotations, slow velocities.
fn sample_input(len: usize, k: usize) -> Vec<u8> {
    let mut floats: Vec<f32> = Vec::new();
    for pose in 0..3 {
        let a = (k * 3 + pose) as f32 * 0.1;
        floats.extend([a, 1.5, -a, 0.0, a.sin(), 0.0, a.cos()]);
    }
    floats.extend((0..12).map(|v| v as f32 * 0.25 - 1.0));
    let mut bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
    bytes.resize(len, 1);
    bytes
}

/// The reference room's input: one pose, into row `k`. Returns how many were refused.
#[inline(never)]
fn apply_pose_inputs(inputs: &[Vec<u8>], rows: &mut [Row], touched: &mut Vec<u32>) -> usize {
    let mut refused = 0;
    for (k, (input, row)) in inputs.iter().zip(rows.iter_mut()).enumerate() {
        let Some(bytes) = input.get(..POSE) else {
            refused += 1;
            continue;
        };
        if !read_pose(bytes, row) {
            refused += 1;
            continue;
        }
        touched.push(k as u32);
    }
    refused
}

/// The scene's input: head and hands into rows `3k..3k + 3`, the hands' velocities checked and
/// stored, grip and trigger kept. Returns how many were refused.
#[inline(never)]
fn apply_xr_inputs(inputs: &[Vec<u8>], rows: &mut [Row], touched: &mut Vec<u32>) -> usize {
    let mut refused = 0;
    for (k, (input, avatar)) in inputs.iter().zip(rows.chunks_exact_mut(3)).enumerate() {
        let Some(bytes) = input.get(..XR) else {
            refused += 1;
            continue;
        };
        let (poses, rest) = bytes.split_at(3 * POSE);
        let mut ok = true;
        for (pose, row) in poses.chunks_exact(POSE).zip(avatar.iter_mut()) {
            ok &= read_pose(pose, row);
        }
        for (hand, speeds) in avatar[1..].iter_mut().zip(rest.chunks_exact(24)) {
            let v: [f32; 6] = std::array::from_fn(|i| f32_at(speeds, i));
            ok &= v.iter().all(|c| c.abs() <= SPEED);
            hand.linear = [v[0], v[1], v[2]];
            hand.angular = [v[3], v[4], v[5]];
        }
        // Grip and trigger: bytes, any value valid (a press is a threshold on them).
        ok &= rest.get(48..52).is_some();
        if !ok {
            refused += 1;
            continue;
        }
        touched.extend_from_slice(&[3 * k as u32, 3 * k as u32 + 1, 3 * k as u32 + 2]);
    }
    refused
}

/// Reads a pose into `row` if its position is in reach and its rotation near unit length.
#[inline(always)]
fn read_pose(bytes: &[u8], row: &mut Row) -> bool {
    let f: [f32; 7] = std::array::from_fn(|i| f32_at(bytes, i));
    let in_reach = f[..3].iter().all(|c| c.abs() <= REACH);
    let norm = f[3] * f[3] + f[4] * f[4] + f[5] * f[5] + f[6] * f[6];
    // NaN fails both comparisons.
    if !(in_reach && (0.98..=1.02).contains(&norm)) {
        return false;
    }
    row.position = [f[0], f[1], f[2]];
    row.rotation = [f[3], f[4], f[5], f[6]];
    true
}

#[inline(always)]
fn f32_at(bytes: &[u8], i: usize) -> f32 {
    let word = bytes.get(i * 4..i * 4 + 4).and_then(|b| b.try_into().ok());
    f32::from_le_bytes(word.unwrap_or([0xff; 4]))
}

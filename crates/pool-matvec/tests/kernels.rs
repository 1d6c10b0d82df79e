//! Kernels: bit-exact against the naive loop, deterministic across thread
//! counts, and loud about wrong shapes.

use pool_core::Pool;
use pool_matvec::decode::XorShift;
use pool_matvec::*;
use testkit::watched;

#[cfg(not(miri))]
const ROWS: &[usize] = &[0, 1, 3, 4, 7, 255, 256, 259, 1024];
#[cfg(not(miri))]
const COLS: &[usize] = &[0, 1, 3, 32, 65, 384];
// Miri interprets every multiply: a subset that keeps every code path.
#[cfg(miri)]
const ROWS: &[usize] = &[0, 1, 3, 4, 7, 9];
#[cfg(miri)]
const COLS: &[usize] = &[0, 1, 3, 32, 33];
const SENTINEL: f32 = -12345.5;

/// Values spanning 1e-3..1e3 in magnitude, both signs.
fn spread(n: usize, seed: u64) -> Vec<f32> {
    if cfg!(miri) {
        // `powf` per value is what makes this slow under Miri; any values
        // do for finding undefined behaviour.
        return (0..n as u64)
            .map(|i| ((i * 2_654_435_761 + seed) % 2001) as f32 * 0.5 - 500.0)
            .collect();
    }
    let mut rng = XorShift(seed);
    (0..n)
        .map(|_| {
            let exponent = rng.uniform() * 3.0; // 10^-3 .. 10^3
            let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
            sign * 10f32.powf(exponent)
        })
        .collect()
}

fn pools() -> Vec<Option<Pool>> {
    let mut pools = vec![None];
    let max_workers = if cfg!(miri) { 2 } else { 4 };
    pools.extend((1..=max_workers).map(|w| Some(Pool::with_spin(w, 500))));
    pools
}

/// `out` with sentinels after it, to catch writes past the end.
fn with_sentinels(rows: usize) -> Vec<f32> {
    vec![SENTINEL; rows + 3]
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn matvec_rows_is_bit_identical_to_the_naive_loop_for_every_shape_and_pool() {
    watched("exact", |stage| {
        let pools = pools();
        for &rows in ROWS {
            for &cols in COLS {
                let w = spread(rows * cols, 1 + rows as u64 * 7 + cols as u64);
                let x = spread(cols, 99 + cols as u64);
                let mut expected = vec![0.0; rows];
                matvec_naive(&w, &x, &mut expected);
                for pool in &pools {
                    let workers = pool.as_ref().map_or(0, Pool::n_workers);
                    stage.set(format!("{rows}x{cols} on {workers} workers"));
                    let mut out = with_sentinels(rows);
                    matvec_rows(pool.as_ref(), &w, &x, &mut out[..rows]);
                    assert_eq!(
                        bits(&out[..rows]),
                        bits(&expected),
                        "{rows}x{cols}, {workers} workers"
                    );
                    assert!(out[rows..].iter().all(|&v| v == SENTINEL), "wrote past out");
                }
            }
        }
    });
}

#[test]
fn matvec_rows_above_the_gate_is_bit_identical_on_every_pool() {
    watched("exact_big", |_| {
        // Miri: the smallest shape above the gate, so the parallel path runs.
        let (rows, cols) = if cfg!(miri) { (128, 128) } else { (600, 1000) };
        assert!(should_parallelize(rows, cols));
        let w = spread(rows * cols, 5);
        let x = spread(cols, 6);
        let mut expected = vec![0.0; rows];
        matvec_naive(&w, &x, &mut expected);
        let pools = if cfg!(miri) {
            vec![Some(Pool::with_spin(1, 500))]
        } else {
            pools()
        };
        for pool in pools {
            let mut out = vec![0.0; rows];
            matvec_rows(pool.as_ref(), &w, &x, &mut out);
            assert_eq!(bits(&out), bits(&expected));
        }
    });
}

#[test]
fn out_may_be_a_prefix_of_the_weights_rows() {
    let w = spread(10 * 8, 3);
    let x = spread(8, 4);
    let mut all = vec![0.0; 10];
    matvec_rows(None, &w, &x, &mut all);
    let mut prefix = with_sentinels(4);
    matvec_rows(None, &w, &x, &mut prefix[..4]);
    assert_eq!(bits(&prefix[..4]), bits(&all[..4]));
    assert!(prefix[4..].iter().all(|&v| v == SENTINEL));
}

#[test]
fn matvec_rows2_matches_matvec_rows_on_each_input() {
    watched("rows2", |_| {
        for pool in pools() {
            let shapes: &[(usize, usize)] = if cfg!(miri) {
                &[(0, 4), (1, 1), (3, 65)]
            } else {
                &[(0, 4), (1, 1), (3, 65), (259, 384), (700, 400)]
            };
            for &(rows, cols) in shapes {
                let w = spread(rows * cols, 11);
                let (x1, x2) = (spread(cols, 12), spread(cols, 13));
                let (mut e1, mut e2) = (vec![0.0; rows], vec![0.0; rows]);
                matvec_rows(None, &w, &x1, &mut e1);
                matvec_rows(None, &w, &x2, &mut e2);
                let (mut o1, mut o2) = (with_sentinels(rows), with_sentinels(rows));
                matvec_rows2(
                    pool.as_ref(),
                    &w,
                    &x1,
                    &x2,
                    &mut o1[..rows],
                    &mut o2[..rows],
                );
                assert_eq!(bits(&o1[..rows]), bits(&e1));
                assert_eq!(bits(&o2[..rows]), bits(&e2));
                assert!(o1[rows..].iter().chain(&o2[rows..]).all(|&v| v == SENTINEL));
            }
        }
    });
}

#[test]
fn the_fast_kernel_is_identical_across_thread_counts_and_to_its_portable_path() {
    watched("fast", |_| {
        let pools = pools();
        // Miri: the small shapes only (the big ones took it over ten
        // minutes). Above the gate the kernel runs through run_rows and
        // DisjointRows, which Miri checks at that size in the test above.
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(1, 1), (7, 31), (33, 32)]
        } else {
            &[
                (1, 1),
                (7, 31),
                (33, 32),
                (259, 384),
                (700, 1000),
                (64, 4099),
            ]
        };
        for &(rows, cols) in shapes {
            let w = spread(rows * cols, 21);
            let x = spread(cols, 22);
            let portable: Vec<f32> = (0..rows)
                .map(|r| dot_fast_portable(&w[r * cols..(r + 1) * cols], &x))
                .collect();
            for pool in &pools {
                let mut out = with_sentinels(rows);
                matvec_f32_fast(pool.as_ref(), &w, &x, &mut out[..rows]);
                assert_eq!(bits(&out[..rows]), bits(&portable), "{rows}x{cols}");
                assert!(out[rows..].iter().all(|&v| v == SENTINEL));
            }
        }
    });
}

#[test]
fn every_simd_tier_this_cpu_has_gives_the_portable_bits() {
    let tiers = SimdTier::available();
    assert_eq!(tiers[0], SimdTier::Portable);
    assert!(
        tiers.contains(&simd_tier()),
        "{:?} in {tiers:?}",
        simd_tier()
    );
    // One block, a block and a tail, tails alone, many blocks.
    let lengths: &[usize] = if cfg!(miri) {
        &[0, 5, 32, 33]
    } else {
        &[0, 1, 5, 31, 32, 33, 64, 95, 288, 768, 2048, 4099]
    };
    for &cols in lengths {
        let (w, x) = (spread(2 * cols, 31 + cols as u64), spread(cols, 32));
        let (w0, w1) = w.split_at(cols);
        let expected = [
            dot_fast_portable(w0, &x).to_bits(),
            dot_fast_portable(w1, &x).to_bits(),
        ];
        for &tier in &tiers {
            let got = [w0, w1].map(|row| dot_fast_on(tier, row, &x).unwrap().to_bits());
            assert_eq!(got, expected, "{tier} at {cols} columns");
        }
        // The matvec pairs rows (the two-row kernels; on AVX2 rows of at
        // most 512 values go one at a time): a 2-row matrix.
        let mut out = [0.0f32; 2];
        matvec_f32_fast(None, &w, &x, &mut out);
        assert_eq!(
            out.map(f32::to_bits),
            expected,
            "{} (the tier in use) at {cols}",
            simd_tier()
        );
    }
    let unavailable = [SimdTier::Neon, SimdTier::Avx2, SimdTier::Avx512]
        .into_iter()
        .find(|t| !t.is_available());
    if let Some(tier) = unavailable {
        assert_eq!(dot_fast_on(tier, &[1.0], &[1.0]), None, "{tier}");
    }
}

#[test]
fn many_rows_a_stride_apart_give_each_rows_portable_bits_on_every_tier() {
    // Attention's shape (a head of 64 against keys a row of 768 apart),
    // and lengths with tails.
    let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
        &[(33, 40, 3)]
    } else {
        &[
            (64, 768, 37),
            (48, 48, 5),
            (33, 40, 9),
            (5, 5, 4),
            (0, 1, 2),
        ]
    };
    for &(len, stride, rows) in shapes {
        let values = spread((rows - 1) * stride + len, 91 + len as u64);
        let x = spread(len, 92);
        let expected: Vec<u32> = (0..rows)
            .map(|t| dot_fast_portable(&values[t * stride..][..len], &x).to_bits())
            .collect();
        for tier in SimdTier::available() {
            let mut out = vec![0.0f32; rows];
            dot_fast_rows_on(tier, &x, &values, stride, &mut out).expect("available");
            let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, expected, "{tier} at {len}/{stride}/{rows}");
        }
    }
}

#[test]
#[should_panic(expected = "need more than")]
fn many_rows_past_the_values_are_refused() {
    dot_fast_rows(&[1.0; 4], &[0.0; 7], 4, &mut [0.0; 2]);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a million interpreted multiplies; no unsafe code of its own"
)]
fn the_fast_kernel_differs_from_plain_order_by_rounding_only() {
    let (rows, cols) = (256, 4096);
    let mut rng = XorShift(77);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.uniform()).collect();
    let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
    let (mut exact, mut fast) = (vec![0.0; rows], vec![0.0; rows]);
    matvec_rows(None, &w, &x, &mut exact);
    matvec_f32_fast(None, &w, &x, &mut fast);
    let scale: f32 = (0..cols).map(|j| x[j].abs()).sum();
    for (e, f) in exact.iter().zip(&fast) {
        // Relative to the sum of |w x| (bounded by `scale`): far below 1e-5.
        assert!((e - f).abs() / scale < 1e-5, "{e} vs {f}");
    }
}

#[test]
fn q8_0_quantization_follows_the_llama_cpp_reference() {
    let mut x = vec![0.0f32; 64];
    x[0] = 2.54;
    x[1] = -1.27;
    x[2] = 0.005; // rounds to 0
    x[3] = 0.015; // 0.75 -> 1, half away from zero territory
    let blocks = quantize_q8_0(&x);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[0].d.to_f32(),
        half::f16::from_f32(2.54 / 127.0).to_f32()
    );
    assert_eq!(&blocks[0].qs[..4], &[127, -64, 0, 1]);
    assert_eq!(blocks[1].d.to_f32(), 0.0);
    assert_eq!(blocks[1].qs, [0; 32]);
    assert_eq!(std::mem::size_of::<BlockQ8_0>(), 34, "GGUF block layout");
    let back = dequantize_q8_0(&blocks);
    assert!((back[0] - 2.54).abs() < 0.01);
}

/// The fixed float order written out independently of the crate: lane
/// `b % 8` accumulates the whole groups of eight blocks, the lanes are
/// reduced `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`, then the
/// tail blocks are added in order.
fn eight_lane_order(terms: &[f32]) -> f32 {
    let body = terms.len() / 8 * 8;
    let mut a = [0.0f32; 8];
    for (b, t) in terms[..body].iter().enumerate() {
        a[b % 8] += t;
    }
    let mut r = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    for t in &terms[body..] {
        r += t;
    }
    r
}

/// The scalar reference written out in full: integer dot per block, its
/// term `sumi * (d_w * d_x)`, the terms in the eight-lane order.
fn q8_0_reference(w: &[BlockQ8_0], x: &[f32], rows: usize) -> Vec<f32> {
    let xq = quantize_q8_0(x);
    let per_row = x.len() / 32;
    (0..rows)
        .map(|r| {
            let terms: Vec<f32> = (0..per_row)
                .map(|b| {
                    let (bw, bx) = (&w[r * per_row + b], &xq[b]);
                    let sumi: i32 = (0..32).map(|j| bw.qs[j] as i32 * bx.qs[j] as i32).sum();
                    sumi as f32 * (bw.d.to_f32() * bx.d.to_f32())
                })
                .collect();
            eight_lane_order(&terms)
        })
        .collect()
}

/// The same for Q4_0, nibbles unpacked by hand.
fn q4_0_reference(w: &[BlockQ4_0], x: &[f32], rows: usize) -> Vec<f32> {
    let xq = quantize_q8_0(x);
    let per_row = x.len() / 32;
    (0..rows)
        .map(|r| {
            let terms: Vec<f32> = (0..per_row)
                .map(|b| {
                    let (bw, bx) = (&w[r * per_row + b], &xq[b]);
                    let sumi: i32 = (0..32)
                        .map(|j| {
                            let nibble = if j < 16 {
                                bw.qs[j] & 15
                            } else {
                                bw.qs[j - 16] >> 4
                            };
                            (nibble as i32 - 8) * bx.qs[j] as i32
                        })
                        .sum();
                    sumi as f32 * (bw.d.to_f32() * bx.d.to_f32())
                })
                .collect();
            eight_lane_order(&terms)
        })
        .collect()
}

#[test]
fn q4_0_quantization_follows_the_ggml_reference() {
    let mut x = vec![0.0f32; 64];
    x[0] = -2.0; // the largest magnitude, negative: d = -2 / -8 = 0.25
    x[1] = 1.0; // 1 / 0.25 + 8.5 = 12.5 -> 12 -> value 4
    x[17] = 1.99; // 7.96 + 8.5 = 16.46 -> clamped to 15 -> value 7
    x[32] = 3.0; // block 2: d = 3 / -8 = -0.375; 3 -> -8 + 8.5 = 0.5 -> 0 -> -8
    let blocks = quantize_q4_0(&x);
    assert_eq!(std::mem::size_of::<BlockQ4_0>(), 18, "ggml block layout");
    assert_eq!(blocks[0].d.to_f32(), 0.25);
    assert_eq!(blocks[0].value(0), -8, "-2 / 0.25 + 8.5 = 0.5 -> 0 -> -8");
    assert_eq!(blocks[0].value(1), 4);
    assert_eq!(blocks[0].value(17), 7);
    assert_eq!(blocks[0].value(2), 0, "zero stays 0 (nibble 8)");
    assert_eq!(blocks[0].qs[1] & 15, 12, "weight 1 in byte 1's low nibble");
    assert_eq!(
        blocks[0].qs[1] >> 4,
        15,
        "weight 17 in byte 1's high nibble"
    );
    assert_eq!(blocks[1].d.to_f32(), -0.375);
    assert_eq!(blocks[1].value(0), -8);
    let back = dequantize_q4_0(&blocks);
    assert_eq!(back[0], -2.0);
    assert_eq!(back[1], 1.0);
    assert_eq!(back[32], 3.0);
}

#[test]
fn q4_0_matvec_matches_the_scalar_reference_on_every_pool() {
    watched("q4_0", |_| {
        let pools = pools();
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(0, 32), (1, 32), (3, 288)]
        } else {
            &[
                (0, 32),
                (1, 32),
                (5, 64),
                (3, 288),
                (259, 384),
                (1024, 512),
                (40, 8224),
            ]
        };
        for &(rows, cols) in shapes {
            let w = quantize_q4_0(&spread(rows * cols, 33));
            let x = spread(cols, 34);
            let expected = q4_0_reference(&w, &x, rows);
            for pool in &pools {
                let mut out = with_sentinels(rows);
                matvec_q4_0(pool.as_ref(), &w, &x, &mut out[..rows]);
                assert_eq!(bits(&out[..rows]), bits(&expected), "{rows}x{cols}");
                assert!(out[rows..].iter().all(|&v| v == SENTINEL));
            }
        }
    });
}

#[test]
fn q4_0_simd_and_scalar_dots_agree_even_on_extreme_blocks() {
    let mut rng = XorShift(43);
    for case in 0..if cfg!(miri) { 6 } else { 300 } {
        let blocks = 1 + case % 19;
        let w: Vec<BlockQ4_0> = (0..blocks)
            .map(|_| BlockQ4_0 {
                d: half::f16::from_f32(rng.uniform()),
                qs: std::array::from_fn(|_| match rng.next_u64() % 4 {
                    0 => 0x00,
                    1 => 0xFF,
                    _ => rng.next_u64() as u8,
                }),
            })
            .collect();
        let x: Vec<BlockQ8_0> = (0..blocks)
            .map(|_| BlockQ8_0 {
                d: half::f16::from_f32(rng.uniform()),
                qs: std::array::from_fn(|_| match rng.next_u64() % 5 {
                    0 => i8::MIN,
                    1 => i8::MAX,
                    2 => -i8::MAX,
                    _ => rng.next_u64() as i8,
                }),
            })
            .collect();
        assert_eq!(
            dot_q4_0(&w, &x).to_bits(),
            dot_q4_0_scalar(&w, &x).to_bits(),
            "case {case}"
        );
        // Without -128 in x: the SIMD path itself (the check routes -128 to
        // the scalar path).
        let clean: Vec<BlockQ8_0> = x
            .iter()
            .map(|b| BlockQ8_0 {
                d: b.d,
                qs: b.qs.map(|q| q.max(-127)),
            })
            .collect();
        assert_eq!(
            dot_q4_0(&w, &clean).to_bits(),
            dot_q4_0_scalar(&w, &clean).to_bits(),
            "case {case}, no -128"
        );
        for tier in SimdTier::available() {
            for x in [&x, &clean] {
                assert_eq!(
                    dot_q4_0_on(tier, &w, x).unwrap().to_bits(),
                    dot_q4_0_scalar(&w, x).to_bits(),
                    "case {case} on {tier} ({})",
                    quantized_kernel_name(tier)
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "matvec_q4_0: weights hold 1 blocks but out has 2 rows of 32 columns")]
fn q4_0_short_weights_panic_naming_the_shapes() {
    let w = quantize_q4_0(&[0.0; 32]);
    matvec_q4_0(None, &w, &[0.0; 32], &mut [0.0; 2]);
}

#[test]
fn q8_0_matvec_matches_the_scalar_reference_on_every_pool() {
    watched("q8_0", |_| {
        let pools = pools();
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(0, 32), (1, 32), (5, 64)]
        } else {
            &[(0, 32), (1, 32), (5, 64), (259, 384), (1024, 512)]
        };
        for &(rows, cols) in shapes {
            let w = quantize_q8_0(&spread(rows * cols, 31));
            let x = spread(cols, 32);
            let expected = q8_0_reference(&w, &x, rows);
            for pool in &pools {
                let mut out = with_sentinels(rows);
                matvec_q8_0(pool.as_ref(), &w, &x, &mut out[..rows]);
                assert_eq!(bits(&out[..rows]), bits(&expected), "{rows}x{cols}");
                assert!(out[rows..].iter().all(|&v| v == SENTINEL));
            }
        }
    });
}

#[test]
fn q8_0_simd_and_scalar_dots_agree_even_on_extreme_blocks() {
    let mut rng = XorShift(41);
    for case in 0..if cfg!(miri) { 6 } else { 300 } {
        let blocks = 1 + case % 19;
        let make = |rng: &mut XorShift| -> Vec<BlockQ8_0> {
            (0..blocks)
                .map(|_| BlockQ8_0 {
                    d: half::f16::from_f32(rng.uniform()),
                    qs: std::array::from_fn(|_| match rng.next_u64() % 4 {
                        0 => i8::MIN,
                        1 => i8::MAX,
                        _ => rng.next_u64() as i8,
                    }),
                })
                .collect()
        };
        let (w, x) = (make(&mut rng), make(&mut rng));
        assert_eq!(
            dot_q8_0(&w, &x).to_bits(),
            dot_q8_0_scalar(&w, &x).to_bits(),
            "case {case}"
        );
        // Without -128 in x (as the quantizer makes it): the SIMD path
        // itself, with -128 still in w.
        let clean: Vec<BlockQ8_0> = x
            .iter()
            .map(|b| BlockQ8_0 {
                d: b.d,
                qs: b.qs.map(|q| q.max(-127)),
            })
            .collect();
        assert_eq!(
            dot_q8_0(&w, &clean).to_bits(),
            dot_q8_0_scalar(&w, &clean).to_bits(),
            "case {case}, no -128 in x"
        );
        for tier in SimdTier::available() {
            for x in [&x, &clean] {
                assert_eq!(
                    dot_q8_0_on(tier, &w, x).unwrap().to_bits(),
                    dot_q8_0_scalar(&w, x).to_bits(),
                    "case {case} on {tier} ({})",
                    quantized_kernel_name(tier)
                );
            }
        }
        // Two rows through the matvec, which reads short rows in pairs
        // where the tier has a pair kernel: -128 in x must still take the
        // exact path.
        let w2 = make(&mut rng);
        let both: Vec<BlockQ8_0> = w.iter().chain(&w2).copied().collect();
        for x in [&x, &clean] {
            let mut out = [0.0f32; 2];
            matvec_q8_0_prepared(Serial, &both, x, &mut out);
            assert_eq!(
                bits(&out),
                bits(&[dot_q8_0_scalar(&w, x), dot_q8_0_scalar(&w2, x)]),
                "case {case}, two rows"
            );
        }
    }
}

#[test]
#[should_panic(
    expected = "matvec_rows: weights hold 11 values but out has 3 rows and x has 4 columns"
)]
fn short_weights_panic_naming_the_shapes() {
    matvec_rows(None, &[0.0; 11], &[0.0; 4], &mut [0.0; 3]);
}

#[test]
#[should_panic(expected = "x1 has 4 values and x2 3")]
fn mismatched_second_inputs_panic_naming_the_lengths() {
    matvec_rows2(
        None,
        &[0.0; 16],
        &[0.0; 4],
        &[0.0; 3],
        &mut [0.0; 4],
        &mut [0.0; 4],
    );
}

#[test]
#[should_panic(expected = "row length 33 is not a multiple of the block size 32")]
fn q8_0_rows_must_be_whole_blocks() {
    matvec_q8_0(None, &[], &[0.0; 33], &mut [0.0; 1]);
}

#[test]
#[should_panic(expected = "weights hold 1 blocks but out has 2 rows of 32 columns")]
fn q8_0_short_weights_panic_naming_the_shapes() {
    let w = quantize_q8_0(&[0.0; 32]);
    matvec_q8_0(None, &w, &[0.0; 32], &mut [0.0; 2]);
}

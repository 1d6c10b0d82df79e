//! The decoder on llama2.c checkpoints: the tokens of a plain scalar
//! reference decoder on every executor and thread count, and clear errors
//! for bad files.

use pool_core::Pool;
use pool_llama::{write_random_checkpoint, Config, LoadError, Model as Llama2, Residence, BOS};
use pool_matvec::Serial;
use testkit::watched;

/// A shape with grouped-query attention and every size odd enough to
/// leave tails in the kernels (dim 48: one 32-lane block and 16 more).
fn small(shared_classifier: bool) -> Config {
    Config {
        dim: 48,
        hidden_dim: 72,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        vocab_size: 97,
        seq_len: 12,
        shared_classifier,
    }
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("pool-llama2-{}-{name}.bin", std::process::id()))
}

fn checkpoint_bytes(config: &Config, seed: u64) -> Vec<u8> {
    let path = temp_path(&format!("bytes-{seed}"));
    write_random_checkpoint(&path, config, seed).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    bytes
}

/// llama2.c's `forward`, written out with plain loops over the file's
/// values: no SIMD, no pool, no shared code with the decoder.
struct Reference {
    c: Config,
    v: Vec<f32>,
}

impl Reference {
    fn new(bytes: &[u8]) -> Reference {
        let h: Vec<i32> = (0..7)
            .map(|i| i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()))
            .collect();
        let c = Config {
            dim: h[0] as usize,
            hidden_dim: h[1] as usize,
            n_layers: h[2] as usize,
            n_heads: h[3] as usize,
            n_kv_heads: h[4] as usize,
            vocab_size: h[5].unsigned_abs() as usize,
            seq_len: h[6] as usize,
            shared_classifier: h[5] > 0,
        };
        let v = bytes[28..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        Reference { c, v }
    }

    fn matvec(w: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
        (0..rows)
            .map(|r| (0..x.len()).map(|j| w[r * x.len() + j] * x[j]).sum())
            .collect()
    }

    fn rms(x: &[f32], w: &[f32]) -> Vec<f32> {
        let ss: f32 = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32 + 1e-5;
        x.iter().zip(w).map(|(x, w)| w * (x / ss.sqrt())).collect()
    }

    /// The greedy tokens and each step's logits.
    fn generate(&self, steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
        let c = self.c;
        let (d, hd, l, hs) = (c.dim, c.hidden_dim, c.n_layers, c.dim / c.n_heads);
        let kv = c.n_kv_heads * hs;
        let mut off = 0;
        let mut take = |n: usize| {
            let r = off..off + n;
            off += n;
            r
        };
        let emb = take(c.vocab_size * d);
        let rms_att = take(l * d);
        let wq = take(l * d * d);
        let wk = take(l * kv * d);
        let wv = take(l * kv * d);
        let wo = take(l * d * d);
        let rms_ffn = take(l * d);
        let w1 = take(l * hd * d);
        let w2 = take(l * d * hd);
        let w3 = take(l * hd * d);
        let rms_final = take(d);
        take(c.seq_len * hs);
        let cls = if c.shared_classifier {
            emb.clone()
        } else {
            take(c.vocab_size * d)
        };
        let v = &self.v;
        let part =
            |r: &std::ops::Range<usize>, layer: usize, n: usize| &v[r.start + layer * n..][..n];
        let mut kcache = vec![vec![vec![0f32; kv]; c.seq_len]; l];
        let mut vcache = kcache.clone();
        let mut token = BOS as usize;
        let (mut out, mut all_logits) = (Vec::new(), Vec::new());
        for pos in 0..steps {
            let mut x = v[emb.start + token * d..][..d].to_vec();
            for layer in 0..l {
                let xb = Self::rms(&x, part(&rms_att, layer, d));
                let mut q = Self::matvec(part(&wq, layer, d * d), &xb, d);
                let mut k = Self::matvec(part(&wk, layer, kv * d), &xb, kv);
                let val = Self::matvec(part(&wv, layer, kv * d), &xb, kv);
                for i in (0..d).step_by(2) {
                    let freq = 1.0 / 10000f32.powf((i % hs) as f32 / hs as f32);
                    let (fci, fcr) = (pos as f32 * freq).sin_cos();
                    let targets: &mut [&mut Vec<f32>] = if i < kv {
                        &mut [&mut q, &mut k]
                    } else {
                        &mut [&mut q]
                    };
                    for vec in targets.iter_mut() {
                        let (a, b) = (vec[i], vec[i + 1]);
                        vec[i] = a * fcr - b * fci;
                        vec[i + 1] = a * fci + b * fcr;
                    }
                }
                kcache[layer][pos] = k;
                vcache[layer][pos] = val;
                let mut att_out = vec![0f32; d];
                for h in 0..c.n_heads {
                    let kvh = h / (c.n_heads / c.n_kv_heads);
                    let mut att: Vec<f32> = (0..=pos)
                        .map(|t| {
                            (0..hs)
                                .map(|i| q[h * hs + i] * kcache[layer][t][kvh * hs + i])
                                .sum::<f32>()
                                / (hs as f32).sqrt()
                        })
                        .collect();
                    let max = att.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    att.iter_mut().for_each(|a| *a = (*a - max).exp());
                    let sum: f32 = att.iter().sum();
                    att.iter_mut().for_each(|a| *a /= sum);
                    for (t, a) in att.iter().enumerate() {
                        for i in 0..hs {
                            att_out[h * hs + i] += a * vcache[layer][t][kvh * hs + i];
                        }
                    }
                }
                let o = Self::matvec(part(&wo, layer, d * d), &att_out, d);
                x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
                let xb = Self::rms(&x, part(&rms_ffn, layer, d));
                let g = Self::matvec(part(&w1, layer, hd * d), &xb, hd);
                let u = Self::matvec(part(&w3, layer, hd * d), &xb, hd);
                let hgu: Vec<f32> = g
                    .iter()
                    .zip(&u)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let down = Self::matvec(part(&w2, layer, d * hd), &hgu, d);
                x.iter_mut().zip(&down).for_each(|(x, o)| *x += o);
            }
            let xn = Self::rms(&x, &v[rms_final.clone()]);
            let logits = Self::matvec(&v[cls.clone()], &xn, c.vocab_size);
            let mut best = 0;
            for (i, v) in logits.iter().enumerate() {
                if *v > logits[best] {
                    best = i;
                }
            }
            out.push(best as u32);
            all_logits.push(logits);
            token = best;
        }
        (out, all_logits)
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a file mapping and a few thousand interpreted dot products; from_bytes runs under Miri below"
)]
fn decoded_tokens_equal_the_scalar_reference_on_every_thread_count() {
    watched("llama2_tokens", |stage| {
        for shared in [true, false] {
            let config = small(shared);
            let path = temp_path(&format!("tokens-{shared}"));
            write_random_checkpoint(&path, &config, 11).unwrap();
            let (expected, logits) =
                Reference::new(&std::fs::read(&path).unwrap()).generate(config.seq_len);
            // SAFETY: this test's own temp file; nothing changes it while
            // the model lives.
            let model = unsafe { Llama2::open_mapped(&path) }.unwrap();
            assert_eq!(model.config(), &config);
            assert!(model.mapped_file().is_some(), "read in place");
            // Each step's logits agree to rounding (the kernel's lane order
            // differs from the reference's plain order).
            let mut state = model.new_state(config.seq_len);
            let mut token = BOS;
            for (pos, want) in logits.iter().enumerate() {
                let got = model.forward(&Serial, &mut state, token, pos);
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-4 * scale,
                        "pos {pos} logit {i}: {g} vs {w}"
                    );
                }
                token = expected[pos];
            }
            let serial = model.generate(&Serial, config.seq_len, |_, _| {});
            assert_eq!(serial, expected, "serial, shared classifier: {shared}");
            for workers in 1..=3 {
                stage.set(format!("shared {shared}, {workers} workers"));
                let pool = Pool::with_spin(workers, 1000);
                let mut seen = Vec::new();
                let tokens = model.generate(&pool, config.seq_len, |pos, t| seen.push((pos, t)));
                assert_eq!(tokens, expected, "{workers} workers");
                assert_eq!(seen, tokens.iter().copied().enumerate().collect::<Vec<_>>());
            }
            drop(model);
            stage.set(format!("shared {shared}, huge-page copy"));
            let copied = Llama2::open(&path).unwrap();
            assert_eq!(copied.residence(), Residence::HugePageCopy);
            assert!(copied.mapped_file().is_none());
            let pool = Pool::with_spin(1, 1000);
            assert_eq!(copied.generate(&pool, config.seq_len, |_, _| {}), expected);
            drop(copied);
            std::fs::remove_file(&path).unwrap();
        }
    });
}

#[test]
fn logits_are_bit_identical_for_every_executor() {
    watched("llama2_logits", |_| {
        let mut config = small(true);
        if cfg!(miri) {
            (config.n_layers, config.vocab_size, config.seq_len) = (1, 5, 2);
        }
        let model = Llama2::from_bytes(&checkpoint_bytes(&config, 3)).unwrap();
        let run = |exec: &dyn pool_matvec::RowParallel| {
            let mut state = model.new_state(config.seq_len);
            let mut bits = Vec::new();
            for (pos, token) in [BOS, 2, 3].into_iter().take(config.seq_len).enumerate() {
                bits.extend(
                    model
                        .forward(exec, &mut state, token, pos)
                        .iter()
                        .map(|v| v.to_bits()),
                );
            }
            bits
        };
        let serial = run(&Serial);
        let widths: &[usize] = if cfg!(miri) { &[1] } else { &[1, 2] };
        for &workers in widths {
            assert_eq!(
                run(&Pool::with_spin(workers, 1000)),
                serial,
                "{workers} workers"
            );
        }
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "writes and reads files; the parsing is plain safe code"
)]
fn bad_checkpoints_are_clear_errors() {
    let config = small(true);
    let good = checkpoint_bytes(&config, 5);
    let with_header = |edit: &dyn Fn(&mut [i32; 7])| {
        let mut header = config.header().unwrap();
        edit(&mut header);
        let mut bytes = good.clone();
        for (i, v) in header.iter().enumerate() {
            bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        bytes
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "truncated"),
        ("half a header", good[..13].to_vec(), "truncated"),
        (
            "a truncated tensor",
            good[..good.len() - 4].to_vec(),
            "truncated",
        ),
        (
            "a trailing byte",
            [good.as_slice(), &[0]].concat(),
            "the file has",
        ),
        ("dim 0", with_header(&|h| h[0] = 0), "dim is 0"),
        (
            "negative layers",
            with_header(&|h| h[2] = -2),
            "n_layers is -2",
        ),
        (
            "heads not dividing dim",
            with_header(&|h| h[3] = 5),
            "not a multiple",
        ),
        (
            "kv heads not dividing heads",
            with_header(&|h| h[4] = 3),
            "not a multiple",
        ),
        (
            "an odd head size",
            with_header(&|h| (h[0], h[3], h[4]) = (45, 3, 3)),
            "odd",
        ),
        ("vocab 0", with_header(&|h| h[5] = 0), "vocab_size"),
        (
            "huge sizes",
            with_header(&|h| (h[0], h[1], h[2]) = (i32::MAX - 1, i32::MAX, i32::MAX)),
            "",
        ),
        (
            "the other classifier mode",
            with_header(&|h| h[5] = -h[5]),
            "implies",
        ),
    ];
    for (what, bytes, says) in cases {
        let err = Llama2::from_bytes(&bytes).expect_err(what);
        assert!(err.to_string().contains(says), "{what}: {err}");
        let path = temp_path("bad");
        std::fs::write(&path, &bytes).unwrap();
        let err = Llama2::open(&path).expect_err(what);
        assert!(err.to_string().contains(says), "{what} (mapped): {err}");
        std::fs::remove_file(&path).unwrap();
    }
    let missing = Llama2::open(temp_path("does-not-exist")).unwrap_err();
    assert!(matches!(missing, LoadError::Io(_)), "{missing}");
}

#[test]
fn a_leading_nan_never_wins_the_argmax() {
    use pool_llama::argmax;
    assert_eq!(argmax(&[f32::NAN, -5.0, -2.0]), 2);
    assert_eq!(argmax(&[f32::NAN, 4.0, f32::NAN, 4.0]), 1);
    assert_eq!(argmax(&[f32::NAN; 4]), 0);
    assert_eq!(argmax(&[]), 0);
}

#[test]
fn the_parallel_argmax_is_the_serial_one() {
    watched("argmax", |_| {
        use pool_llama::{argmax, argmax_on};
        let pool = Pool::with_spin(2, 1000);
        let n = if cfg!(miri) { 70 } else { 5000 };
        let mut rng = pool_matvec::XorShift(9);
        let mut cases: Vec<Vec<f32>> = vec![
            vec![],
            vec![f32::NAN; 3],
            vec![-0.0, 0.0, -0.0],
            vec![-1.0, -3.0, f32::NAN, -1.0],
            vec![2.0; n],
        ];
        let mut ties = vec![0.5f32; n];
        ties[n / 3] = 7.0;
        ties[2 * n / 3] = 7.0;
        cases.push(ties);
        // A NaN in front of every range (and at the very start).
        let mut nans = vec![1.0f32; n];
        for i in (0..n).step_by(7) {
            nans[i] = f32::NAN;
        }
        nans[n / 2] = 9.0;
        cases.push(nans);
        cases.push(vec![f32::NAN, -5.0, -2.0]);
        cases.push((0..n).map(|_| rng.uniform()).collect());
        for logits in &cases {
            let serial = argmax(logits);
            assert_eq!(
                argmax_on(&Serial, logits),
                serial,
                "{:?}",
                &logits[..logits.len().min(5)]
            );
            assert_eq!(
                argmax_on(&pool, logits),
                serial,
                "{:?}",
                &logits[..logits.len().min(5)]
            );
        }
    });
}

#[test]
#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(miri, ignore = "reads a file into a huge-page mapping")]
fn a_model_opened_safely_survives_its_file_being_truncated_and_rewritten() {
    watched("llama2_truncated", |_| {
        let config = small(true);
        let path = temp_path("truncated-under-model");
        write_random_checkpoint(&path, &config, 5).unwrap();
        let model = Llama2::open(&path).unwrap();
        let before = model.generate(&Serial, 4, |_, _| {});
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        std::fs::write(&path, vec![0xffu8; 4096]).unwrap();
        // No SIGBUS, and the same tokens: the model holds its own copy.
        assert_eq!(model.generate(&Serial, 4, |_, _| {}), before);
        std::fs::remove_file(&path).unwrap();
    });
}

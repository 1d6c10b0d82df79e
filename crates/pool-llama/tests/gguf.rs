//! GGUF models: every supported tensor type, mixes as llama-quantize
//! writes them (Q4_K_M, Q4_0 with a Q6_K output), tied and untied outputs,
//! decoded to the tokens of an independent reference on every executor,
//! with bit-identical logits; and every kind of bad file an error that
//! names the problem, never a panic.

mod common;

use common::{reference_generate, temp_path, Spec, TestModel};
use pool_core::Pool;
use pool_llama::{FileFormat, LoadError, Model};
use pool_matvec::{RowParallel, Serial, WeightType};
use testkit::gguf::Meta;
use testkit::watched;

const STEPS: usize = 6;

/// The specs decoded: each type alone, and the mixes real files hold.
fn specs() -> Vec<(&'static str, Spec)> {
    use WeightType::*;
    let mut out = vec![
        ("F32", Spec::all(F32)),
        ("F16", Spec::all(F16)),
        ("Q8_0", Spec::all(Q8_0)),
        ("Q4_0", Spec::all(Q4_0)),
        ("Q4_K", Spec::all(Q4_K)),
        ("Q6_K", Spec::all(Q6_K)),
    ];
    // llama-quantize's Q4_0: Q6_K output, tied nothing.
    let mut q4_0 = Spec::all(Q4_0);
    q4_0.output = Some(Q6_K);
    out.push(("Q4_0 + Q6_K output", q4_0));
    // Q4_K_M: Q4_K, with Q6_K for the down projection and the output.
    let mut q4_k_m = Spec::all(Q4_K);
    q4_k_m.down = Q6_K;
    q4_k_m.output = Some(Q6_K);
    out.push(("Q4_K_M", q4_k_m));
    // Tied output (no output.weight), F16 norms, partial RoPE, another base.
    let mut tied = Spec::all(Q8_0);
    tied.output = None;
    tied.norms = F16;
    tied.rope_dims = Some(32);
    tied.rope_base = 500000.0;
    out.push(("Q8_0 tied, F16 norms, partial rope", tied));
    let mut tied_k = Spec::all(Q6_K);
    tied_k.output = None;
    tied_k.embedding = Q4_K;
    out.push(("Q6_K with a tied Q4_K embedding", tied_k));
    out
}

fn logits_bits(model: &Model, exec: &dyn RowParallel, tokens: &[u32]) -> Vec<u32> {
    let mut state = model.new_state(tokens.len() + 1);
    let mut bits = Vec::new();
    let mut token = model.bos();
    for (pos, &next) in tokens.iter().enumerate() {
        bits.extend(
            model
                .forward(exec, &mut state, token, pos)
                .iter()
                .map(|v| v.to_bits()),
        );
        token = next;
    }
    bits
}

#[test]
#[cfg_attr(
    miri,
    ignore = "decodes a dozen models; the reader is fuzzed under Miri below"
)]
fn every_tensor_type_decodes_the_reference_tokens_on_every_thread_count() {
    watched("gguf_tokens", |stage| {
        let pools: Vec<Pool> = (1..=3).map(|w| Pool::with_spin(w, 1000)).collect();
        for (seed, (name, spec)) in specs().into_iter().enumerate() {
            stage.set(name);
            let test = TestModel::random(&spec, 100 + seed as u64);
            let (expected, want_logits) = reference_generate(&test, STEPS);
            let model =
                Model::from_bytes(&test.to_bytes()).unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(model.format(), FileFormat::Gguf(3));
            assert_eq!(model.config().shared_classifier, spec.output.is_none());
            // The logits agree with the reference's to rounding.
            let mut state = model.new_state(STEPS);
            let mut token = model.bos();
            for (pos, want) in want_logits.iter().enumerate() {
                let got = model.forward(&Serial, &mut state, token, pos);
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g - w).abs() <= 2e-4 * scale.max(1.0),
                        "{name}: pos {pos} logit {i}: {g} vs {w}"
                    );
                }
                token = expected[pos];
            }
            let serial = model.generate(&Serial, STEPS, |_, _| {});
            assert_eq!(serial, expected, "{name}: serial tokens");
            let bits = logits_bits(&model, &Serial, &expected);
            for pool in &pools {
                stage.set(format!("{name}, {} workers", pool.n_workers()));
                assert_eq!(model.generate(pool, STEPS, |_, _| {}), expected, "{name}");
                assert!(
                    logits_bits(&model, pool, &expected) == bits,
                    "{name}: logits differ on {} workers",
                    pool.n_workers()
                );
            }
        }
    });
}

#[test]
#[cfg_attr(miri, ignore = "a file read into a huge-page mapping")]
fn a_gguf_file_opens_from_disk_read_or_mapped_with_the_same_tokens() {
    watched("gguf_file", |_| {
        let test = TestModel::random(&Spec::all(WeightType::Q4_K), 7);
        let path = temp_path("q4k.gguf");
        std::fs::write(&path, test.to_bytes()).unwrap();
        let read = Model::open(&path).unwrap();
        // SAFETY: this test's own file; nothing changes it meanwhile.
        let mapped = unsafe { Model::open_mapped(&path) }.unwrap();
        let pool = Pool::with_spin(1, 1000);
        assert_eq!(
            read.generate(&pool, 4, |_, _| {}),
            mapped.generate(&Serial, 4, |_, _| {})
        );
        assert_eq!(
            read.tensor_types(),
            [(WeightType::Q4_K, 2 * 7 + 1 + 1)],
            "14 layer matrices, the output, the embedding"
        );
        // The vocabulary came with the file.
        let tokenizer = read.tokenizer().expect("GGUF carries its vocabulary");
        assert_eq!(tokenizer.len(), 320);
        // Token 16 is the first word, " t0".
        assert_eq!(tokenizer.decode(5, 17), b" t1");
        assert_eq!(tokenizer.decode(1, 17), b"t1", "no leading space after BOS");
        assert_eq!(
            tokenizer.decode(5, 1),
            b"",
            "a control token prints nothing"
        );
        assert_eq!(tokenizer.encode("t1 t12"), [17, 28]);
        let prompted = read.generate_after(&pool, &[17, 28], 3, |_, _| {});
        assert_eq!(prompted.len(), 3);
        drop((read, mapped));
        std::fs::remove_file(&path).unwrap();
    });
}

#[test]
#[cfg_attr(miri, ignore = "a file read into a huge-page mapping")]
fn q8_0_q4_0_and_q6_k_read_into_a_copy_give_the_mapped_files_logits_to_the_bit() {
    watched("gguf_interleaved_copy", |stage| {
        let pool = Pool::with_spin(1, 1000);
        let q4_0_with_q6_k_output = {
            let mut spec = Spec::all(WeightType::Q4_0);
            spec.output = Some(WeightType::Q6_K);
            spec
        };
        let cases = [
            ("Q8_0", Spec::all(WeightType::Q8_0), 7 * 2 + 1),
            ("Q8_0 tied", Spec::all(WeightType::Q8_0), 7 * 2 + 1),
            ("Q4_0", Spec::all(WeightType::Q4_0), 7 * 2 + 1),
            // The Q6_K classifier is interleaved too.
            ("Q4_0 + Q6_K output", q4_0_with_q6_k_output, 7 * 2 + 1),
        ];
        for (seed, (name, mut spec, matrices)) in cases.into_iter().enumerate() {
            stage.set(name);
            let tied = name.ends_with("tied");
            if tied {
                spec.output = None;
            }
            let test = TestModel::random(&spec, 31 + seed as u64);
            let path = temp_path(&format!("interleaved-{seed}.gguf"));
            std::fs::write(&path, test.to_bytes()).unwrap();
            let read = Model::open(&path).unwrap();
            // SAFETY: this test's own file; nothing changes it meanwhile.
            let mapped = unsafe { Model::open_mapped(&path) }.unwrap();
            // Rearranged where the kernels pay for it (an AVX-512 VNNI
            // CPU), never in the mapped file.
            let pays = pool_matvec::interleaving_pays(spec.attention);
            assert_eq!(
                read.interleaved_matrices(),
                if pays { matrices } else { 0 },
                "{name}"
            );
            assert_eq!(mapped.interleaved_matrices(), 0);
            let tokens = mapped.generate(&Serial, STEPS, |_, _| {});
            let bits = logits_bits(&mapped, &Serial, &tokens);
            assert!(
                logits_bits(&read, &Serial, &tokens) == bits,
                "{name}: serial"
            );
            assert!(logits_bits(&read, &pool, &tokens) == bits, "{name}: pool");
            drop((read, mapped));
            std::fs::remove_file(&path).unwrap();
        }
    });
}

/// A valid small file to break.
fn good() -> TestModel {
    let mut spec = Spec::all(WeightType::Q8_0);
    spec.dim = 64;
    spec.hidden = 96;
    spec.vocab = 260;
    TestModel::random(&spec, 3)
}

fn error_of(bytes: &[u8]) -> String {
    match Model::from_bytes(bytes) {
        Ok(_) => "loaded".to_owned(),
        Err(err) => err.to_string(),
    }
}

#[test]
fn bad_files_are_errors_that_name_the_problem() {
    let model = good();
    let bytes = model.to_bytes();
    assert!(Model::from_bytes(&bytes).is_ok(), "the base case loads");
    let with = |edit: &dyn Fn(&mut testkit::gguf::GgufWriter)| {
        let mut w = model.writer();
        edit(&mut w);
        w.to_bytes()
    };
    let mut wrong_magic = bytes.clone();
    wrong_magic[..4].copy_from_slice(b"GGUX");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("wrong magic", wrong_magic, "not \"GGUF\""),
        ("version 1", with(&|w| w.version = 1), "GGUF version 1"),
        ("version 4", with(&|w| w.version = 4), "GGUF version 4"),
        (
            "a missing key",
            with(&|w| w.metadata.retain(|(k, _)| k != "llama.block_count")),
            "llama.block_count is missing",
        ),
        (
            "a key of the wrong type",
            with(&|w| {
                w.metadata
                    .iter_mut()
                    .find(|(k, _)| k == "llama.embedding_length")
                    .unwrap()
                    .1 = Meta::Str("64".into())
            }),
            "llama.embedding_length holds a string",
        ),
        (
            "another architecture",
            with(&|w| w.metadata[0].1 = Meta::Str("gpt2".into())),
            "architecture \"gpt2\"",
        ),
        (
            "an unsupported type",
            with(&|w| {
                let t = w
                    .tensors
                    .iter_mut()
                    .find(|t| t.name == "blk.1.ffn_up.weight")
                    .unwrap();
                t.ggml_type = 6; // Q5_0: 22 bytes per 32
                t.data = vec![0; 96 * 64 / 32 * 22];
            }),
            "blk.1.ffn_up.weight has type Q5_0",
        ),
        (
            "a shape that does not match",
            with(&|w| {
                let t = w
                    .tensors
                    .iter_mut()
                    .find(|t| t.name == "blk.0.attn_k.weight")
                    .unwrap();
                t.dims = vec![64, 64];
                t.data = vec![0; 64 * 64 / 32 * 34];
            }),
            "blk.0.attn_k.weight has dimensions [64, 64]",
        ),
        (
            "a missing tensor",
            with(&|w| w.tensors.retain(|t| t.name != "blk.1.ffn_down.weight")),
            "blk.1.ffn_down.weight is missing",
        ),
        (
            "a truncated data section",
            bytes[..bytes.len() - 100].to_vec(),
            "runs past the end",
        ),
        ("a truncated header", bytes[..200].to_vec(), "truncated"),
        (
            "a header cut inside the vocabulary",
            {
                let key = b"tokenizer.ggml.tokens";
                let at = bytes
                    .windows(key.len())
                    .position(|w| w == key)
                    .expect("the vocabulary's key");
                bytes[..at + key.len() + 40].to_vec()
            },
            "tokenizer.ggml.tokens",
        ),
        (
            "an alignment that is not a power of two",
            with(&|w| w.meta("general.alignment", Meta::U32(48)).alignment = 48),
            "not a power of two",
        ),
        (
            "a vocabulary that does not match the embedding",
            with(&|w| {
                w.metadata
                    .iter_mut()
                    .find(|(k, _)| k == "tokenizer.ggml.tokens")
                    .unwrap()
                    .1 = Meta::Strings(vec!["a".into(); 100])
            }),
            "",
        ),
    ];
    for (what, bytes, says) in cases {
        let err = error_of(&bytes);
        assert_ne!(err, "loaded", "{what}");
        assert!(err.contains(says), "{what}: {err}");
    }
}

#[test]
fn offsets_past_the_end_or_off_the_alignment_are_errors() {
    let model = good();
    let bytes = model.to_bytes();
    let file = pool_llama::gguf::Gguf::parse(&bytes).unwrap();
    let first = &file.tensors[0];
    // Find the offset field of the first tensor: right after its type.
    let name = first.name.as_bytes();
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
    let offset_at = at + name.len() + 4 + 8 * first.dims.len() + 4;
    let mut past = bytes.clone();
    past[offset_at..offset_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let err = error_of(&past);
    assert!(
        err.contains("runs past the end") || err.contains("overflows"),
        "{err}"
    );
    let mut misaligned = bytes.clone();
    misaligned[offset_at..offset_at + 8].copy_from_slice(&3u64.to_le_bytes());
    let err = error_of(&misaligned);
    assert!(err.contains("not a multiple of the alignment 32"), "{err}");
    let mut huge_count = bytes.clone();
    huge_count[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = error_of(&huge_count);
    assert!(err.contains("cannot fit"), "{err}");
}

/// A mutation fuzzer over a valid file: flipped bytes, overwritten words,
/// cuts. Every result must load or fail with an error: no panic, no
/// out-of-bounds read (Miri runs a few hundred of these).
#[test]
fn mutated_files_never_panic() {
    let bytes = good().to_bytes();
    let mut rng = pool_matvec::XorShift(0xfeed);
    // GGUF_FUZZ_ROUNDS=100000 for a longer run by hand.
    let rounds = std::env::var("GGUF_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(miri) { 60 } else { 3000 });
    let mut loaded = 0;
    for round in 0..rounds {
        let mut file = bytes.clone();
        // Most of a file is tensor data; aim most mutations at the header.
        let header = 2000.min(file.len());
        for _ in 0..1 + rng.next_u64() % 4 {
            let at = if rng.next_u64().is_multiple_of(4) {
                (rng.next_u64() as usize) % file.len()
            } else {
                (rng.next_u64() as usize) % header.min(file.len())
            };
            match rng.next_u64() % 4 {
                0 => file[at] ^= 1 << (rng.next_u64() % 8),
                1 => file[at] = rng.next_u64() as u8,
                2 => {
                    let word =
                        [0u64, u64::MAX, 1 << 32, rng.next_u64()][(rng.next_u64() % 4) as usize];
                    let end = (at + 8).min(file.len());
                    file[at..end].copy_from_slice(&word.to_le_bytes()[..end - at]);
                }
                _ => file.truncate(at.max(4)),
            }
        }
        let outcome = std::panic::catch_unwind(|| match Model::from_bytes(&file) {
            Ok(model) => {
                // What loads must also decode a step within bounds.
                let mut state = model.new_state(1);
                let _ = model.forward(&Serial, &mut state, model.bos(), 0);
                true
            }
            Err(_) => false,
        });
        match outcome {
            Ok(ok) => loaded += usize::from(ok),
            Err(_) => panic!("round {round}: a mutated file made the reader panic"),
        }
    }
    assert!(loaded < rounds, "the mutations must break some files");
}

/// Found by `mutated_files_never_panic`: a block count of 2^31 sized a
/// 400 GB allocation before any tensor was looked up.
#[test]
fn a_block_count_beyond_the_tensors_is_an_error_not_an_allocation() {
    let mut w = good().writer();
    w.metadata
        .iter_mut()
        .find(|(k, _)| k == "llama.block_count")
        .unwrap()
        .1 = Meta::U32(1 << 31);
    let err = error_of(&w.to_bytes());
    assert!(err.contains("llama.block_count is 2147483648"), "{err}");
}

#[test]
fn a_tensor_in_an_unsupported_type_is_named_with_its_type() {
    let model = good();
    let mut w = model.writer();
    let t = w
        .tensors
        .iter_mut()
        .find(|t| t.name == "output.weight")
        .unwrap();
    t.ggml_type = 16; // IQ2_XXS
    let err = Model::from_bytes(&w.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, LoadError::UnsupportedType { tensor, ty } if tensor == "output.weight" && ty == "IQ2_XXS")
            || err.to_string().contains("output.weight"),
        "{err}"
    );
}

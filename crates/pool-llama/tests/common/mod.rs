//! Test models in GGUF: random weights in any mix of tensor types, written
//! with testkit's GGUF writer, and an independent reference decoder over
//! the same values (plain f32 loops over dequantized weights).

#![allow(dead_code, unreachable_pub)]

use half::f16;
use pool_matvec::{WeightType, XorShift};
use testkit::gguf::{GgufWriter, Meta};

/// A model's shape and the type of each of its matrices.
#[derive(Debug, Clone)]
pub struct Spec {
    pub dim: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_base: f32,
    /// Dimensions of a head RoPE rotates (`None`: the key is absent).
    pub rope_dims: Option<usize>,
    pub embedding: WeightType,
    /// Q, K, V and the attention output.
    pub attention: WeightType,
    pub gate_up: WeightType,
    pub down: WeightType,
    /// `None`: tied to the embedding (no `output.weight`).
    pub output: Option<WeightType>,
    pub norms: WeightType,
}

impl Spec {
    /// A small model whose every matrix is `ty`, output untied.
    pub fn all(ty: WeightType) -> Spec {
        Spec {
            dim: 256,
            hidden: 512,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            vocab: 320,
            context: 16,
            rope_base: 10000.0,
            rope_dims: None,
            embedding: ty,
            attention: ty,
            gate_up: ty,
            down: ty,
            output: Some(ty),
            norms: WeightType::F32,
        }
    }

    pub fn head_size(&self) -> usize {
        self.dim / self.heads
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_size()
    }
}

/// A matrix's values (rows x cols), and its bytes in its file type.
pub struct Matrix {
    pub ty: WeightType,
    pub rows: usize,
    pub cols: usize,
    /// The values the file's bytes stand for (quantized and back).
    pub values: Vec<f32>,
    pub bytes: Vec<u8>,
}

/// `values` in `ty`'s layout, and the values those bytes stand for.
pub fn encode(ty: WeightType, values: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let back = match ty {
        WeightType::F32 => {
            for v in values {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            values.to_vec()
        }
        WeightType::F16 => values
            .iter()
            .map(|&v| {
                let h = f16::from_f32(v);
                bytes.extend_from_slice(&h.to_le_bytes());
                h.to_f32()
            })
            .collect(),
        WeightType::Q8_0 => {
            let blocks = pool_matvec::quantize_q8_0(values);
            for b in &blocks {
                bytes.extend_from_slice(&b.d.to_le_bytes());
                bytes.extend(b.qs.iter().map(|&q| q as u8));
            }
            pool_matvec::dequantize_q8_0(&blocks)
        }
        WeightType::Q4_0 => {
            let blocks = pool_matvec::quantize_q4_0(values);
            for b in &blocks {
                bytes.extend_from_slice(&b.d.to_le_bytes());
                bytes.extend_from_slice(&b.qs);
            }
            pool_matvec::dequantize_q4_0(&blocks)
        }
        WeightType::Q4_K => {
            let blocks = pool_matvec::quantize_q4_k(values);
            for b in &blocks {
                bytes.extend_from_slice(&b.d.to_le_bytes());
                bytes.extend_from_slice(&b.dmin.to_le_bytes());
                bytes.extend_from_slice(&b.scales);
                bytes.extend_from_slice(&b.qs);
            }
            pool_matvec::dequantize_q4_k(&blocks)
        }
        WeightType::Q6_K => {
            let blocks = pool_matvec::quantize_q6_k(values);
            for b in &blocks {
                bytes.extend_from_slice(&b.ql);
                bytes.extend_from_slice(&b.qh);
                bytes.extend(b.scales.iter().map(|&s| s as u8));
                bytes.extend_from_slice(&b.d.to_le_bytes());
            }
            pool_matvec::dequantize_q6_k(&blocks)
        }
    };
    (bytes, back)
}

fn matrix(ty: WeightType, rows: usize, cols: usize, scale: f32, rng: &mut XorShift) -> Matrix {
    let raw: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * scale).collect();
    let (bytes, values) = encode(ty, &raw);
    Matrix {
        ty,
        rows,
        cols,
        values,
        bytes,
    }
}

/// One layer's matrices and norms.
pub struct Layer {
    pub attn_norm: Matrix,
    pub q: Matrix,
    pub k: Matrix,
    pub v: Matrix,
    pub o: Matrix,
    pub ffn_norm: Matrix,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

/// A random model: its matrices and the vocabulary.
pub struct TestModel {
    pub spec: Spec,
    pub embedding: Matrix,
    pub layers: Vec<Layer>,
    pub final_norm: Matrix,
    pub output: Option<Matrix>,
    pub tokens: Vec<String>,
}

impl TestModel {
    pub fn random(spec: &Spec, seed: u64) -> TestModel {
        let mut rng = XorShift(seed | 1);
        let (d, h, kv) = (spec.dim, spec.hidden, spec.kv_dim());
        let w = 1.0 / (d as f32).sqrt();
        let norm = |rng: &mut XorShift| {
            let raw: Vec<f32> = (0..d).map(|_| 1.0 + 0.1 * rng.uniform()).collect();
            let (bytes, values) = encode(spec.norms, &raw);
            Matrix {
                ty: spec.norms,
                rows: 1,
                cols: d,
                values,
                bytes,
            }
        };
        let embedding = matrix(spec.embedding, spec.vocab, d, 1.0, &mut rng);
        let layers = (0..spec.layers)
            .map(|_| Layer {
                attn_norm: norm(&mut rng),
                q: matrix(spec.attention, d, d, w, &mut rng),
                k: matrix(spec.attention, kv, d, w, &mut rng),
                v: matrix(spec.attention, kv, d, w, &mut rng),
                o: matrix(spec.attention, d, d, w, &mut rng),
                ffn_norm: norm(&mut rng),
                gate: matrix(spec.gate_up, h, d, w, &mut rng),
                up: matrix(spec.gate_up, h, d, w, &mut rng),
                down: matrix(spec.down, d, h, 1.0 / (h as f32).sqrt(), &mut rng),
            })
            .collect();
        let final_norm = norm(&mut rng);
        let output = spec.output.map(|ty| matrix(ty, spec.vocab, d, w, &mut rng));
        // Control tokens, the pieces words are merged from, then words.
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "\u{2581}", "t", "\u{2581}t"]
            .iter()
            .map(|s| s.to_string())
            .chain((0..10).map(|d| d.to_string()))
            .collect();
        let first_word = tokens.len();
        tokens.extend((0..spec.vocab - first_word).map(|i| format!("\u{2581}t{i}")));
        TestModel {
            spec: spec.clone(),
            embedding,
            layers,
            final_norm,
            output,
            tokens,
        }
    }

    /// The metadata and tensors as a GGUF writer holds them.
    pub fn writer(&self) -> GgufWriter {
        let s = &self.spec;
        let mut g = GgufWriter::new();
        g.meta("general.architecture", Meta::Str("llama".into()))
            .meta("general.name", Meta::Str("test".into()))
            .meta("llama.context_length", Meta::U32(s.context as u32))
            .meta("llama.embedding_length", Meta::U32(s.dim as u32))
            .meta("llama.block_count", Meta::U32(s.layers as u32))
            .meta("llama.feed_forward_length", Meta::U32(s.hidden as u32))
            .meta("llama.attention.head_count", Meta::U32(s.heads as u32))
            .meta(
                "llama.attention.head_count_kv",
                Meta::U32(s.kv_heads as u32),
            )
            .meta("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5))
            .meta("llama.rope.freq_base", Meta::F32(s.rope_base))
            .meta("tokenizer.ggml.model", Meta::Str("llama".into()))
            .meta("tokenizer.ggml.tokens", Meta::Strings(self.tokens.clone()))
            .meta(
                "tokenizer.ggml.scores",
                Meta::F32s((0..s.vocab).map(|i| -(i as f32)).collect()),
            )
            .meta(
                "tokenizer.ggml.token_type",
                Meta::I32s((0..s.vocab).map(|i| if i < 3 { 3 } else { 1 }).collect()),
            )
            .meta("tokenizer.ggml.bos_token_id", Meta::U32(1))
            .meta("tokenizer.ggml.eos_token_id", Meta::U32(2));
        if let Some(n) = s.rope_dims {
            g.meta("llama.rope.dimension_count", Meta::U32(n as u32));
        }
        let mut add = |name: &str, m: &Matrix| {
            let dims: Vec<u64> = if m.rows == 1 {
                vec![m.cols as u64]
            } else {
                vec![m.cols as u64, m.rows as u64]
            };
            g.tensor(name, &dims, m.ty.ggml_id(), m.bytes.clone());
        };
        add("token_embd.weight", &self.embedding);
        for (i, l) in self.layers.iter().enumerate() {
            add(&format!("blk.{i}.attn_norm.weight"), &l.attn_norm);
            add(&format!("blk.{i}.attn_q.weight"), &l.q);
            add(&format!("blk.{i}.attn_k.weight"), &l.k);
            add(&format!("blk.{i}.attn_v.weight"), &l.v);
            add(&format!("blk.{i}.attn_output.weight"), &l.o);
            add(&format!("blk.{i}.ffn_norm.weight"), &l.ffn_norm);
            add(&format!("blk.{i}.ffn_gate.weight"), &l.gate);
            add(&format!("blk.{i}.ffn_up.weight"), &l.up);
            add(&format!("blk.{i}.ffn_down.weight"), &l.down);
        }
        add("output_norm.weight", &self.final_norm);
        if let Some(out) = &self.output {
            add("output.weight", out);
        }
        g
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.writer().to_bytes()
    }
}

/// The activation a kernel for `ty` multiplies: `x` quantized as the
/// kernel's input is (Q8_0 for Q8_0 and Q4_0, Q8_K for the k-quants), and
/// back; f32 types read `x` as it is. Written out here, independently of
/// the library's quantizers.
fn as_read_by(ty: WeightType, x: &[f32]) -> Vec<f32> {
    let (block, f16_scale) = match ty {
        WeightType::F32 | WeightType::F16 => return x.to_vec(),
        WeightType::Q8_0 | WeightType::Q4_0 => (32, true),
        WeightType::Q4_K | WeightType::Q6_K => (256, false),
    };
    x.chunks(block)
        .flat_map(|chunk| {
            let amax = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let stored = if f16_scale {
                f16::from_f32(d).to_f32()
            } else {
                d
            };
            chunk
                .iter()
                .map(move |v| stored * (v * id).round().clamp(-127.0, 127.0))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn matvec(m: &Matrix, x: &[f32]) -> Vec<f32> {
    let x = as_read_by(m.ty, x);
    (0..m.rows)
        .map(|r| {
            m.values[r * m.cols..(r + 1) * m.cols]
                .iter()
                .zip(&x)
                .map(|(w, x)| w * x)
                .sum()
        })
        .collect()
}

/// The norm's sum of squares in the decoder's order (and below, its
/// `w * (x / rms)` as `w * (scale * x)`, as the decoder rounds it): sixteen lanes (lane
/// `i` over the values at `i mod 16`), added pairwise 8, 4, 2, 1 apart,
/// then the tail. The activations are quantized after the norm, so a
/// last-bit difference in it can move a value across a rounding edge and
/// a logit by a quantization step: the reference specifies this bit.
fn sum_of_squares(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let body = x.len() / 16 * 16;
    for (i, v) in x[..body].iter().enumerate() {
        lanes[i % 16] += v * v;
    }
    for width in [8, 4, 2, 1] {
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
    }
    x[body..].iter().fold(lanes[0], |sum, v| sum + v * v)
}

fn rms(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ss: f32 = sum_of_squares(x) / x.len() as f32 + 1e-5;
    let scale = 1.0 / ss.sqrt();
    x.iter().zip(w).map(|(x, w)| w * (scale * x)).collect()
}

/// The reference's greedy tokens from BOS and each step's logits.
pub fn reference_generate(m: &TestModel, steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let s = &m.spec;
    let (d, hs, kv) = (s.dim, s.head_size(), s.kv_dim());
    let rot = s.rope_dims.unwrap_or(hs);
    let group = s.heads / s.kv_heads;
    let mut kcache = vec![vec![vec![0f32; kv]; steps]; s.layers];
    let mut vcache = kcache.clone();
    let mut token = 1usize;
    let (mut out, mut all) = (Vec::new(), Vec::new());
    for pos in 0..steps {
        let mut x = m.embedding.values[token * d..(token + 1) * d].to_vec();
        let rope = |v: &mut [f32]| {
            for head in v.chunks_mut(hs) {
                for i in (0..rot).step_by(2) {
                    let freq = 1.0 / s.rope_base.powf(i as f32 / rot as f32);
                    let (sin, cos) = (pos as f32 * freq).sin_cos();
                    let (a, b) = (head[i], head[i + 1]);
                    head[i] = a * cos - b * sin;
                    head[i + 1] = a * sin + b * cos;
                }
            }
        };
        for (layer, l) in m.layers.iter().enumerate() {
            let xb = rms(&x, &l.attn_norm.values);
            let mut q = matvec(&l.q, &xb);
            let mut k = matvec(&l.k, &xb);
            let v = matvec(&l.v, &xb);
            rope(&mut q);
            rope(&mut k);
            kcache[layer][pos] = k;
            vcache[layer][pos] = v;
            let mut att_out = vec![0f32; d];
            for h in 0..s.heads {
                let kvh = h / group;
                let mut att: Vec<f32> = (0..=pos)
                    .map(|t| {
                        (0..hs)
                            .map(|i| q[h * hs + i] * kcache[layer][t][kvh * hs + i])
                            .sum::<f32>()
                            / (hs as f32).sqrt()
                    })
                    .collect();
                let max = att.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = att
                    .iter_mut()
                    .map(|a| {
                        *a = (*a - max).exp();
                        *a
                    })
                    .sum();
                for (t, a) in att.iter().enumerate() {
                    for i in 0..hs {
                        att_out[h * hs + i] += a / sum * vcache[layer][t][kvh * hs + i];
                    }
                }
            }
            let o = matvec(&l.o, &att_out);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let xb = rms(&x, &l.ffn_norm.values);
            let g = matvec(&l.gate, &xb);
            let u = matvec(&l.up, &xb);
            let hgu: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = matvec(&l.down, &hgu);
            x.iter_mut().zip(&down).for_each(|(x, o)| *x += o);
        }
        let xn = rms(&x, &m.final_norm.values);
        let logits = matvec(m.output.as_ref().unwrap_or(&m.embedding), &xn);
        let mut best = 0;
        for (i, v) in logits.iter().enumerate() {
            if *v > logits[best] {
                best = i;
            }
        }
        out.push(best as u32);
        all.push(logits);
        token = best;
    }
    (out, all)
}

pub fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("pool-llama-{}-{name}", std::process::id()))
}

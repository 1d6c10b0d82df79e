//! A synthetic decode step: the matvec sequence of one token of a
//! llama-style model, with random weights, to measure executors on the
//! workload this runtime exists for.
//!
//! Per layer: Q, K, V (fused: one dispatch), the output projection, gate and
//! up (fused), down; then the vocabulary projection. With the default shape
//! (dim 768, hidden 2048, 12 layers, vocab 32000) that is 49 row jobs per
//! token. Attention itself is replaced by a cheap elementwise mix: it is not
//! a matvec and does not change what is measured.

use pool_core::Pool;

use crate::fast::matvec_f32_fast;
use crate::q4_0::{quantize_q4_0, BlockQ4_0};
use crate::q8_0::{quantize_q8_0, ActivationExtras, BlockQ8_0, QK8_0};
use crate::rows::{RowsInto, RowsIntoFn};

/// The model shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeConfig {
    /// Model width.
    pub dim: usize,
    /// Feed-forward width.
    pub hidden: usize,
    /// Transformer layers.
    pub layers: usize,
    /// Vocabulary size (rows of the final projection).
    pub vocab: usize,
}

impl Default for DecodeConfig {
    /// dim 768, hidden 2048, 12 layers, vocab 32000 (a GPT-2-small-sized
    /// llama).
    fn default() -> Self {
        DecodeConfig {
            dim: 768,
            hidden: 2048,
            layers: 12,
            vocab: 32000,
        }
    }
}

impl DecodeConfig {
    /// Row jobs (dispatches, with a pool) per token: 4 per layer + logits.
    pub fn row_jobs_per_token(&self) -> usize {
        self.layers * 4 + 1
    }

    /// Weight bytes streamed per token in `format`.
    pub fn weight_bytes(&self, format: WeightFormat) -> usize {
        let per_layer = 4 * self.dim * self.dim + 3 * self.dim * self.hidden;
        let values = self.layers * per_layer + self.vocab * self.dim;
        match format {
            WeightFormat::F32 => values * 4,
            WeightFormat::Q8_0 => values / QK8_0 * std::mem::size_of::<BlockQ8_0>(),
            WeightFormat::Q4_0 => values / QK8_0 * std::mem::size_of::<BlockQ4_0>(),
        }
    }
}

/// How weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// f32, the fast SIMD kernel.
    F32,
    /// GGUF Q8_0 blocks.
    Q8_0,
    /// GGUF Q4_0 blocks (a Q8_0 activation).
    Q4_0,
}

impl WeightFormat {
    /// Every format, f32 first.
    pub const ALL: [WeightFormat; 3] = [WeightFormat::F32, WeightFormat::Q8_0, WeightFormat::Q4_0];

    /// The format's name in reports (`f32`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "f32",
            WeightFormat::Q8_0 => "q8_0",
            WeightFormat::Q4_0 => "q4_0",
        }
    }
}

/// A row-major weight matrix.
#[derive(Debug, Clone)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: MatrixData,
}

#[derive(Debug, Clone)]
enum MatrixData {
    F32(Vec<f32>),
    Q8_0(Vec<BlockQ8_0>),
    Q4_0(Vec<BlockQ4_0>),
}

/// An input vector, quantized once when the weights need it.
pub struct Input<'a> {
    f32: &'a [f32],
    q8_0: Option<(Vec<BlockQ8_0>, ActivationExtras)>,
}

impl<'a> Input<'a> {
    /// Prepares `x` for matrices of `format`.
    pub fn new(x: &'a [f32], format: WeightFormat) -> Self {
        // One Q8_0 activation for every matrix that reads this input.
        let q8_0 = (format != WeightFormat::F32).then(|| {
            let q = quantize_q8_0(x);
            let extras = ActivationExtras::of(&q);
            (q, extras)
        });
        Input { f32: x, q8_0 }
    }
}

impl Matrix {
    /// A `rows x cols` matrix of values in [-scale, scale) from `rng`.
    fn random(rows: usize, cols: usize, format: WeightFormat, rng: &mut XorShift) -> Matrix {
        let scale = 1.0 / (cols as f32).sqrt();
        let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * scale).collect();
        let data = match format {
            WeightFormat::F32 => MatrixData::F32(values),
            WeightFormat::Q8_0 => MatrixData::Q8_0(quantize_q8_0(&values)),
            WeightFormat::Q4_0 => MatrixData::Q4_0(quantize_q4_0(&values)),
        };
        Matrix { rows, cols, data }
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Computes rows `start..end` into `out` (length `end - start`).
    #[inline]
    pub fn rows_into(&self, x: &Input<'_>, start: usize, out: &mut [f32]) {
        let cols = self.cols;
        match &self.data {
            MatrixData::F32(w) => {
                let rows = &w[start * cols..(start + out.len()) * cols];
                matvec_f32_fast(None, rows, x.f32, out);
            }
            MatrixData::Q8_0(w) => {
                let (q, extras) = x.q8_0.as_ref().expect("Input prepared for Q8_0");
                let xq = extras.with(q);
                let dot = crate::q8_0::select_dot(&xq);
                let per_row = cols / QK8_0;
                for (o, value) in out.iter_mut().enumerate() {
                    let row = start + o;
                    *value = dot(&w[row * per_row..(row + 1) * per_row], &xq);
                }
            }
            MatrixData::Q4_0(w) => {
                let (q, extras) = x.q8_0.as_ref().expect("Input prepared for Q4_0");
                let per_row = cols / QK8_0;
                let rows = &w[start * per_row..(start + out.len()) * per_row];
                crate::q4_0::rows_into(None, rows, per_row, &extras.with(q), out);
            }
        }
    }
}

/// Runs the token's matvecs: the thing being compared.
pub trait DecodeExecutor {
    /// `outs[i] = mats[i] x` for matrices sharing one input, fused where the
    /// executor can (one barrier for all).
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]);
}

/// Runs everything on the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serial;

impl DecodeExecutor for Serial {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        for (m, out) in mats.iter().zip(outs.iter_mut()) {
            m.rows_into(x, 0, out);
        }
    }
}

impl DecodeExecutor for Pool {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        let callbacks: Vec<_> = mats
            .iter()
            .map(|m| move |start: usize, out: &mut [f32]| m.rows_into(x, start, out))
            .collect();
        let mut parts: Vec<(&mut [f32], &RowsIntoFn<'_, f32>)> = outs
            .iter_mut()
            .zip(&callbacks)
            .map(|(out, f)| (&mut **out, f as &RowsIntoFn<'_, f32>))
            .collect();
        self.run_many_into(&mut parts);
    }
}

struct Layer {
    wq: Matrix,
    wk: Matrix,
    wv: Matrix,
    wo: Matrix,
    gate: Matrix,
    up: Matrix,
    down: Matrix,
}

/// A model with random weights, and its decode state.
pub struct DecodeModel {
    config: DecodeConfig,
    format: WeightFormat,
    layers: Vec<Layer>,
    logits: Matrix,
}

/// Scratch buffers for one token.
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    d: Vec<f32>,
    logits: Vec<f32>,
}

impl DecodeModel {
    /// Random weights from `seed`.
    ///
    /// # Panics
    ///
    /// For Q8_0, if `dim` or `hidden` is not a multiple of 32.
    pub fn random(config: DecodeConfig, format: WeightFormat, seed: u64) -> DecodeModel {
        let mut rng = XorShift(seed | 1);
        let (dim, hidden) = (config.dim, config.hidden);
        let mut m = |rows, cols| Matrix::random(rows, cols, format, &mut rng);
        let layers = (0..config.layers)
            .map(|_| Layer {
                wq: m(dim, dim),
                wk: m(dim, dim),
                wv: m(dim, dim),
                wo: m(dim, dim),
                gate: m(hidden, dim),
                up: m(hidden, dim),
                down: m(dim, hidden),
            })
            .collect();
        let logits = m(config.vocab, dim);
        DecodeModel {
            config,
            format,
            layers,
            logits,
        }
    }

    /// The model's shape.
    pub fn config(&self) -> DecodeConfig {
        self.config
    }

    /// The weights' format.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Decodes `tokens` tokens from a fixed start on `exec`; returns the
    /// final logits (bit-identical for every executor and thread count).
    pub fn decode(&self, exec: &dyn DecodeExecutor, tokens: usize) -> Vec<f32> {
        let (dim, hidden, vocab) = (self.config.dim, self.config.hidden, self.config.vocab);
        let mut s = Scratch {
            q: vec![0.0; dim],
            k: vec![0.0; dim],
            v: vec![0.0; dim],
            o: vec![0.0; dim],
            g: vec![0.0; hidden],
            u: vec![0.0; hidden],
            d: vec![0.0; dim],
            logits: vec![0.0; vocab],
        };
        let mut x: Vec<f32> = (0..dim).map(|i| ((i % 7) as f32 - 3.0) * 0.25).collect();
        for _ in 0..tokens {
            self.token(exec, &mut x, &mut s);
            // Feed the next token: a deterministic function of the logits.
            for (i, xi) in x.iter_mut().enumerate() {
                *xi = s.logits[i % vocab] + 0.01 * (i % 5) as f32;
            }
        }
        s.logits
    }

    fn token(&self, exec: &dyn DecodeExecutor, x: &mut [f32], s: &mut Scratch) {
        let format = self.format;
        for layer in &self.layers {
            let xn = rms_norm(x);
            let input = Input::new(&xn, format);
            exec.matvec_many(
                &[&layer.wq, &layer.wk, &layer.wv],
                &input,
                &mut [&mut s.q, &mut s.k, &mut s.v],
            );
            // Stand-in for attention: an elementwise mix of q, k and v.
            let mixed: Vec<f32> =
                s.q.iter()
                    .zip(&s.k)
                    .zip(&s.v)
                    .map(|((q, k), v)| q * sigmoid(*k) + v)
                    .collect();
            exec.matvec_many(&[&layer.wo], &Input::new(&mixed, format), &mut [&mut s.o]);
            x.iter_mut().zip(&s.o).for_each(|(xi, o)| *xi += o);
            let xn = rms_norm(x);
            exec.matvec_many(
                &[&layer.gate, &layer.up],
                &Input::new(&xn, format),
                &mut [&mut s.g, &mut s.u],
            );
            let h: Vec<f32> =
                s.g.iter()
                    .zip(&s.u)
                    .map(|(g, u)| g * sigmoid(*g) * u)
                    .collect();
            exec.matvec_many(&[&layer.down], &Input::new(&h, format), &mut [&mut s.d]);
            x.iter_mut().zip(&s.d).for_each(|(xi, d)| *xi += d);
        }
        let xn = rms_norm(x);
        exec.matvec_many(
            &[&self.logits],
            &Input::new(&xn, format),
            &mut [&mut s.logits],
        );
    }
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

fn rms_norm(x: &[f32]) -> Vec<f32> {
    let mean = x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32;
    let scale = 1.0 / (mean + 1e-5).sqrt();
    x.iter().map(|v| v * scale).collect()
}

/// A small, fast, seedable generator for test data (not for anything else).
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut v = self.0;
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        self.0 = v;
        v
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

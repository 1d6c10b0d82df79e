//! A synthetic decode step: the matvec sequence of one token of a
//! llama-style model, with random weights, to measure executors on the
//! workload this runtime exists for.
//!
//! Per layer: Q, K, V (fused: one dispatch), the output projection, gate and
//! up (fused), down; then the vocabulary projection. With the default shape
//! (dim 768, hidden 2048, 12 layers, vocab 32000) that is 49 row jobs per
//! token. Attention itself is replaced by a cheap elementwise mix: it is not
//! a matvec and does not change what is measured.
//!
//! [`DecodeModel::decode_phased`] runs the same token as one
//! [`Pool::run_phased`] job, ggml-style: one publish per token and a
//! barrier after each matvec, instead of a fork-join per matvec.

use crate::sync::{AtomicUsize, Ordering};

use pool_core::{JobBarrier, Pool};

use crate::disjoint::DisjointRows;
use crate::fast::matvec_f32_fast;
use crate::q4_0::{quantize_q4_0, BlockQ4_0};
use crate::q8_0::{quantize_q8_0, ActivationExtras, BlockQ8_0, QK8_0};
pub use crate::random::XorShift;
use crate::rows::{RowsInto, RowsIntoFn};
pub use crate::serial::Serial;

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
    ///
    /// # Panics
    ///
    /// When the count does not fit a `usize` ([`DecodeConfig::checked_weight_bytes`]
    /// says `None` instead).
    pub fn weight_bytes(&self, format: WeightFormat) -> usize {
        self.checked_weight_bytes(format)
            .expect("the model's weight bytes overflow usize")
    }

    /// [`DecodeConfig::weight_bytes`], `None` when it overflows (a shape
    /// from the command line).
    pub fn checked_weight_bytes(&self, format: WeightFormat) -> Option<usize> {
        let square = self.dim.checked_mul(self.dim)?.checked_mul(4)?;
        let ffn = self.dim.checked_mul(self.hidden)?.checked_mul(3)?;
        let per_layer = square.checked_add(ffn)?;
        let values = self
            .layers
            .checked_mul(per_layer)?
            .checked_add(self.vocab.checked_mul(self.dim)?)?;
        match format {
            WeightFormat::F32 => values.checked_mul(4),
            WeightFormat::Q8_0 => Some(values / QK8_0 * std::mem::size_of::<BlockQ8_0>()),
            WeightFormat::Q4_0 => Some(values / QK8_0 * std::mem::size_of::<BlockQ4_0>()),
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
            let extras = if format == WeightFormat::Q4_0 {
                ActivationExtras::for_q4_0(&q)
            } else {
                ActivationExtras::of(&q)
            };
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

    /// The bytes a matvec streams.
    pub fn bytes(&self) -> usize {
        match &self.data {
            MatrixData::F32(w) => std::mem::size_of_val(&w[..]),
            MatrixData::Q8_0(w) => std::mem::size_of_val(&w[..]),
            MatrixData::Q4_0(w) => std::mem::size_of_val(&w[..]),
        }
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
                let per_row = cols / QK8_0;
                let rows = &w[start * per_row..(start + out.len()) * per_row];
                crate::q8_0::rows_into(&crate::Serial, rows, per_row, &extras.with(q), out);
            }
            MatrixData::Q4_0(w) => {
                let (q, extras) = x.q8_0.as_ref().expect("Input prepared for Q4_0");
                let per_row = cols / QK8_0;
                let rows = &w[start * per_row..(start + out.len()) * per_row];
                crate::q4_0::rows_into(&crate::Serial, rows, per_row, &extras.with(q), out);
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

impl DecodeExecutor for Serial {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        for (m, out) in mats.iter().zip(outs.iter_mut()) {
            m.rows_into(x, 0, out);
        }
    }
}

impl DecodeExecutor for Pool {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        matvec_many_on(self, mats, x, outs);
    }
}

/// [`DecodeExecutor::matvec_many`] on any row executor: the matrices'
/// rows laid end to end in one [`RowsInto::run_many_into`] job. Other
/// pools implement `DecodeExecutor` with it (the benchmarks' peers do).
pub fn matvec_many_on<E: RowsInto + ?Sized>(
    exec: &E,
    mats: &[&Matrix],
    x: &Input<'_>,
    outs: &mut [&mut [f32]],
) {
    let callbacks: Vec<_> = mats
        .iter()
        .map(|m| move |start: usize, out: &mut [f32]| m.rows_into(x, start, out))
        .collect();
    let mut parts: Vec<(&mut [f32], &RowsIntoFn<'_, f32>)> = outs
        .iter_mut()
        .zip(&callbacks)
        .map(|(out, f)| (&mut **out, f as &RowsIntoFn<'_, f32>))
        .collect();
    exec.run_many_into_reading(&mut parts, mats.iter().map(|m| m.bytes()).sum());
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
        let vocab = self.config.vocab;
        let mut s = Scratch::new(self.config);
        let mut x = first_input(self.config.dim);
        for _ in 0..tokens {
            self.token(exec, &mut x, &mut s);
            // Feed the next token: a deterministic function of the logits.
            for (i, xi) in x.iter_mut().enumerate() {
                *xi = s.logits[i % vocab] + 0.01 * (i % 5) as f32;
            }
        }
        s.logits
    }

    /// [`decode`](Self::decode) with each token run as one
    /// [`Pool::run_phased`] job: every participant computes the cheap
    /// vector steps (norms, the mix, residuals, the activation's
    /// quantization) itself, the matvec rows are shared out in grains, and
    /// a barrier follows each matvec (4 per layer). The logits are
    /// bit-identical to `decode` on any executor.
    pub fn decode_phased(&self, pool: &Pool, tokens: usize) -> Vec<f32> {
        let vocab = self.config.vocab;
        let mut s = Scratch::new(self.config);
        let cursors: Vec<AtomicUsize> = (0..self.layers.len() * 7 + 1)
            .map(|_| AtomicUsize::new(0))
            .collect();
        let mut x = first_input(self.config.dim);
        for _ in 0..tokens {
            // Relaxed: published to the participants by the job's dispatch.
            cursors.iter().for_each(|c| c.store(0, Ordering::Relaxed));
            let out = PhaseOutputs {
                q: DisjointRows::new(&mut s.q),
                k: DisjointRows::new(&mut s.k),
                v: DisjointRows::new(&mut s.v),
                o: DisjointRows::new(&mut s.o),
                g: DisjointRows::new(&mut s.g),
                u: DisjointRows::new(&mut s.u),
                d: DisjointRows::new(&mut s.d),
                logits: DisjointRows::new(&mut s.logits),
            };
            let start = &x;
            pool.run_phased(|_idx, n, barrier| {
                self.token_phased(start, &out, &cursors, n, barrier);
            });
            for (i, xi) in x.iter_mut().enumerate() {
                *xi = s.logits[i % vocab] + 0.01 * (i % 5) as f32;
            }
        }
        s.logits
    }

    /// One participant's share of a token: the same steps as `token`, in
    /// the same order, so its private residual `x` is bit-identical to
    /// every other participant's and to `token`'s.
    fn token_phased(
        &self,
        start: &[f32],
        out: &PhaseOutputs<'_>,
        cursors: &[AtomicUsize],
        n: usize,
        barrier: &mut JobBarrier<'_>,
    ) {
        let format = self.format;
        let mut cursors = cursors.iter();
        let mut rows = |m: &Matrix, x: &Input<'_>, target: &DisjointRows<'_, f32>| {
            let cursor = cursors.next().expect("a cursor per matvec");
            share_rows(m, x, target, cursor, n);
        };
        let mut x = start.to_vec();
        for layer in &self.layers {
            let xn = rms_norm(&x);
            let input = Input::new(&xn, format);
            rows(&layer.wq, &input, &out.q);
            rows(&layer.wk, &input, &out.k);
            rows(&layer.wv, &input, &out.v);
            barrier.wait();
            // SAFETY: the barrier just passed follows every participant's
            // writes to these outputs, and the next writes to them come
            // after two more barriers, which this participant reaches only
            // after its last read here (the same for each `all` below).
            let (q, k, v) = unsafe { (out.q.all(), out.k.all(), out.v.all()) };
            let mixed: Vec<f32> = q
                .iter()
                .zip(k)
                .zip(v)
                .map(|((q, k), v)| q * sigmoid(*k) + v)
                .collect();
            rows(&layer.wo, &Input::new(&mixed, format), &out.o);
            barrier.wait();
            // SAFETY: as above.
            let o = unsafe { out.o.all() };
            x.iter_mut().zip(o).for_each(|(xi, o)| *xi += o);
            let xn = rms_norm(&x);
            let input = Input::new(&xn, format);
            rows(&layer.gate, &input, &out.g);
            rows(&layer.up, &input, &out.u);
            barrier.wait();
            // SAFETY: as above.
            let (g, u) = unsafe { (out.g.all(), out.u.all()) };
            let h: Vec<f32> = g.iter().zip(u).map(|(g, u)| g * sigmoid(*g) * u).collect();
            rows(&layer.down, &Input::new(&h, format), &out.d);
            barrier.wait();
            // SAFETY: as above.
            let d = unsafe { out.d.all() };
            x.iter_mut().zip(d).for_each(|(xi, d)| *xi += d);
        }
        let xn = rms_norm(&x);
        rows(&self.logits, &Input::new(&xn, format), &out.logits);
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

impl Scratch {
    fn new(config: DecodeConfig) -> Scratch {
        let (dim, hidden) = (config.dim, config.hidden);
        Scratch {
            q: vec![0.0; dim],
            k: vec![0.0; dim],
            v: vec![0.0; dim],
            o: vec![0.0; dim],
            g: vec![0.0; hidden],
            u: vec![0.0; hidden],
            d: vec![0.0; dim],
            logits: vec![0.0; config.vocab],
        }
    }
}

/// The fixed input of the first token.
fn first_input(dim: usize) -> Vec<f32> {
    (0..dim).map(|i| ((i % 7) as f32 - 3.0) * 0.25).collect()
}

/// A phased token's outputs, written in disjoint grains during a phase and
/// read whole after the barrier that ends it.
struct PhaseOutputs<'a> {
    q: DisjointRows<'a, f32>,
    k: DisjointRows<'a, f32>,
    v: DisjointRows<'a, f32>,
    o: DisjointRows<'a, f32>,
    g: DisjointRows<'a, f32>,
    u: DisjointRows<'a, f32>,
    d: DisjointRows<'a, f32>,
    logits: DisjointRows<'a, f32>,
}

/// Computes chunks of `m`'s rows into `target` until `cursor` runs out:
/// whichever participant is free takes the next (`pull_chunks`).
fn share_rows(
    m: &Matrix,
    x: &Input<'_>,
    target: &DisjointRows<'_, f32>,
    cursor: &AtomicUsize,
    n: usize,
) {
    crate::rows::pull_chunks(cursor, m.rows(), n, |start, end| {
        // SAFETY: `pull_chunks` hands each range to one participant, so no
        // two hold overlapping rows; no one reads `target` whole until the
        // barrier after this phase.
        m.rows_into(x, start, unsafe { target.rows(start, end) });
    });
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

fn rms_norm(x: &[f32]) -> Vec<f32> {
    let mean = x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32;
    let scale = 1.0 / (mean + 1e-5).sqrt();
    x.iter().map(|v| v * scale).collect()
}

//! A llama2 decoder on the pool: the llama2.c checkpoint format, the real
//! architecture (RMSNorm, QKV, RoPE, attention over a KV cache, the output
//! projection, a SwiGLU FFN, the logits), every matvec a row job.
//!
//! - Q, K and V are one job (`run_many`); the FFN's gate, up and SwiGLU
//!   product are one job (each range's gate and up rows computed together);
//!   attention heads are one job; the output projection, the FFN's down
//!   projection and the classifier are one each: `5 x layers + 1`
//!   dispatches per token.
//! - Every matvec uses [`matvec_f32_fast`]'s fixed reduction order and every
//!   head is computed by one participant in position order, so the logits
//!   and the generated tokens are bit-identical for every executor and
//!   thread count.
//! - [`Llama2::open`] reads the file into memory (huge pages where the
//!   kernel has them), which nothing done to the file later can reach;
//!   [`Llama2::open_mapped`] (`unsafe`: the file must not change) reads it
//!   in place, and [`Llama2::mapped_file`] hands the mapping to
//!   `pool-topo`'s NUMA placement.
//!
//! ```
//! # #[cfg(not(miri))] { // a file mapping
//! use pool_matvec::decode::Serial;
//! use pool_matvec::llama2::{write_random_checkpoint, Config, Llama2};
//!
//! let config = Config { dim: 64, hidden_dim: 96, n_layers: 2, n_heads: 4, n_kv_heads: 2,
//!                       vocab_size: 50, seq_len: 16, shared_classifier: true };
//! let path = std::env::temp_dir().join(format!("doc-llama2-{}.bin", std::process::id()));
//! write_random_checkpoint(&path, &config, 7).unwrap();
//! let model = Llama2::open(&path).unwrap();
//! let pool = pool_core::Pool::new(1);
//! assert_eq!(model.generate(&pool, 8, |_, _| {}), model.generate(&Serial, 8, |_, _| {}));
//! # drop(model);
//! # std::fs::remove_file(&path).unwrap();
//! # }
//! ```

mod checkpoint;
mod tokenizer;

use std::path::Path;

pub use checkpoint::{write_random_checkpoint, Config, LoadError, HEADER_BYTES};
pub use tokenizer::{Tokenizer, BOS};

use checkpoint::Layout;

use crate::disjoint::DisjointRows;
use crate::fast::{dot_fast, matvec_f32_fast};
use crate::rows::{RowParallel, RowsInto, RowsIntoFn};

/// Where a [`Llama2`] holds its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// The file mapped shared and read-only, read in place (Linux and
    /// Android; elsewhere read into memory): no copy, and the pages can be
    /// placed on a NUMA node (`MappedFile::place_span`).
    Mapped,
    /// A read-only copy in anonymous memory advised for transparent huge
    /// pages (`pool_topo::HugePageCopy`; Linux and Android, elsewhere read
    /// into memory): fewer TLB misses while streaming, measured 15-40 %
    /// more read bandwidth from DRAM here, at the price of the copy.
    HugePageCopy,
}

/// Where the weights live.
#[derive(Debug)]
enum Storage {
    /// The checkpoint file, mapped shared and read-only.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Mapped(pool_topo::MappedFile),
    /// The whole file copied into huge-page-backed memory.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    HugePages(pool_topo::HugePageCopy),
    /// The values after the header, copied.
    Owned(Vec<f32>),
}

/// A llama2.c checkpoint, ready to decode.
#[derive(Debug)]
pub struct Llama2 {
    config: Config,
    layout: Layout,
    storage: Storage,
}

impl Llama2 {
    /// Opens a checkpoint, reading it into memory (on Linux and Android a
    /// copy on transparent huge pages, [`Residence::HugePageCopy`]):
    /// whatever happens to the file afterwards cannot reach the model. A
    /// truncated file, a header that makes no model, or bytes after the
    /// data are errors. [`Llama2::open_mapped`] reads the file in place
    /// instead, without the copy, if you can promise the file stays as it
    /// is.
    pub fn open(path: impl AsRef<Path>) -> Result<Llama2, LoadError> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let copy = pool_topo::HugePageCopy::read_file(path)?;
            Llama2::checked(Storage::HugePages(copy))
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            Llama2::from_bytes(&std::fs::read(path)?)
        }
    }

    /// Opens a checkpoint mapped shared and read-only
    /// ([`Residence::Mapped`]): no copy, the page cache's pages read in
    /// place, and the mapping can be placed on a NUMA node
    /// ([`Llama2::mapped_file`]). Linux and Android; elsewhere it reads the
    /// file into memory.
    ///
    /// # Safety
    ///
    /// The contract of [`pool_topo::MappedFile::from_file`]: nobody may
    /// truncate or write the file while the model lives (a truncation
    /// makes the next read die of `SIGBUS`).
    pub unsafe fn open_mapped(path: impl AsRef<Path>) -> Result<Llama2, LoadError> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // SAFETY: the caller's promise, passed on.
            let file = unsafe { pool_topo::MappedFile::open(path)? };
            Llama2::checked(Storage::Mapped(file))
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            Llama2::open(path)
        }
    }

    /// Checks the bytes in `storage` and builds the model on them.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn checked(storage: Storage) -> Result<Llama2, LoadError> {
        let bytes = match &storage {
            Storage::Mapped(file) => file.as_bytes(),
            Storage::HugePages(copy) => copy.as_bytes(),
            Storage::Owned(_) => unreachable!("owned values are checked by from_bytes"),
        };
        let (config, layout) = Llama2::check(bytes)?;
        if cfg!(target_endian = "big") {
            return Err(LoadError::Unsupported(
                "little-endian floats on a big-endian CPU",
            ));
        }
        let model = Llama2 {
            config,
            layout,
            storage,
        };
        // Validates the alignment once: every later access relies on it.
        model.try_values()?;
        Ok(model)
    }

    /// Where the weights are: `None` when copied by [`Llama2::from_bytes`]
    /// (or read into memory where neither residence exists).
    pub fn residence(&self) -> Option<Residence> {
        match &self.storage {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::Mapped(_) => Some(Residence::Mapped),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::HugePages(_) => Some(Residence::HugePageCopy),
            Storage::Owned(_) => None,
        }
    }

    /// A checkpoint's bytes, copied (for tests, or weights already in
    /// memory).
    pub fn from_bytes(bytes: &[u8]) -> Result<Llama2, LoadError> {
        let (config, layout) = Llama2::check(bytes)?;
        let values = bytes[HEADER_BYTES..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok(Llama2 {
            config,
            layout,
            storage: Storage::Owned(values),
        })
    }

    fn check(bytes: &[u8]) -> Result<(Config, Layout), LoadError> {
        let config = Config::from_header(bytes)?;
        let (Some(layout), Some(expected)) = (config.layout(), config.file_bytes()) else {
            return Err(LoadError::BadHeader(format!(
                "{config:?} does not fit this platform's address space"
            )));
        };
        match bytes.len() {
            found if found < expected => Err(LoadError::Truncated {
                needed: expected,
                found,
            }),
            found if found > expected => Err(LoadError::TrailingBytes { expected, found }),
            _ => Ok((config, layout)),
        }
    }

    /// The model's shape.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The mapping the weights are read from, for NUMA placement
    /// (`MappedFile::place_span`); `None` when they were copied.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    pub fn mapped_file(&self) -> Option<&pool_topo::MappedFile> {
        match &self.storage {
            Storage::Mapped(file) => Some(file),
            _ => None,
        }
    }

    fn try_values(&self) -> Result<&[f32], LoadError> {
        match &self.storage {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::Mapped(_) | Storage::HugePages(_) => {
                let bytes = match &self.storage {
                    Storage::Mapped(file) => &file.as_bytes()[HEADER_BYTES..],
                    Storage::HugePages(copy) => &copy.as_bytes()[HEADER_BYTES..],
                    Storage::Owned(_) => unreachable!("matched above"),
                };
                // SAFETY: every bit pattern is a valid f32; `align_to` only
                // hands out the aligned middle, and the prefix is checked
                // empty below (a page-aligned mapping + 28 bytes is 4-byte
                // aligned).
                let (prefix, values, _) = unsafe { bytes.align_to::<f32>() };
                if !prefix.is_empty() || values.len() < self.layout.total {
                    return Err(LoadError::Unsupported("a mapping not aligned for f32"));
                }
                Ok(values)
            }
            Storage::Owned(values) => Ok(values),
        }
    }

    /// Every f32 after the header, in file order (what a token reads, and
    /// a little more: the RoPE tables, the embedding rows not used).
    pub fn weights(&self) -> &[f32] {
        self.values()
    }

    /// Every value after the header.
    fn values(&self) -> &[f32] {
        self.try_values()
            .expect("alignment checked when the model was opened")
    }

    /// A fresh decode state (KV cache included) for this model.
    pub fn new_state(&self) -> State {
        let c = &self.config;
        let cache = c.n_layers * c.seq_len * c.kv_dim();
        State {
            x: vec![0.0; c.dim],
            xb: vec![0.0; c.dim],
            xb2: vec![0.0; c.dim],
            q: vec![0.0; c.dim],
            hb: vec![0.0; c.hidden_dim],
            hb2: vec![0.0; c.hidden_dim],
            att: vec![0.0; c.n_heads * c.seq_len],
            key_cache: vec![0.0; cache],
            value_cache: vec![0.0; cache],
            logits: vec![0.0; c.vocab_size],
            rope: vec![(0.0, 0.0); c.head_size() / 2],
        }
    }

    /// Runs `token` at position `pos` and returns the logits. Every
    /// position before `pos` must have been run in this `state`.
    ///
    /// # Panics
    ///
    /// If `token` is outside the vocabulary or `pos` past `seq_len`.
    pub fn forward<'s>(
        &self,
        exec: &dyn RowParallel,
        state: &'s mut State,
        token: u32,
        pos: usize,
    ) -> &'s [f32] {
        let c = self.config;
        let (dim, hidden, kv_dim, hs) = (c.dim, c.hidden_dim, c.kv_dim(), c.head_size());
        assert!(
            (token as usize) < c.vocab_size,
            "token {token} outside the vocabulary of {}",
            c.vocab_size
        );
        assert!(pos < c.seq_len, "position {pos} past seq_len {}", c.seq_len);
        let w = self.values();
        let l = &self.layout;
        let s = state;
        let row = token as usize * dim;
        s.x.copy_from_slice(&w[l.embedding.start + row..][..dim]);
        rope_table(&mut s.rope, pos, hs);
        for layer in 0..c.n_layers {
            let at = |range: &std::ops::Range<usize>, size: usize| {
                &w[range.start + layer * size..][..size]
            };
            rms_norm(&mut s.xb, &s.x, at(&l.rms_att, dim));
            // Q, K and V in one job; K and V straight into the cache.
            let cache_at = (layer * c.seq_len + pos) * kv_dim;
            {
                let k = &mut s.key_cache[cache_at..cache_at + kv_dim];
                let v = &mut s.value_cache[cache_at..cache_at + kv_dim];
                matvec_many(
                    exec,
                    &s.xb,
                    &mut [
                        (at(&l.wq, dim * dim), &mut s.q[..]),
                        (at(&l.wk, kv_dim * dim), k),
                        (at(&l.wv, kv_dim * dim), v),
                    ],
                );
            }
            rope(&mut s.q, &s.rope);
            rope(&mut s.key_cache[cache_at..cache_at + kv_dim], &s.rope);
            attention(exec, &c, layer, pos, s);
            matvec_many(exec, &s.xb, &mut [(at(&l.wo, dim * dim), &mut s.xb2[..])]);
            add(&mut s.x, &s.xb2);
            rms_norm(&mut s.xb, &s.x, at(&l.rms_ffn, dim));
            swiglu(
                exec,
                &s.xb,
                at(&l.w1, hidden * dim),
                at(&l.w3, hidden * dim),
                &mut s.hb,
                &mut s.hb2,
            );
            matvec_many(exec, &s.hb, &mut [(at(&l.w2, dim * hidden), &mut s.xb[..])]);
            add(&mut s.x, &s.xb);
        }
        rms_norm(&mut s.xb, &s.x, &w[l.rms_final.clone()]);
        matvec_many(
            exec,
            &s.xb,
            &mut [(&w[l.classifier.clone()], &mut s.logits[..])],
        );
        &s.logits
    }

    /// Greedy decoding from BOS for `steps` tokens (at most `seq_len`):
    /// `on_token(pos, token)` sees each as it comes. Returns the tokens.
    pub fn generate(
        &self,
        exec: &dyn RowParallel,
        steps: usize,
        mut on_token: impl FnMut(usize, u32),
    ) -> Vec<u32> {
        let mut state = self.new_state();
        let mut token = BOS;
        let mut tokens = Vec::with_capacity(steps);
        for pos in 0..steps.min(self.config.seq_len) {
            token = argmax_on(exec, self.forward(exec, &mut state, token, pos));
            on_token(pos, token);
            tokens.push(token);
        }
        tokens
    }
}

/// A decode state: activations, the KV cache, the logits.
#[derive(Debug, Clone)]
pub struct State {
    x: Vec<f32>,
    xb: Vec<f32>,
    xb2: Vec<f32>,
    q: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    att: Vec<f32>,
    key_cache: Vec<f32>,
    value_cache: Vec<f32>,
    logits: Vec<f32>,
    /// (cos, sin) of this position for each pair of a head.
    rope: Vec<(f32, f32)>,
}

/// The first index of the largest logit. NaN never wins, wherever it
/// stands; with no number at all (empty, or every logit NaN) the answer
/// is 0.
///
/// ```
/// use pool_matvec::llama2::argmax;
/// assert_eq!(argmax(&[f32::NAN, 1.0, 3.0, 3.0]), 2);
/// assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
/// ```
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|(_, top)| v > top) {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

/// [`argmax`] as a row job: each range's best folded into one atomic key
/// ordered by value, then by lower index, so the answer is the serial
/// one whatever the ranges.
pub fn argmax_on(exec: &dyn RowParallel, logits: &[f32]) -> u32 {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Larger for a larger value, then for a lower index; NaN lowest.
    fn key(value: f32, index: usize) -> u64 {
        let ordered = if value.is_nan() {
            0
        } else {
            // -0.0 and 0.0 compare equal: one key for both.
            let bits = (value + 0.0).to_bits();
            if bits >> 31 == 1 {
                !bits
            } else {
                bits | 1 << 31
            }
        };
        (u64::from(ordered) << 32) | u64::from(u32::MAX - index as u32)
    }
    if logits.is_empty() {
        return 0;
    }
    assert!(logits.len() <= u32::MAX as usize, "{} logits", logits.len());
    // Relaxed: a max over values; the job's barrier publishes the result.
    let best = AtomicU64::new(0);
    exec.run_rows(logits.len(), &|start, end| {
        let local = start + argmax(&logits[start..end]) as usize;
        best.fetch_max(key(logits[local], local), Ordering::Relaxed);
    });
    let best = best.into_inner();
    if best >> 32 == 0 {
        return 0; // every logit NaN: as `argmax`
    }
    u32::MAX - (best as u32)
}

/// `out[i] = w_i x` for matrices sharing the input `x`, as one row job.
fn matvec_many(exec: &dyn RowParallel, x: &[f32], parts: &mut [(&[f32], &mut [f32])]) {
    let cols = x.len();
    let callbacks: Vec<_> = parts
        .iter()
        .map(|(w, out)| {
            assert_eq!(w.len(), out.len() * cols, "matrix of {} rows", out.len());
            let w = *w;
            move |start: usize, out: &mut [f32]| {
                let rows = &w[start * cols..(start + out.len()) * cols];
                matvec_f32_fast(None, rows, x, out);
            }
        })
        .collect();
    let mut outputs: Vec<(&mut [f32], &RowsIntoFn<'_, f32>)> = parts
        .iter_mut()
        .zip(&callbacks)
        .map(|((_, out), f)| (&mut **out, f as &RowsIntoFn<'_, f32>))
        .collect();
    exec.run_many_into(&mut outputs);
}

/// `out = silu(w1 x) * (w3 x)`, gate and up of a row range computed
/// together by one participant, so the product needs no pass of its own.
fn swiglu(
    exec: &dyn RowParallel,
    x: &[f32],
    w1: &[f32],
    w3: &[f32],
    out: &mut [f32],
    up: &mut [f32],
) {
    let cols = x.len();
    let (out, up) = (DisjointRows::new(out), DisjointRows::new(up));
    exec.run_rows(out.len(), &|start, end| {
        // SAFETY: run_rows hands out each range once.
        let (gate, up) = unsafe { (out.rows(start, end), up.rows(start, end)) };
        let rows = start * cols..end * cols;
        matvec_f32_fast(None, &w1[rows.clone()], x, gate);
        matvec_f32_fast(None, &w3[rows], x, up);
        for (g, u) in gate.iter_mut().zip(up.iter()) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
    });
}

/// Every head's attention at `pos` over the cache, one job, heads pulled
/// as rows; writes `s.xb`.
fn attention(exec: &dyn RowParallel, c: &Config, layer: usize, pos: usize, s: &mut State) {
    let (hs, kv_dim, seq) = (c.head_size(), c.kv_dim(), c.seq_len);
    let group = c.n_heads / c.n_kv_heads;
    let layer_cache = layer * seq * kv_dim;
    let keys = &s.key_cache[layer_cache..layer_cache + (pos + 1) * kv_dim];
    let values = &s.value_cache[layer_cache..layer_cache + (pos + 1) * kv_dim];
    let q = &s.q;
    let out = DisjointRows::new(&mut s.xb);
    let att = DisjointRows::new(&mut s.att);
    let scale = 1.0 / (hs as f32).sqrt();
    exec.run_rows(c.n_heads, &|first, end| {
        for h in first..end {
            // SAFETY: run_rows hands out each head once; head h owns its
            // slices of `xb` and `att`.
            let (out, att) = unsafe {
                (
                    out.rows(h * hs, (h + 1) * hs),
                    att.rows(h * seq, h * seq + pos + 1),
                )
            };
            let q = &q[h * hs..(h + 1) * hs];
            let kv_offset = (h / group) * hs;
            for (t, a) in att.iter_mut().enumerate() {
                let k = &keys[t * kv_dim + kv_offset..][..hs];
                // The SIMD kernel's fixed order: the same bits on every
                // tier and thread count, no dependent chain of adds.
                *a = dot_fast(q, k) * scale;
            }
            softmax(att);
            out.fill(0.0);
            for (t, a) in att.iter().enumerate() {
                let v = &values[t * kv_dim + kv_offset..][..hs];
                for (o, v) in out.iter_mut().zip(v) {
                    *o += a * v;
                }
            }
        }
    });
}

/// `out = weight * x / rms(x)`, llama2.c's RMSNorm.
fn rms_norm(out: &mut [f32], x: &[f32], weight: &[f32]) {
    let ss = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32 + 1e-5;
    let scale = 1.0 / ss.sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(weight) {
        *o = w * (scale * x);
    }
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

/// (cos, sin) of `pos * 10000^(-2i / head_size)` for each pair `i`.
fn rope_table(table: &mut [(f32, f32)], pos: usize, head_size: usize) {
    for (i, entry) in table.iter_mut().enumerate() {
        let freq = 1.0 / 10000f32.powf((2 * i) as f32 / head_size as f32);
        let (sin, cos) = (pos as f32 * freq).sin_cos();
        *entry = (cos, sin);
    }
}

/// Rotates each pair of every head of `v` by the position's angles.
fn rope(v: &mut [f32], table: &[(f32, f32)]) {
    let head_size = 2 * table.len();
    for head in v.chunks_exact_mut(head_size) {
        for (pair, (cos, sin)) in head.chunks_exact_mut(2).zip(table) {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos - b * sin;
            pair[1] = a * sin + b * cos;
        }
    }
}

//! The decode loop: llama's forward pass on any row executor, read top to
//! bottom as the model: embedding, then per layer RMSNorm, Q/K/V, RoPE,
//! attention over the KV cache, the output projection, RMSNorm, a SwiGLU
//! FFN; then the final norm and the logits.
//!
//! Every matvec is one call to a typed weight matrix
//! ([`pool_matvec::Weights::rows_into`]) inside a row job, whatever the
//! file format and tensor types: this file never branches on either.
//! - Q, K and V are one job (`run_many_into`: one barrier for three
//!   matrices, K and V written straight into the cache); the FFN's gate,
//!   up and SwiGLU product are one job (each range's gate and up rows
//!   computed together); the heads' attention is one job; the output
//!   projection, the FFN's down projection and the classifier are one
//!   each: `5 x layers + 1` dispatches per token. Greedy decoding folds
//!   each range of logits into the argmax inside the classifier's job.
//! - Each input vector is quantized once for the matrices that read it
//!   ([`PreparedInput`]).
//! - Every matvec has one fixed order of arithmetic for its type, every
//!   head is computed by one participant in position order, SwiGLU and
//!   the softmax use `pool-matvec`'s exponential (the same bits on every
//!   SIMD tier), and the argmax folds ranges by value then index: the
//!   logits and the tokens are bit-identical for every executor and
//!   thread count.

use pool_matvec::{
    add_weighted_rows, dot_fast_rows, silu_mul, softmax, InputBuffers, PreparedInput, RowParallel,
    RowsInto, RowsIntoFn, WeightType,
};

use crate::model::{MatrixRef, Model};
use crate::sampling::BestLogit;

/// One head's attention scratch: its scores over the positions, and its
/// output.
#[derive(Debug, Clone)]
struct Head {
    scores: Vec<f32>,
    out: Vec<f32>,
}

/// A decode state: activations, the KV cache, the logits.
#[derive(Debug, Clone)]
pub struct State {
    x: Vec<f32>,
    xb: Vec<f32>,
    xb2: Vec<f32>,
    q: Vec<f32>,
    hb: Vec<f32>,
    heads: Vec<Head>,
    key_cache: Vec<f32>,
    value_cache: Vec<f32>,
    logits: Vec<f32>,
    /// (cos, sin) of this position for each rotated pair of a head.
    rope: Vec<(f32, f32)>,
    /// The storage each job's quantized input is made in, reused: a
    /// token allocates nothing after the first.
    inputs: InputBuffers,
    /// Positions the cache holds.
    positions: usize,
}

impl State {
    /// Positions this state's KV cache holds.
    pub fn positions(&self) -> usize {
        self.positions
    }
}

/// Rows computed per sub-range of the fused gate/up job (the up rows wait
/// in a buffer of this many on the stack).
const SWIGLU_ROWS: usize = 64;

impl Model {
    /// A fresh decode state for up to `positions` positions (at most the
    /// model's `seq_len`; a GGUF model's context can be far longer than a
    /// decode needs, and the cache grows with it).
    pub fn new_state(&self, positions: usize) -> State {
        let c = &self.config;
        let positions = positions.clamp(1, c.seq_len);
        let cache = c.n_layers * positions * c.kv_dim();
        State {
            x: vec![0.0; c.dim],
            xb: vec![0.0; c.dim],
            xb2: vec![0.0; c.dim],
            q: vec![0.0; c.dim],
            hb: vec![0.0; c.hidden_dim],
            heads: vec![
                Head {
                    scores: vec![0.0; positions],
                    out: vec![0.0; c.head_size()],
                };
                c.n_heads
            ],
            key_cache: vec![0.0; cache],
            value_cache: vec![0.0; cache],
            logits: vec![0.0; c.vocab_size],
            rope: vec![(0.0, 0.0); self.rope.dims / 2],
            inputs: InputBuffers::default(),
            positions,
        }
    }

    /// Runs `token` at position `pos` and returns the logits. Every
    /// position before `pos` must have been run in this `state`.
    ///
    /// # Panics
    ///
    /// If `token` is outside the vocabulary or `pos` past the state's
    /// positions.
    pub fn forward<'s>(
        &self,
        exec: &dyn RowParallel,
        state: &'s mut State,
        token: u32,
        pos: usize,
    ) -> &'s [f32] {
        self.layers(exec, state, token, pos);
        self.classify(exec, state, |_, _| {});
        &state.logits
    }

    /// [`Model::forward`] and the greedy argmax of its logits, in the
    /// classifier's job: each range of logits is folded into the argmax
    /// by whoever computed it, so the token needs no dispatch and no pass
    /// over the logits of its own. The logits are left in `state` as
    /// `forward` leaves them; the token is `argmax` of them.
    fn forward_greedy(
        &self,
        exec: &dyn RowParallel,
        state: &mut State,
        token: u32,
        pos: usize,
    ) -> u32 {
        self.layers(exec, state, token, pos);
        let best = BestLogit::new(state.logits.len());
        self.classify(exec, state, |start, rows| best.fold(start, rows));
        best.index()
    }

    /// The logits of `state.xb` into `state.logits`, each range passed to
    /// `fold` by whoever computed it.
    fn classify(&self, exec: &dyn RowParallel, s: &mut State, fold: impl Fn(usize, &[f32]) + Sync) {
        let input = PreparedInput::new_in(&s.xb, [self.output.ty], std::mem::take(&mut s.inputs));
        let output = self.weights(&self.output);
        // Without its bytes (`run_rows_into_reading`): beside foreign load
        // the classifier runs on the workers still awake, and the pool's
        // trials leave it out (forked in their inline epochs too). Waking a
        // parked one for it, stories15M's 9.8 MB of its 19 MB token,
        // measured 0.80-0.97x the best of rayon and serial in the busy
        // settings of `pool bench --scenarios`, against 0.95-1.01x without.
        exec.run_rows_into(&mut s.logits, |start, rows| {
            output.rows_into(&input, start, rows);
            fold(start, rows);
        });
        s.inputs = input.into_buffers();
    }

    /// Every layer and the final norm for `token` at `pos`: the classifier's
    /// input in `state.xb`.
    fn layers(&self, exec: &dyn RowParallel, state: &mut State, token: u32, pos: usize) {
        let c = self.config;
        let kv_dim = c.kv_dim();
        assert!(
            (token as usize) < c.vocab_size,
            "token {token} outside the vocabulary of {}",
            c.vocab_size
        );
        assert!(
            pos < state.positions,
            "position {pos} past the state's {} positions",
            state.positions
        );
        let s = state;
        self.weights(&self.embedding)
            .row_into(token as usize, &mut s.x);
        rope_table(&mut s.rope, pos, self.rope.base, self.rope.dims);
        for (layer, l) in self.layers.iter().enumerate() {
            rms_norm(&mut s.xb, &s.x, &l.attn_norm, self.rms_eps);
            // Q, K and V in one job; K and V straight into the cache.
            let cache_at = (layer * s.positions + pos) * kv_dim;
            {
                let k = &mut s.key_cache[cache_at..cache_at + kv_dim];
                let v = &mut s.value_cache[cache_at..cache_at + kv_dim];
                self.matvecs(
                    exec,
                    &s.xb,
                    [(&l.wq, &mut s.q[..]), (&l.wk, k), (&l.wv, v)],
                    &mut s.inputs,
                );
            }
            rope(&mut s.q, &s.rope, c.head_size());
            rope(
                &mut s.key_cache[cache_at..cache_at + kv_dim],
                &s.rope,
                c.head_size(),
            );
            self.attention(exec, layer, pos, s);
            self.matvecs(exec, &s.xb, [(&l.wo, &mut s.xb2[..])], &mut s.inputs);
            add(&mut s.x, &s.xb2);
            rms_norm(&mut s.xb, &s.x, &l.ffn_norm, self.rms_eps);
            self.swiglu(exec, &s.xb, [&l.gate, &l.up], &mut s.hb, &mut s.inputs);
            self.matvecs(exec, &s.hb, [(&l.down, &mut s.xb[..])], &mut s.inputs);
            add(&mut s.x, &s.xb);
        }
        rms_norm(&mut s.xb, &s.x, &self.final_norm, self.rms_eps);
    }

    /// Greedy decoding from the model's BOS token for `steps` tokens (at
    /// most `seq_len`): `on_token(pos, token)` sees each as it comes.
    /// Returns the tokens.
    pub fn generate(
        &self,
        exec: &dyn RowParallel,
        steps: usize,
        on_token: impl FnMut(usize, u32),
    ) -> Vec<u32> {
        self.generate_after(exec, &[], steps, on_token)
    }

    /// Greedy decoding after a prompt: the BOS token, then `prompt`'s
    /// tokens (their logits are not sampled), then `steps` generated
    /// tokens, all within `seq_len`. `on_token(pos, token)` sees each
    /// generated token with its position. Returns the generated tokens.
    ///
    /// # Panics
    ///
    /// If a prompt token is outside the vocabulary.
    pub fn generate_after(
        &self,
        exec: &dyn RowParallel,
        prompt: &[u32],
        steps: usize,
        mut on_token: impl FnMut(usize, u32),
    ) -> Vec<u32> {
        let seq_len = self.config.seq_len;
        let mut state = self.new_state(prompt.len() + steps);
        let mut token = self.bos;
        let mut pos = 0;
        // The prompt: run each token, keep only the cache.
        for &next in prompt {
            if pos + 1 >= seq_len {
                break;
            }
            self.forward(exec, &mut state, token, pos);
            token = next;
            pos += 1;
        }
        let mut tokens = Vec::with_capacity(steps);
        while tokens.len() < steps && pos < seq_len {
            token = self.forward_greedy(exec, &mut state, token, pos);
            on_token(pos, token);
            tokens.push(token);
            pos += 1;
        }
        tokens
    }

    /// `out_i = m_i x` for matrices sharing the input `x`, as one row job:
    /// `x` quantized once for all of them, in `inputs`' storage. The parts
    /// stay on the stack, so the job allocates nothing.
    fn matvecs<const N: usize>(
        &self,
        exec: &dyn RowParallel,
        x: &[f32],
        parts: [(&MatrixRef, &mut [f32]); N],
        inputs: &mut InputBuffers,
    ) {
        let input = PreparedInput::new_in(
            x,
            parts.each_ref().map(|(m, _)| m.ty),
            std::mem::take(inputs),
        );
        {
            let matrices = parts.each_ref().map(|(m, _)| self.weights(m));
            let callbacks = matrices.each_ref().map(|w| {
                let input = &input;
                move |start: usize, out: &mut [f32]| w.rows_into(input, start, out)
            });
            let mut outputs: [(&mut [f32], &RowsIntoFn<'_, f32>); N] = {
                let mut callbacks = callbacks.iter();
                parts.map(|(_, out)| {
                    let f = callbacks.next().expect("one callback per part");
                    (out, f as &RowsIntoFn<'_, f32>)
                })
            };
            let bytes = matrices.iter().map(|w| w.bytes().len()).sum();
            exec.run_many_into_reading(&mut outputs, bytes);
        }
        *inputs = input.into_buffers();
    }

    /// `out = silu(gate x) * (up x)`, a range's gate and up rows computed
    /// together by one participant, so the product needs no pass of its
    /// own.
    fn swiglu(
        &self,
        exec: &dyn RowParallel,
        x: &[f32],
        [gate, up]: [&MatrixRef; 2],
        out: &mut [f32],
        inputs: &mut InputBuffers,
    ) {
        let input = PreparedInput::new_in(x, [gate.ty, up.ty], std::mem::take(inputs));
        let (gate, up) = (self.weights(gate), self.weights(up));
        let bytes = gate.bytes().len() + up.bytes().len();
        exec.run_rows_into_reading(out, bytes, |start, rows| {
            let mut ups = [0.0f32; SWIGLU_ROWS];
            for (k, g) in rows.chunks_mut(SWIGLU_ROWS).enumerate() {
                let first = start + k * SWIGLU_ROWS;
                let u = &mut ups[..g.len()];
                gate.rows_into(&input, first, g);
                up.rows_into(&input, first, u);
                silu_mul(g, u);
            }
        });
        *inputs = input.into_buffers();
    }

    /// Every head's attention at `pos` over the cache, one job, heads
    /// pulled as rows; writes `s.xb`.
    fn attention(&self, exec: &dyn RowParallel, layer: usize, pos: usize, s: &mut State) {
        let c = &self.config;
        let (hs, kv_dim) = (c.head_size(), c.kv_dim());
        let group = c.n_heads / c.n_kv_heads;
        let layer_cache = layer * s.positions * kv_dim;
        let keys = &s.key_cache[layer_cache..layer_cache + (pos + 1) * kv_dim];
        let values = &s.value_cache[layer_cache..layer_cache + (pos + 1) * kv_dim];
        let q = &s.q;
        let scale = 1.0 / (hs as f32).sqrt();
        exec.run_rows_into(&mut s.heads, |first, heads| {
            for (i, head) in heads.iter_mut().enumerate() {
                let h = first + i;
                let q = &q[h * hs..(h + 1) * hs];
                let kv_offset = (h / group) * hs;
                let scores = &mut head.scores[..pos + 1];
                // The SIMD kernel's fixed order: the same bits on every
                // tier and thread count.
                dot_fast_rows(q, &keys[kv_offset..], kv_dim, scores);
                for a in scores.iter_mut() {
                    *a *= scale;
                }
                softmax(scores);
                head.out.fill(0.0);
                // Each element's products in `t` order: the scalar loop's
                // bits on every tier.
                add_weighted_rows(&mut head.out, scores, &values[kv_offset..], kv_dim);
            }
        });
        for (h, head) in s.heads.iter().enumerate() {
            s.xb[h * hs..(h + 1) * hs].copy_from_slice(&head.out);
        }
    }

    /// The weight types a token's matvecs read, for reports.
    pub fn matvec_types(&self) -> Vec<WeightType> {
        self.tensor_types().into_iter().map(|(t, _)| t).collect()
    }
}

/// `out = weight * x / rms(x)`, llama's RMSNorm.
fn rms_norm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let ss = sum_of_squares(x) / x.len() as f32 + eps;
    let scale = 1.0 / ss.sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(weight) {
        *o = w * (scale * x);
    }
}

/// Lanes of [`sum_of_squares`].
const SQUARE_LANES: usize = 16;

/// `sum(v * v)` in sixteen lanes (lane `i`: the values at `i mod 16`, in
/// order), the lanes added in a fixed tree, then the tail in order: the
/// same bits on every tier and thread count, with a vector of additions
/// in flight instead of one chain (a 768-value sum in one chain took about
/// 1 µs, twice per layer, on the caller while the workers wait).
fn sum_of_squares(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; SQUARE_LANES];
    let mut chunks = x.chunks_exact(SQUARE_LANES);
    for chunk in &mut chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            *lane += v * v;
        }
    }
    let mut width = SQUARE_LANES / 2;
    while width > 0 {
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
        width /= 2;
    }
    chunks
        .remainder()
        .iter()
        .fold(lanes[0], |sum, v| sum + v * v)
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

/// (cos, sin) of `pos * base^(-2i / dims)` for each rotated pair `i`.
fn rope_table(table: &mut [(f32, f32)], pos: usize, base: f32, dims: usize) {
    for (i, entry) in table.iter_mut().enumerate() {
        let freq = 1.0 / base.powf((2 * i) as f32 / dims as f32);
        let (sin, cos) = (pos as f32 * freq).sin_cos();
        *entry = (cos, sin);
    }
}

/// Rotates the first `2 * table.len()` values of every head of `v` in
/// adjacent pairs by the position's angles (llama's "normal" RoPE).
fn rope(v: &mut [f32], table: &[(f32, f32)], head_size: usize) {
    for head in v.chunks_exact_mut(head_size) {
        for (pair, (cos, sin)) in head.chunks_exact_mut(2).zip(table) {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos - b * sin;
            pair[1] = a * sin + b * cos;
        }
    }
}

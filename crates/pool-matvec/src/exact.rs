//! The bit-exact f32 kernels: each row summed in plain index order.
//!
//! `out[o] = sum_j w[o*cols + j] * x[j]`, computed four rows at a time with
//! four independent accumulators (instruction-level parallelism without
//! reordering any row's sum), no FMA, no horizontal reduction. The result
//! is bit-identical to the naive scalar loop, for every shape, thread count
//! and grain: a row is never split, and its sum never depends on who
//! computes it.

use crate::executor::{gated, Executor};

use crate::disjoint::DisjointRows;
use crate::shape::check_matvec;

/// `out = W x` for the first `out.len()` rows of the row-major `w`
/// (`cols = x.len()`), bit-identical to the naive loop. Serial below the
/// [`should_parallelize`](crate::should_parallelize) gate or without a pool.
///
/// # Panics
///
/// If `w` holds fewer than `out.len() * x.len()` values (message names the
/// shapes), in release builds too.
///
/// ```
/// let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 3 rows x 2 cols
/// let mut out = [0.0; 3];
/// pool_matvec::matvec_rows(None, &w, &[1.0, 0.5], &mut out);
/// assert_eq!(out, [2.0, 5.0, 8.0]);
/// ```
pub fn matvec_rows(exec: impl Executor, w: &[f32], x: &[f32], out: &mut [f32]) {
    let (rows, cols) = (out.len(), x.len());
    check_matvec("matvec_rows", w.len(), rows, cols);
    let out = DisjointRows::new(out);
    gated(&exec, rows, cols).run_rows(rows, &|start, end| {
        // SAFETY: run_rows hands out each range once (DisjointRows invariant).
        let out = unsafe { out.rows(start, end) };
        rows_exact(&w[start * cols..end * cols], x, out);
    });
}

/// Two input vectors, one pass over the weights: `out1 = W x1`,
/// `out2 = W x2`, each bit-identical to [`matvec_rows`] on that input (for
/// speculative verification, which scores two candidates per weight read).
///
/// # Panics
///
/// If `x1`/`x2` or `out1`/`out2` differ in length, or `w` is too short.
pub fn matvec_rows2(
    exec: impl Executor,
    w: &[f32],
    x1: &[f32],
    x2: &[f32],
    out1: &mut [f32],
    out2: &mut [f32],
) {
    assert!(
        x1.len() == x2.len() && out1.len() == out2.len(),
        "matvec_rows2: x1 has {} values and x2 {}; out1 has {} and out2 {}: each pair must match",
        x1.len(),
        x2.len(),
        out1.len(),
        out2.len()
    );
    let (rows, cols) = (out1.len(), x1.len());
    check_matvec("matvec_rows2", w.len(), rows, cols);
    let (out1, out2) = (DisjointRows::new(out1), DisjointRows::new(out2));
    gated(&exec, rows, cols).run_rows(rows, &|start, end| {
        // SAFETY: run_rows hands out each range once (DisjointRows invariant).
        let (o1, o2) = unsafe { (out1.rows(start, end), out2.rows(start, end)) };
        rows_exact2(&w[start * cols..end * cols], x1, x2, o1, o2);
    });
}

/// The naive reference: one row at a time, `acc += w * x` in `j` order.
/// Every exact kernel here must match it bit for bit.
pub fn matvec_naive(w: &[f32], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    check_matvec("matvec_naive", w.len(), out.len(), cols);
    for (o, value) in out.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for j in 0..cols {
            acc += w[o * cols + j] * x[j];
        }
        *value = acc;
    }
}

/// `out.len()` rows of `w` (exactly `out.len() * x.len()` values).
#[inline]
fn rows_exact(w: &[f32], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    if cols == 0 {
        out.fill(0.0);
        return;
    }
    let mut blocks = out.chunks_exact_mut(4);
    let mut w_blocks = w.chunks_exact(4 * cols);
    for (o, w4) in (&mut blocks).zip(&mut w_blocks) {
        let (r0, rest) = w4.split_at(cols);
        let (r1, rest) = rest.split_at(cols);
        let (r2, r3) = rest.split_at(cols);
        let (mut a0, mut a1, mut a2, mut a3) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        for j in 0..cols {
            let xj = x[j];
            a0 += r0[j] * xj;
            a1 += r1[j] * xj;
            a2 += r2[j] * xj;
            a3 += r3[j] * xj;
        }
        o.copy_from_slice(&[a0, a1, a2, a3]);
    }
    for (o, row) in blocks
        .into_remainder()
        .iter_mut()
        .zip(w_blocks.remainder().chunks_exact(cols))
    {
        let mut acc = 0.0f32;
        for j in 0..cols {
            acc += row[j] * x[j];
        }
        *o = acc;
    }
}

/// Two vectors, two rows at a time (four accumulators in flight).
#[inline]
fn rows_exact2(w: &[f32], x1: &[f32], x2: &[f32], out1: &mut [f32], out2: &mut [f32]) {
    let cols = x1.len();
    if cols == 0 {
        out1.fill(0.0);
        out2.fill(0.0);
        return;
    }
    let rows = out1.len();
    let mut o = 0;
    while o + 2 <= rows {
        let r0 = &w[o * cols..(o + 1) * cols];
        let r1 = &w[(o + 1) * cols..(o + 2) * cols];
        let (mut a0, mut a1, mut b0, mut b1) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        for j in 0..cols {
            a0 += r0[j] * x1[j];
            a1 += r1[j] * x1[j];
            b0 += r0[j] * x2[j];
            b1 += r1[j] * x2[j];
        }
        out1[o] = a0;
        out1[o + 1] = a1;
        out2[o] = b0;
        out2[o + 1] = b1;
        o += 2;
    }
    if o < rows {
        let row = &w[o * cols..(o + 1) * cols];
        let (mut a, mut b) = (0.0f32, 0.0f32);
        for j in 0..cols {
            a += row[j] * x1[j];
            b += row[j] * x2[j];
        }
        out1[o] = a;
        out2[o] = b;
    }
}

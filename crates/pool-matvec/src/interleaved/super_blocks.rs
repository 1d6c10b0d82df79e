//! What the k-quants' interleaved layouts share: a group of sixteen rows'
//! super-blocks rearranged byte by byte ([`SuperBlocks::at`] says where
//! each goes), put back for an embedding row or a tier without the
//! kernels, and read through the common group loop.

use crate::k_quants::{BlockQ8K, QK_K};
use crate::WeightType;

use super::{group_bytes, groups_into, INTERLEAVED_ROWS, STREAMS};

/// `N` whole groups' rows against `x`, group `k` into `out[k]`.
pub(super) type GroupsFn<const N: usize> =
    fn([&[u8]; N], usize, &[BlockQ8K], [&mut [f32; INTERLEAVED_ROWS]; N]);

/// The largest super-block (Q6_K's 210 bytes).
const MAX_BLOCK: usize = 256;

/// A k-quant's interleaved layout.
pub(super) trait SuperBlocks {
    /// The type.
    const TY: WeightType;
    /// Its row-major super-block.
    type Block;
    /// Where byte `i` of row `r`'s super-block `b` sits in a group of
    /// `per_row` super-blocks.
    fn at(per_row: usize, b: usize, i: usize, r: usize) -> usize;
    /// A super-block from its bytes as the file has them.
    fn from_bytes(raw: &[u8]) -> Self::Block;
    /// `out` (256 values) from one super-block.
    fn dequantize_into(block: &Self::Block, out: &mut [f32]);
    /// Row-major rows through the tier's kernel.
    fn rows(blocks: &[Self::Block], per_row: usize, x: &[BlockQ8K], out: &mut [f32]);
    /// This CPU's kernel over `N` interleaved groups, where it has one.
    fn kernel<const N: usize>() -> Option<GroupsFn<N>>;
}

/// Rearranges whole groups of a row-major `L::TY` matrix in place (the
/// tail rows stay as they are).
pub(super) fn interleave<L: SuperBlocks>(bytes: &mut [u8], per_row: usize) {
    let (size, block) = (group_bytes(L::TY, per_row), L::TY.block_bytes());
    let mut row_major = vec![0u8; size];
    for group in bytes.chunks_exact_mut(size) {
        row_major.copy_from_slice(group);
        for r in 0..INTERLEAVED_ROWS {
            for b in 0..per_row {
                let src = &row_major[(r * per_row + b) * block..][..block];
                for (i, &byte) in src.iter().enumerate() {
                    group[L::at(per_row, b, i, r)] = byte;
                }
            }
        }
    }
}

/// Row `r`'s super-block `b` as the file had it.
fn row_block<L: SuperBlocks>(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    r: usize,
    b: usize,
) -> L::Block {
    let block = L::TY.block_bytes();
    let whole = rows / INTERLEAVED_ROWS * INTERLEAVED_ROWS;
    let mut raw = [0u8; MAX_BLOCK];
    let raw = &mut raw[..block];
    if r >= whole {
        raw.copy_from_slice(&bytes[(r * per_row + b) * block..][..block]);
    } else {
        let (g, lane) = (r / INTERLEAVED_ROWS, r % INTERLEAVED_ROWS);
        let size = group_bytes(L::TY, per_row);
        let group = &bytes[g * size..][..size];
        for (i, byte) in raw.iter_mut().enumerate() {
            *byte = group[L::at(per_row, b, i, lane)];
        }
    }
    L::from_bytes(raw)
}

/// Rows `first..first + count` as row-major super-blocks.
fn row_blocks<L: SuperBlocks>(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    first: usize,
    count: usize,
) -> Vec<L::Block> {
    (first..first + count)
        .flat_map(|r| (0..per_row).map(move |b| row_block::<L>(bytes, rows, per_row, r, b)))
        .collect()
}

/// Row `r` as f32 values (an embedding lookup), super-block by
/// super-block: nothing allocated.
pub(super) fn row_into<L: SuperBlocks>(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    r: usize,
    out: &mut [f32],
) {
    for (b, out) in out.chunks_exact_mut(QK_K).take(per_row).enumerate() {
        L::dequantize_into(&row_block::<L>(bytes, rows, per_row, r, b), out);
    }
}

/// `out[i] = row(start + i) . x` over an interleaved `L::TY` matrix, on
/// the calling thread: each row's bits are the row-major kernels'.
pub(super) fn rows_into<L: SuperBlocks>(
    bytes: &[u8],
    rows: usize,
    per_row: usize,
    x: &[BlockQ8K],
    start: usize,
    out: &mut [f32],
) {
    let one = L::kernel::<1>().unwrap_or(row_major_groups::<L, 1>);
    let streams = L::kernel::<STREAMS>().unwrap_or(row_major_groups::<L, STREAMS>);
    groups_into(
        group_bytes(L::TY, per_row),
        bytes,
        rows,
        start,
        out,
        |g, out| one(g, per_row, x, out),
        |g, out| streams(g, per_row, x, out),
        |from, out| {
            let n = out.len();
            L::rows(
                &row_blocks::<L>(bytes, rows, per_row, from, n),
                per_row,
                x,
                out,
            );
        },
    );
}

/// Each group put back in row-major order through the tier's kernel.
fn row_major_groups<L: SuperBlocks, const N: usize>(
    groups: [&[u8]; N],
    per_row: usize,
    x: &[BlockQ8K],
    out: [&mut [f32; INTERLEAVED_ROWS]; N],
) {
    for (group, out) in groups.into_iter().zip(out) {
        let blocks = row_blocks::<L>(group, INTERLEAVED_ROWS, per_row, 0, INTERLEAVED_ROWS);
        L::rows(&blocks, per_row, x, out);
    }
}

//! Typed weight matrices: a matrix's bytes in any supported GGUF type,
//! used in place (a mapped file's tensor, a copy of it, or a model's own
//! vectors), and the one call a decoder makes per matvec.
//!
//! A decoder never branches on formats or SIMD tiers: it holds [`Weights`]
//! and calls [`Weights::rows_into`] with a [`PreparedInput`], which
//! quantizes the input vector once per activation form its readers need
//! (Q8_0 for Q8_0 and Q4_0 weights, Q8_K for the k-quants).

use std::fmt;

use half::f16;

use crate::fast::matvec_f32_fast;
use crate::k_quants::{self, BlockQ4K, BlockQ6K, BlockQ8K, QK_K};
use crate::q4_0::BlockQ4_0;
use crate::q8_0::{ActivationExtras, BlockQ8_0, QK8_0};

/// A weight matrix's element type, as GGUF (ggml) stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum WeightType {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// Blocks of 32: an f16 scale and 32 `i8`.
    Q8_0,
    /// Blocks of 32: an f16 scale and 32 4-bit values.
    Q4_0,
    /// Super-blocks of 256: 4-bit values with 6-bit sub-block scales and mins.
    Q4_K,
    /// Super-blocks of 256: 6-bit values with `i8` group scales.
    Q6_K,
}

impl WeightType {
    /// Every supported type.
    pub const ALL: [WeightType; 6] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_K,
        WeightType::Q6_K,
    ];

    /// The type's id in GGUF's tensor infos (`ggml_type`).
    pub fn ggml_id(self) -> u32 {
        match self {
            WeightType::F32 => 0,
            WeightType::F16 => 1,
            WeightType::Q4_0 => 2,
            WeightType::Q8_0 => 8,
            WeightType::Q4_K => 12,
            WeightType::Q6_K => 14,
        }
    }

    /// The supported type with GGUF id `id`, if any.
    pub fn from_ggml_id(id: u32) -> Option<WeightType> {
        WeightType::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// ggml's name of a type id, supported or not (`Q5_0`, `IQ2_XXS`,
    /// ...), for error messages; `None` for an id ggml does not define.
    pub fn ggml_name(id: u32) -> Option<&'static str> {
        const NAMES: [&str; 40] = [
            "F32",
            "F16",
            "Q4_0",
            "Q4_1",
            "Q4_2",
            "Q4_3",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "Q8_1",
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ3_XXS",
            "IQ1_S",
            "IQ4_NL",
            "IQ3_S",
            "IQ2_S",
            "IQ4_XS",
            "I8",
            "I16",
            "I32",
            "I64",
            "F64",
            "IQ1_M",
            "BF16",
            "Q4_0_4_4",
            "Q4_0_4_8",
            "Q4_0_8_8",
            "TQ1_0",
            "TQ2_0",
            "IQ4_NL_4_4",
            "IQ4_NL_4_8",
            "IQ4_NL_8_8",
            "MXFP4",
        ];
        NAMES.get(id as usize).copied()
    }

    /// The type's name as ggml prints it (`Q4_K`, ...).
    pub fn name(self) -> &'static str {
        WeightType::ggml_name(self.ggml_id()).expect("every supported id is named")
    }

    /// Values per block (1 for the float types).
    pub fn block_values(self) -> usize {
        match self {
            WeightType::F32 | WeightType::F16 => 1,
            WeightType::Q8_0 | WeightType::Q4_0 => QK8_0,
            WeightType::Q4_K | WeightType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 => 2,
            WeightType::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
            WeightType::Q4_0 => std::mem::size_of::<BlockQ4_0>(),
            WeightType::Q4_K => std::mem::size_of::<BlockQ4K>(),
            WeightType::Q6_K => std::mem::size_of::<BlockQ6K>(),
        }
    }

    /// Bytes of a row of `cols` values; `None` when `cols` is not whole
    /// blocks (or overflows).
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        cols.is_multiple_of(self.block_values())
            .then(|| (cols / self.block_values()).checked_mul(self.block_bytes()))
            .flatten()
    }

    /// The alignment the type's blocks need in memory.
    fn align(self) -> usize {
        match self {
            WeightType::F32 => std::mem::align_of::<f32>(),
            WeightType::F16 => std::mem::align_of::<f16>(),
            WeightType::Q8_0 => std::mem::align_of::<BlockQ8_0>(),
            WeightType::Q4_0 => std::mem::align_of::<BlockQ4_0>(),
            WeightType::Q4_K => std::mem::align_of::<BlockQ4K>(),
            WeightType::Q6_K => std::mem::align_of::<BlockQ6K>(),
        }
    }

    /// The activation form the type's kernel reads.
    fn form(self) -> Form {
        match self {
            WeightType::F32 | WeightType::F16 => Form::F32,
            WeightType::Q8_0 => Form::Q8_0,
            WeightType::Q4_0 => Form::Q8_0ForQ4_0,
            WeightType::Q4_K | WeightType::Q6_K => Form::Q8K,
        }
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes cannot be a weight matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsError {
    /// `cols` is not a whole number of the type's blocks.
    PartialBlock {
        /// The type.
        ty: WeightType,
        /// The row length asked for.
        cols: usize,
    },
    /// The bytes are not `rows` rows of `cols` values of the type.
    Size {
        /// Bytes needed (`None`: more than the address space).
        needed: Option<usize>,
        /// Bytes given.
        found: usize,
    },
    /// The bytes do not start at an address the type's blocks may sit at.
    Misaligned {
        /// The type.
        ty: WeightType,
        /// The alignment it needs.
        align: usize,
    },
    /// Rows of this type are never interleaved (only Q8_0, Q4_0, Q4_K and
    /// Q6_K are).
    NotInterleavable {
        /// The type.
        ty: WeightType,
    },
}

impl fmt::Display for WeightsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightsError::PartialBlock { ty, cols } => write!(
                f,
                "a row of {cols} values is not whole {ty} blocks of {}",
                ty.block_values()
            ),
            WeightsError::Size {
                needed: Some(needed),
                found,
            } => write!(f, "{found} bytes where the shape needs {needed}"),
            WeightsError::Size {
                needed: None,
                found,
            } => {
                write!(f, "{found} bytes for a shape larger than memory")
            }
            WeightsError::Misaligned { ty, align } => {
                write!(f, "{ty} data not aligned to {align} bytes")
            }
            WeightsError::NotInterleavable { ty } => {
                write!(
                    f,
                    "{ty} rows are not interleaved (Q8_0, Q4_0, Q4_K and Q6_K are)"
                )
            }
        }
    }
}

impl std::error::Error for WeightsError {}

/// A `rows x cols` row-major weight matrix in one of the [`WeightType`]s,
/// borrowed from memory (no copy, no dequantized copy).
///
/// # Invariants
///
/// `bytes` is exactly `rows` rows of `ty.row_bytes(cols)` bytes, aligned
/// for `ty`'s blocks (checked in [`Weights::new`]), so it can be read as a
/// slice of `ty`'s blocks (plain data: every bit pattern is a value).
#[derive(Clone, Copy)]
pub struct Weights<'a> {
    ty: WeightType,
    rows: usize,
    cols: usize,
    bytes: &'a [u8],
    /// Rows interleaved by sixteen (`interleaved.rs`), not row-major.
    interleaved: bool,
}

impl fmt::Debug for Weights<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Weights({} x {} {})", self.rows, self.cols, self.ty)
    }
}

impl<'a> Weights<'a> {
    /// `bytes` as a `rows x cols` matrix of `ty` (GGUF's layout: each row
    /// `cols` values, rows one after another).
    pub fn new(
        ty: WeightType,
        rows: usize,
        cols: usize,
        bytes: &'a [u8],
    ) -> Result<Weights<'a>, WeightsError> {
        let row = ty
            .row_bytes(cols)
            .ok_or(WeightsError::PartialBlock { ty, cols })?;
        let needed = row.checked_mul(rows);
        if needed != Some(bytes.len()) {
            return Err(WeightsError::Size {
                needed,
                found: bytes.len(),
            });
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(ty.align()) {
            return Err(WeightsError::Misaligned {
                ty,
                align: ty.align(),
            });
        }
        Ok(Weights {
            ty,
            rows,
            cols,
            bytes,
            interleaved: false,
        })
    }

    /// `bytes` as a `rows x cols` Q8_0, Q4_0, Q4_K or Q6_K matrix with its rows
    /// interleaved by sixteen, as [`crate::interleave_rows`] leaves it: the
    /// same values as the row-major matrix it came from, and from
    /// [`Weights::rows_into`] the same bits.
    ///
    /// # Errors
    ///
    /// If `ty` is not Q8_0, Q4_0, Q4_K or Q6_K, `cols` is not whole blocks, or
    /// `bytes` is not `rows` rows of them.
    pub fn interleaved(
        ty: WeightType,
        rows: usize,
        cols: usize,
        bytes: &'a [u8],
    ) -> Result<Weights<'a>, WeightsError> {
        crate::interleaved::blocks_per_row(ty, rows, cols, bytes.len())?;
        Ok(Weights {
            ty,
            rows,
            cols,
            bytes,
            interleaved: true,
        })
    }

    /// Whether the rows are interleaved ([`Weights::interleaved`]).
    pub fn is_interleaved(&self) -> bool {
        self.interleaved
    }

    /// f32 values as a `rows x cols` matrix.
    ///
    /// # Panics
    ///
    /// If `values.len() != rows * cols`.
    pub fn from_f32(rows: usize, cols: usize, values: &'a [f32]) -> Weights<'a> {
        assert_eq!(
            Some(values.len()),
            rows.checked_mul(cols),
            "Weights::from_f32: {} values for {rows} x {cols}",
            values.len()
        );
        // SAFETY: any initialised f32s are initialised bytes; the slice
        // covers exactly `values`' memory, borrowed for 'a.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        Weights::new(WeightType::F32, rows, cols, bytes).expect("f32 values are a valid matrix")
    }

    /// The element type.
    pub fn ty(&self) -> WeightType {
        self.ty
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The matrix's bytes (what a matvec streams).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The blocks of rows `start..end`, as `B`.
    fn blocks<B>(&self, start: usize, end: usize) -> &'a [B] {
        let row = self.bytes.len() / self.rows.max(1);
        let bytes = &self.bytes[start * row..end * row];
        debug_assert_eq!(std::mem::size_of::<B>(), self.ty.block_bytes());
        // SAFETY: the type invariants: the bytes are whole blocks of `B`
        // (the caller picks `B` by `self.ty`), aligned for it, initialised,
        // and `B` is plain data; the slice stays inside `self.bytes`.
        unsafe {
            std::slice::from_raw_parts(
                bytes.as_ptr().cast::<B>(),
                bytes.len() / std::mem::size_of::<B>(),
            )
        }
    }

    /// `out[i] = row(start + i) . x` for `i < out.len()`, on the calling
    /// thread: the body of a row job.
    ///
    /// # Panics
    ///
    /// If `x` was not prepared for this type or has another length, or the
    /// rows run past the matrix.
    pub fn rows_into(&self, x: &PreparedInput<'_>, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        assert!(end <= self.rows, "rows {start}..{end} of {}", self.rows);
        assert_eq!(
            x.len(),
            self.cols,
            "input of {} for {} columns",
            x.len(),
            self.cols
        );
        match self.ty {
            WeightType::F32 => {
                matvec_f32_fast(None, self.blocks::<f32>(start, end), x.f32, out);
            }
            WeightType::F16 => {
                let rows: &[f16] = self.blocks(start, end);
                let mut each_row = |row: &mut [f32]| {
                    for (r, o) in out.iter_mut().enumerate() {
                        for (v, h) in row.iter_mut().zip(&rows[r * self.cols..][..self.cols]) {
                            *v = h.to_f32();
                        }
                        *o = crate::fast::dot_fast(row, x.f32);
                    }
                };
                if self.cols <= F16_STACK_ROW {
                    each_row(&mut [0.0f32; F16_STACK_ROW][..self.cols]);
                } else {
                    F16_ROW.with_borrow_mut(|row| {
                        row.resize(self.cols, 0.0);
                        each_row(row);
                    });
                }
            }
            WeightType::Q8_0 | WeightType::Q4_0 if self.interleaved => {
                let (q, extras) = x.q8_0.as_ref().expect("input prepared for Q8_0 or Q4_0");
                crate::interleaved::rows_into(
                    self.ty,
                    self.bytes,
                    self.rows,
                    self.cols / QK8_0,
                    &extras.with(q),
                    start,
                    out,
                );
            }
            WeightType::Q8_0 => {
                let (q, extras) = x.q8_0.as_ref().expect("input prepared for Q8_0");
                let per_row = self.cols / QK8_0;
                crate::q8_0::rows_into(
                    &crate::Serial,
                    self.blocks(start, end),
                    per_row,
                    &extras.with(q),
                    out,
                );
            }
            WeightType::Q4_0 => {
                let (q, extras) = x.q8_0.as_ref().expect("input prepared for Q4_0");
                let per_row = self.cols / QK8_0;
                crate::q4_0::rows_into(
                    &crate::Serial,
                    self.blocks(start, end),
                    per_row,
                    &extras.with(q),
                    out,
                );
            }
            WeightType::Q4_K | WeightType::Q6_K if self.interleaved => {
                let xq = x.q8k.as_deref().expect("input prepared for Q4_K or Q6_K");
                crate::interleaved::k_quant_rows_into(
                    self.ty,
                    self.bytes,
                    self.rows,
                    self.cols / QK_K,
                    xq,
                    start,
                    out,
                );
            }
            WeightType::Q4_K => {
                let xq = x.q8k.as_deref().expect("input prepared for Q4_K");
                k_quants::q4_k_rows(self.blocks(start, end), self.cols / QK_K, xq, out);
            }
            WeightType::Q6_K => {
                let xq = x.q8k.as_deref().expect("input prepared for Q6_K");
                k_quants::q6_k_rows(self.blocks(start, end), self.cols / QK_K, xq, out);
            }
        }
    }

    /// Row `r` as f32 values (an embedding lookup).
    ///
    /// # Panics
    ///
    /// If `r` is not a row or `out.len() != cols`.
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        assert_eq!(out.len(), self.cols, "a row has {} values", self.cols);
        match self.ty {
            WeightType::F32 => out.copy_from_slice(self.blocks::<f32>(r, r + 1)),
            WeightType::F16 => {
                for (v, h) in out.iter_mut().zip(self.blocks::<f16>(r, r + 1)) {
                    *v = h.to_f32();
                }
            }
            WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_K | WeightType::Q6_K
                if self.interleaved =>
            {
                crate::interleaved::row_into(
                    self.ty,
                    self.bytes,
                    self.rows,
                    self.cols / self.ty.block_values(),
                    r,
                    out,
                );
            }
            WeightType::Q8_0 => crate::q8_0::dequantize_q8_0_into(self.blocks(r, r + 1), out),
            WeightType::Q4_0 => crate::q4_0::dequantize_q4_0_into(self.blocks(r, r + 1), out),
            WeightType::Q4_K => k_quants::dequantize_q4_k_into(self.blocks(r, r + 1), out),
            WeightType::Q6_K => k_quants::dequantize_q6_k_into(self.blocks(r, r + 1), out),
        }
    }
}

/// F16 rows up to this many columns are converted on the stack (16 KiB),
/// so a row job allocates nothing, whichever thread runs it first.
const F16_STACK_ROW: usize = 4096;

thread_local! {
    /// One wider F16 row as f32, per thread: allocated once per thread
    /// and reused (no callback of `rows_into` calls it re-entrantly).
    static F16_ROW: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The activation forms, one per family of kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    F32,
    Q8_0,
    Q8_0ForQ4_0,
    Q8K,
}

/// An input vector, quantized once into each form the matrices that read
/// it need: Q8_0 blocks for Q8_0 and Q4_0 weights, Q8_K super-blocks for
/// Q4_K and Q6_K.
///
/// A decode prepares a few inputs per layer; [`PreparedInput::new_in`]
/// makes one in the storage the last one gave back
/// ([`PreparedInput::into_buffers`]), so that a token allocates nothing.
///
/// ```
/// use pool_matvec::{InputBuffers, PreparedInput, WeightType, Weights};
///
/// let m = Weights::from_f32(2, 32, &[1.0; 64]);
/// let mut buffers = InputBuffers::default();
/// let mut out = [0.0; 2];
/// for step in 0..3 {
///     let x = [step as f32; 32];
///     let input = PreparedInput::new_in(&x, [WeightType::Q8_0, m.ty()], buffers);
///     m.rows_into(&input, 0, &mut out);
///     buffers = input.into_buffers();
///     assert_eq!(out, [32.0 * step as f32; 2]);
/// }
/// ```
pub struct PreparedInput<'a> {
    f32: &'a [f32],
    q8_0: Option<(Vec<BlockQ8_0>, ActivationExtras)>,
    q8k: Option<Vec<BlockQ8K>>,
    /// The storage of the forms not asked for, kept to give back.
    spare: InputBuffers,
}

/// Storage for the quantized forms of a [`PreparedInput`], reused from
/// one input to the next: [`PreparedInput::new_in`] takes it,
/// [`PreparedInput::into_buffers`] gives it back. Empty by default (no
/// allocation until a form is first made).
#[derive(Default)]
pub struct InputBuffers {
    q8_0: Vec<BlockQ8_0>,
    extras: ActivationExtras,
    q8k: Vec<BlockQ8K>,
}

/// A clone is empty: the storage holds no value a later input reads.
impl Clone for InputBuffers {
    fn clone(&self) -> InputBuffers {
        InputBuffers::default()
    }
}

impl fmt::Debug for InputBuffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputBuffers")
            .field("q8_0_blocks", &self.q8_0.capacity())
            .field("q8k_blocks", &self.q8k.capacity())
            .finish()
    }
}

impl<'a> PreparedInput<'a> {
    /// Prepares `x` for matrices of the types in `types`.
    ///
    /// # Panics
    ///
    /// If `x`'s length is not whole blocks of a quantized type asked for.
    pub fn new(x: &'a [f32], types: impl IntoIterator<Item = WeightType>) -> PreparedInput<'a> {
        PreparedInput::new_in(x, types, InputBuffers::default())
    }

    /// [`PreparedInput::new`] in `buffers`' storage: no allocation once
    /// they have held inputs of this length and these forms. The same
    /// values and bits as `new`.
    ///
    /// # Panics
    ///
    /// As [`PreparedInput::new`].
    pub fn new_in(
        x: &'a [f32],
        types: impl IntoIterator<Item = WeightType>,
        mut buffers: InputBuffers,
    ) -> PreparedInput<'a> {
        let mut forms = [false; 4];
        for ty in types {
            forms[ty.form() as usize] = true;
        }
        let q8_0 = (forms[Form::Q8_0 as usize] || forms[Form::Q8_0ForQ4_0 as usize]).then(|| {
            let mut q = std::mem::take(&mut buffers.q8_0);
            crate::q8_0::quantize_q8_0_into(x, &mut q);
            let mut extras = std::mem::take(&mut buffers.extras);
            extras.fill(&q, forms[Form::Q8_0ForQ4_0 as usize]);
            (q, extras)
        });
        let q8k = forms[Form::Q8K as usize].then(|| {
            let mut q = std::mem::take(&mut buffers.q8k);
            k_quants::quantize_q8_k_into(x, &mut q);
            q
        });
        PreparedInput {
            f32: x,
            q8_0,
            q8k,
            spare: buffers,
        }
    }

    /// The storage of this input's forms, for the next
    /// [`PreparedInput::new_in`].
    pub fn into_buffers(self) -> InputBuffers {
        let mut buffers = self.spare;
        if let Some((q, extras)) = self.q8_0 {
            buffers.q8_0 = q;
            buffers.extras = extras;
        }
        if let Some(q) = self.q8k {
            buffers.q8k = q;
        }
        buffers
    }

    /// The input's length.
    pub fn len(&self) -> usize {
        self.f32.len()
    }

    /// Whether the input is empty.
    pub fn is_empty(&self) -> bool {
        self.f32.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::XorShift;

    fn bytes_of<T>(blocks: &[T]) -> &[u8] {
        // SAFETY: test data of plain `repr(C)` blocks without padding.
        unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast(), std::mem::size_of_val(blocks)) }
    }

    #[test]
    fn an_input_made_in_reused_buffers_gives_a_fresh_inputs_bits() {
        let mut rng = XorShift(31);
        let mut buffers = InputBuffers::default();
        // Lengths and forms changing from one input to the next, as a
        // decode's inputs do (768 then 2048 values, Q8_0 then Q8_K).
        let steps: [(usize, &[WeightType]); 6] = [
            (512, &[WeightType::Q4_0]),
            (256, &[WeightType::Q8_0, WeightType::Q6_K]),
            (1024, &[WeightType::Q4_K]),
            (256, &[WeightType::Q4_0, WeightType::Q8_0]),
            (768, &[WeightType::Q8_0]),
            (512, &[WeightType::Q6_K, WeightType::Q4_0]),
        ];
        for (cols, types) in steps {
            let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
            let values: Vec<f32> = (0..3 * cols).map(|_| rng.uniform()).collect();
            let fresh = PreparedInput::new(&x, types.iter().copied());
            let reused = PreparedInput::new_in(&x, types.iter().copied(), buffers);
            // Both inputs through one matrix, its bytes borrowed from its
            // blocks (so aligned for them).
            let same_bits = |bytes: &[u8], ty: WeightType| {
                let m = Weights::new(ty, 3, cols, bytes).unwrap();
                let (mut a, mut b) = ([0.0f32; 3], [0.0f32; 3]);
                m.rows_into(&fresh, 0, &mut a);
                m.rows_into(&reused, 0, &mut b);
                assert_eq!(
                    a.map(f32::to_bits),
                    b.map(f32::to_bits),
                    "{ty}, {cols} columns"
                );
            };
            for &ty in types {
                match ty {
                    WeightType::Q8_0 => same_bits(bytes_of(&crate::quantize_q8_0(&values)), ty),
                    WeightType::Q4_0 => same_bits(bytes_of(&crate::quantize_q4_0(&values)), ty),
                    WeightType::Q4_K => same_bits(bytes_of(&crate::quantize_q4_k(&values)), ty),
                    _ => same_bits(bytes_of(&crate::quantize_q6_k(&values)), ty),
                }
            }
            buffers = reused.into_buffers();
        }
    }

    #[test]
    fn every_type_agrees_with_its_dequantized_rows_to_rounding() {
        let (rows, cols) = (5, 512);
        let mut rng = XorShift(21);
        let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform()).collect();
        let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
        let f16s: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
        let (q8, q4) = (crate::quantize_q8_0(&values), crate::quantize_q4_0(&values));
        let (q4k, q6k) = (crate::quantize_q4_k(&values), crate::quantize_q6_k(&values));
        let matrices = [
            Weights::from_f32(rows, cols, &values),
            Weights::new(WeightType::F16, rows, cols, bytes_of(&f16s)).unwrap(),
            Weights::new(WeightType::Q8_0, rows, cols, bytes_of(&q8)).unwrap(),
            Weights::new(WeightType::Q4_0, rows, cols, bytes_of(&q4)).unwrap(),
            Weights::new(WeightType::Q4_K, rows, cols, bytes_of(&q4k)).unwrap(),
            Weights::new(WeightType::Q6_K, rows, cols, bytes_of(&q6k)).unwrap(),
        ];
        let input = PreparedInput::new(&x, matrices.iter().map(|m| m.ty()));
        for m in &matrices {
            let mut out = vec![0.0; rows];
            m.rows_into(&input, 0, &mut out);
            let mut row = vec![0.0; cols];
            for (r, &got) in out.iter().enumerate() {
                m.row_into(r, &mut row);
                let want: f32 = row.iter().zip(&x).map(|(a, b)| a * b).sum();
                assert!(
                    (got - want).abs() < 0.3,
                    "{}: row {r}: {got} vs {want}",
                    m.ty()
                );
            }
            // Any range of rows gives those rows' bits.
            let mut tail = vec![0.0; 2];
            m.rows_into(&input, 3, &mut tail);
            assert_eq!(tail[0].to_bits(), out[3].to_bits(), "{}", m.ty());
        }
    }

    #[test]
    fn bad_shapes_and_alignment_are_errors() {
        let data = vec![0u32; 64];
        // SAFETY: plain integers as bytes.
        let bytes: &[u8] = unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), 256) };
        assert!(matches!(
            Weights::new(WeightType::Q4_K, 1, 100, bytes),
            Err(WeightsError::PartialBlock { .. })
        ));
        assert!(matches!(
            Weights::new(WeightType::F32, 2, 64, bytes),
            Err(WeightsError::Size {
                needed: Some(512),
                found: 256
            })
        ));
        assert!(matches!(
            Weights::new(WeightType::F32, 1, 63, &bytes[1..253]),
            Err(WeightsError::Misaligned { .. })
        ));
        assert!(matches!(
            Weights::new(WeightType::F32, usize::MAX, 64, bytes),
            Err(WeightsError::Size { needed: None, .. })
        ));
        assert_eq!(WeightType::from_ggml_id(6), None);
        assert_eq!(WeightType::ggml_name(6), Some("Q5_0"));
        assert_eq!(WeightType::from_ggml_id(12), Some(WeightType::Q4_K));
    }
}

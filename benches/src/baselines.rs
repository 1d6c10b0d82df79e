//! Reference implementations, each the simplest correct form of its idea.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_utils::CachePadded;
use pool_core::Pool;
use pool_matvec::decode::{DecodeExecutor, Input, Matrix};
use pool_matvec::{
    grain_for, matvec_f32_fast, matvec_q4_0_prepared, matvec_q8_0_prepared, BlockQ4_0, BlockQ8_0,
    RowParallel,
};
use rayon::prelude::*;

/// Two threads bouncing one cache line: the caller writes an odd value, the
/// partner answers with the next even one. One `round_trip` is the floor
/// for any fork-join between two cores.
pub struct PingPong {
    line: Arc<CachePadded<AtomicU64>>,
    stop: Arc<AtomicBool>,
    partner: Option<JoinHandle<()>>,
    next: u64,
}

impl PingPong {
    /// Starts the partner thread (it spins until dropped).
    pub fn new() -> PingPong {
        let line = Arc::new(CachePadded::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (line.clone(), stop.clone());
        let partner = std::thread::spawn(move || {
            let mut seen = 0;
            while !s.load(Ordering::Relaxed) {
                let v = l.load(Ordering::Acquire);
                if v != seen && v % 2 == 1 {
                    seen = v + 1;
                    l.store(v + 1, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        PingPong {
            line,
            stop,
            partner: Some(partner),
            next: 1,
        }
    }

    /// One round trip of the line.
    #[inline]
    pub fn round_trip(&mut self) {
        let ask = self.next;
        self.line.store(ask, Ordering::Release);
        while self.line.load(Ordering::Acquire) != ask + 1 {
            std::hint::spin_loop();
        }
        self.next += 2;
    }
}

impl Default for PingPong {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(partner) = self.partner.take() {
            let _ = partner.join();
        }
    }
}

type Job = *const (dyn Fn(usize, usize) + Sync + 'static);

/// A minimal spin pool: one worker spinning on one epoch counter, no park,
/// no panic handling, no limited jobs. The reference for what a fork-join
/// costs with nothing extra.
pub struct SpinPool {
    shared: Arc<SpinShared>,
    worker: Option<JoinHandle<()>>,
}

struct SpinShared {
    epoch: CachePadded<AtomicUsize>,
    done: CachePadded<AtomicUsize>,
    job: CachePadded<std::cell::UnsafeCell<Option<Job>>>,
    stop: AtomicBool,
}

// SAFETY: `job` is written by the caller only while the worker waits for the
// next epoch, and read by the worker only between seeing that epoch
// (Acquire) and publishing `done` (Release).
unsafe impl Sync for SpinShared {}
// SAFETY: as above; the pointer is to a `Sync` closure.
unsafe impl Send for SpinShared {}

impl SpinPool {
    /// Starts the one worker.
    pub fn new() -> SpinPool {
        let shared = Arc::new(SpinShared {
            epoch: CachePadded::new(AtomicUsize::new(0)),
            done: CachePadded::new(AtomicUsize::new(0)),
            job: CachePadded::new(std::cell::UnsafeCell::new(None)),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let worker = std::thread::spawn(move || {
            let mut seen = 0;
            loop {
                let epoch = s.epoch.load(Ordering::Acquire);
                if epoch == seen {
                    if s.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::hint::spin_loop();
                    continue;
                }
                seen = epoch;
                // SAFETY: the caller wrote the job before the epoch store we
                // acquired, and waits for `done` before touching it again.
                if let Some(job) = unsafe { *s.job.get() } {
                    // SAFETY: the caller's closure lives until `done`.
                    unsafe { (*job)(0, 2) };
                }
                s.done.store(epoch, Ordering::Release);
            }
        });
        SpinPool {
            shared,
            worker: Some(worker),
        }
    }

    /// Runs `f(0, 2)` on the worker and `f(1, 2)` here.
    #[inline]
    pub fn run(&self, f: impl Fn(usize, usize) + Sync) {
        self.run_dyn(&f);
    }

    #[inline]
    fn run_dyn(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let s = &self.shared;
        // SAFETY: lifetime erasure only; we wait for `done` below.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), Job>(f) };
        // SAFETY: the worker is waiting for a new epoch: not reading `job`.
        unsafe { *s.job.get() = Some(job) };
        let epoch = s.epoch.load(Ordering::Relaxed) + 1;
        s.epoch.store(epoch, Ordering::Release);
        f(1, 2);
        while s.done.load(Ordering::Acquire) != epoch {
            std::hint::spin_loop();
        }
    }
}

impl Default for SpinPool {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// Reads every byte of `data` on `pool` (or serially), the way a matvec
/// streams its weights, but with no arithmetic to speak of: the bandwidth
/// ceiling. Returns a checksum so the reads cannot be optimised away.
pub fn read_ceiling(pool: Option<&Pool>, data: &[f32]) -> u32 {
    const ROW: usize = 4096;
    let rows = data.len() / ROW;
    let total = AtomicU64::new(0);
    let read = |start: usize, end: usize| {
        let sum = sum_bits(&data[start * ROW..end * ROW]);
        total.fetch_add(u64::from(sum), Ordering::Relaxed);
    };
    match pool {
        Some(pool) => pool.run_rows(rows, &read),
        None => read(0, rows),
    }
    total.load(Ordering::Relaxed) as u32
}

/// [`read_ceiling`] over any bytes (quantized blocks, say): their
/// 4-byte-aligned middle, read as `f32` bits. Returns a checksum; the
/// bytes read are `read_ceiling_bytes_len(data)`.
pub fn read_ceiling_bytes(pool: Option<&Pool>, data: &[u8]) -> u32 {
    read_ceiling(pool, aligned_words(data))
}

/// The bytes [`read_ceiling_bytes`] reads of `data`: whole rows of 4096
/// words.
pub fn read_ceiling_bytes_len(data: &[u8]) -> usize {
    aligned_words(data).len() / 4096 * 4096 * 4
}

fn aligned_words(data: &[u8]) -> &[f32] {
    // SAFETY: every bit pattern is a valid `f32`, and `align_to` returns
    // only the correctly aligned middle.
    unsafe { data.align_to::<f32>().1 }
}

/// Wrapping sum of the values' bits: one load and one integer add per 16
/// (AVX-512, eight accumulators) or 8 values (AVX2, four), so the loop
/// never limits the read. The widest loads this CPU has: a ceiling read
/// with narrower loads than the kernels use understates what memory gives
/// (measured: the AVX-512 f32 kernel at 106 % of an AVX2 ceiling).
///
/// The slice is read as [`STREAMS`] streams at once, 512 bytes of each in
/// turn ([`for_stream_chunks`]): on an Intel Xeon (2 vCPUs) one stream read
/// 9.9 GB/s from DRAM on one thread and 18-19 on two, whatever the
/// prefetch distance, four streams 14-15 and 26-28; the kernels, which
/// read two rows or two groups of rows at once, read above a one-stream
/// ceiling (the f32 matvec at 114-118 %).
fn sum_bits(data: &[f32]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512 F was detected just above.
        return unsafe { sum_bits_avx512(data) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { sum_bits_avx2(data) };
    }
    data.iter().fold(0u32, |s, v| s.wrapping_add(v.to_bits()))
}

/// Streams a ceiling read keeps going at once.
const STREAMS: usize = 4;

/// Values read from one stream before the next: 512 bytes.
const STEP: usize = 128;

/// Calls `f` on the chunks of [`STEP`] values of `data` in the order a
/// ceiling reads them: [`STREAMS`] equal parts in turn, a chunk of each,
/// then the chunks after the parts. Returns the values after the last
/// chunk.
#[inline(always)]
fn for_stream_chunks(data: &[f32], mut f: impl FnMut(&[f32; STEP])) -> &[f32] {
    let part = data.len() / STREAMS / STEP * STEP;
    let mut at = 0;
    while at < part {
        for s in 0..STREAMS {
            f(data[s * part + at..][..STEP]
                .try_into()
                .expect("STEP values"));
        }
        at += STEP;
    }
    let rest = data[STREAMS * part..].chunks_exact(STEP);
    let tail = rest.remainder();
    for chunk in rest {
        f(chunk.try_into().expect("STEP values"));
    }
    tail
}

/// # Safety
///
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_bits_avx512(data: &[f32]) -> u32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 8];
    let tail = for_stream_chunks(data, |chunk| {
        prefetch_ahead(chunk.as_ptr(), 512);
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `chunk` holds 128 values; lane group k is 16 of them.
            let v = unsafe { _mm512_loadu_si512(chunk.as_ptr().add(16 * k).cast()) };
            *a = _mm512_add_epi32(*a, v);
        }
    });
    let sum = acc
        .iter()
        .fold(_mm512_setzero_si512(), |s, a| _mm512_add_epi32(s, *a));
    let body = _mm512_reduce_add_epi32(sum) as u32;
    tail.iter().fold(body, |s, v| s.wrapping_add(v.to_bits()))
}

/// Prefetches the lines of `len` bytes 4 KiB past `at` into L1 and 12 KiB
/// past it into L2, as the kernels do (`pool_matvec`'s f32 and quantized
/// kernels): a hardware prefetcher stops at each 4 KiB page, and a ceiling
/// read without the software prefetch the kernels use would understate
/// what memory gives them (measured: the f32 decode at 105 % of a ceiling
/// read without the L1 prefetch; the L2 one raised the ceiling over
/// quantized blocks ~5-10 % in a probe).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(at: *const f32, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
    let ahead = at.cast::<i8>().wrapping_add(4096);
    let mut line = 0;
    while line < len {
        // SAFETY: prefetching is a hint with no preconditions; the address
        // is computed with `wrapping_add`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line)) };
        // SAFETY: as above.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line + 8192)) };
        line += 64;
    }
}

/// # Safety
///
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_bits_avx2(data: &[f32]) -> u32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    let tail = for_stream_chunks(data, |chunk| {
        prefetch_ahead(chunk.as_ptr(), 512);
        for (k, a) in acc.iter_mut().enumerate() {
            for quarter in 0..STEP / 32 {
                // SAFETY: `chunk` holds 128 values; lane group k of each
                // 32 is 8 of them.
                let v =
                    unsafe { _mm256_loadu_si256(chunk.as_ptr().add(32 * quarter + 8 * k).cast()) };
                *a = _mm256_add_epi32(*a, v);
            }
        }
    });
    let mut lanes = [0u32; 8];
    let sum = _mm256_add_epi32(
        _mm256_add_epi32(acc[0], acc[1]),
        _mm256_add_epi32(acc[2], acc[3]),
    );
    // SAFETY: `lanes` is 32 writable bytes.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sum) };
    let body = lanes.iter().fold(0u32, |s, v| s.wrapping_add(*v));
    tail.iter().fold(body, |s, v| s.wrapping_add(v.to_bits()))
}

/// `out = W x` with the fast f32 kernel on rayon `par_chunks_mut`, the grain
/// chosen as for the pool: the migration an engine would write. Each chunk
/// runs the very kernel the pool runs (serially), so only the executor
/// differs.
pub fn rayon_matvec_f32(pool: &rayon::ThreadPool, w: &[f32], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    let grain = grain_for(out.len(), pool.current_num_threads());
    pool.install(|| {
        out.par_chunks_mut(grain)
            .enumerate()
            .for_each(|(chunk, o)| {
                let start = chunk * grain;
                matvec_f32_fast(None, &w[start * cols..(start + o.len()) * cols], x, o);
            });
    });
}

/// `out = W xq` for Q8_0 weights on rayon `par_chunks_mut`, the pool's
/// grain, each chunk running the very prepared kernel the pool runs.
pub fn rayon_matvec_q8_0(
    pool: &rayon::ThreadPool,
    w: &[BlockQ8_0],
    xq: &[BlockQ8_0],
    out: &mut [f32],
) {
    rayon_blocks(pool, w, xq, out, |p, w, x, o| {
        matvec_q8_0_prepared(p, w, x, o)
    });
}

/// The same for Q4_0 weights.
pub fn rayon_matvec_q4_0(
    pool: &rayon::ThreadPool,
    w: &[BlockQ4_0],
    xq: &[BlockQ8_0],
    out: &mut [f32],
) {
    rayon_blocks(pool, w, xq, out, |p, w, x, o| {
        matvec_q4_0_prepared(p, w, x, o)
    });
}

/// A prepared quantized matvec: `matvec_q8_0_prepared` or `_q4_0_`.
type PreparedKernel<B> = fn(Option<&Pool>, &[B], &[BlockQ8_0], &mut [f32]);

/// A quantized prepared matvec on rayon: `kernel` serially on each chunk
/// of rows (`xq.len()` blocks per row).
fn rayon_blocks<B: Sync>(
    pool: &rayon::ThreadPool,
    w: &[B],
    xq: &[BlockQ8_0],
    out: &mut [f32],
    kernel: PreparedKernel<B>,
) {
    let per_row = xq.len();
    let grain = grain_for(out.len(), pool.current_num_threads());
    pool.install(|| {
        out.par_chunks_mut(grain)
            .enumerate()
            .for_each(|(chunk, o)| {
                let start = chunk * grain;
                kernel(
                    None,
                    &w[start * per_row..(start + o.len()) * per_row],
                    xq,
                    o,
                );
            });
    });
}

/// The decode workload on a rayon pool: one `par_chunks_mut` per matrix
/// (rayon has no fused multi-matrix job), run inside the pool.
pub struct RayonExecutor(pub rayon::ThreadPool);

impl RayonExecutor {
    /// A rayon pool of `threads` threads.
    pub fn new(threads: usize) -> RayonExecutor {
        RayonExecutor(
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads.max(1))
                .build()
                .expect("build the rayon pool"),
        )
    }
}

/// Row jobs on rayon: the same grains as the pool (`grain_for` over the
/// pool's width), one `par_iter` task per grain inside `install`.
// SAFETY: chunk `c` covers rows `c * grain..min((c + 1) * grain, rows)`:
// disjoint, non-empty, inside `0..rows`; rayon's `for_each` calls each
// index once, and `install` returns after every call.
unsafe impl pool_matvec::RowParallel for RayonExecutor {
    fn run_rows(&self, rows: usize, f: &pool_matvec::RowFn<'_>) {
        if rows == 0 {
            return;
        }
        let grain = grain_for(rows, self.0.current_num_threads());
        let chunks = rows.div_ceil(grain);
        if chunks == 1 {
            return f(0, rows);
        }
        self.0.install(|| {
            (0..chunks)
                .into_par_iter()
                .for_each(|c| f(c * grain, ((c + 1) * grain).min(rows)))
        });
    }
}

impl DecodeExecutor for RayonExecutor {
    fn matvec_many(&self, mats: &[&Matrix], x: &Input<'_>, outs: &mut [&mut [f32]]) {
        let threads = self.0.current_num_threads();
        self.0.install(|| {
            for (m, out) in mats.iter().zip(outs.iter_mut()) {
                let grain = grain_for(m.rows(), threads);
                out.par_chunks_mut(grain)
                    .enumerate()
                    .for_each(|(chunk, o)| m.rows_into(x, chunk * grain, o));
            }
        });
    }
}

/// A `rows x cols` matrix of random `ty` super-blocks (Q4_K or Q6_K) as a
/// file holds them: the kernels' speed does not depend on the values, so
/// any bytes, with each super-block's f16 scales set to 1/256 (no
/// infinities or NaN).
pub fn random_k_quant(
    ty: pool_matvec::WeightType,
    rows: usize,
    cols: usize,
    rng: &mut pool_matvec::XorShift,
) -> Vec<u8> {
    let row = ty.row_bytes(cols).expect("whole super-blocks");
    let mut bytes: Vec<u8> = (0..rows * row).map(|_| rng.next_u64() as u8).collect();
    // Q4_K's `d` and `dmin` open its block; Q6_K's `d` closes it.
    let scales_at: &[usize] = match ty {
        pool_matvec::WeightType::Q4_K => &[0, 2],
        _ => &[ty.block_bytes() - 2],
    };
    let scale = half::f16::from_f32(1.0 / 256.0).to_bits().to_le_bytes();
    for super_block in bytes.chunks_exact_mut(ty.block_bytes()) {
        for &at in scales_at {
            super_block[at..at + 2].copy_from_slice(&scale);
        }
    }
    bytes
}

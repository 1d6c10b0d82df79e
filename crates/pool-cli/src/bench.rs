//! `pool bench`: everything side by side, in one run, as ratios.

use std::time::{Duration, Instant};

use pool_benches::{
    rayon_matvec_f32, rayon_matvec_q4_0, rayon_matvec_q8_0, read_ceiling, read_ceiling_bytes,
    read_ceiling_bytes_len, PingPong, RayonExecutor, SpinPool, Stats,
};
use pool_core::Pool;
use pool_matvec::decode::{
    DecodeConfig, DecodeExecutor, DecodeModel, Serial, WeightFormat, XorShift,
};
use pool_matvec::{
    interleave_rows, interleaving_pays, matvec_f32_fast, matvec_q4_0_prepared,
    matvec_q8_0_prepared, quantize_q8_0, BlockQ4_0, BlockQ8_0, PreparedInput, RowsInto, WeightType,
    Weights, QK4_0, QK8_0,
};
use serde::Serialize;

use crate::measure::{line, tokens_per_s, Summary};

/// The JSON object of `pool bench --json` (docs/cli.md).
#[derive(Serialize)]
pub(crate) struct BenchReport {
    quick: bool,
    simd_tier: &'static str,
    quantized_kernel: &'static str,
    participants: usize,
    pool_workers: usize,
    oversubscribed_workers: usize,
    fork_join_ns: ForkJoin,
    ratios: Ratios,
    bandwidth: Bandwidth,
    kernel_shapes: Vec<KernelShape>,
    decode: Decode,
    decode_formats: Vec<DecodeFormat>,
    llama2: Vec<crate::llama::CheckpointBench>,
    waiting: crate::waiting::Waiting,
    /// Other processes' CPU use during the run (null where /proc cannot
    /// be read); `contaminated`: the figures are not results.
    contamination: Option<crate::measure::Contamination>,
    /// Figures the machine cannot produce (a share of a ceiling above
    /// 100 %, a speed-up above the participant count): problems, not
    /// results.
    measurement_problems: Vec<String>,
}

#[derive(Serialize)]
struct ForkJoin {
    ping_pong: Summary,
    spin_reference: Summary,
    pool_hot: Summary,
    /// The share of `pool_hot`'s jobs the adaptive policy ran inline (it
    /// saw foreign load or another busy caller): those were no fork-join.
    pool_hot_inline_share: f64,
    pool_oversubscribed: Summary,
    rayon_broadcast_inside: Summary,
    rayon_broadcast_outside: Summary,
    spawn_per_job: Summary,
    pool_after_idle_gap: Summary,
    rayon_after_idle_gap: Summary,
    idle_gap_ms: f64,
}

#[derive(Serialize)]
struct Ratios {
    pool_vs_ping_pong: f64,
    pool_vs_spin_reference: f64,
    rayon_inside_vs_pool: f64,
    rayon_outside_vs_pool: f64,
    spawn_vs_pool: f64,
}

#[derive(Serialize)]
struct Bandwidth {
    matrix: [usize; 2],
    read_ceiling_gbs: Summary,
    f32_pool_gbs: Summary,
    f32_rayon_gbs: Summary,
    f32_serial_gbs: Summary,
    q8_0_pool_gbs: Summary,
    f32_pool_pct_of_ceiling: f64,
    /// Against `q8_0_read_ceiling_gbs`.
    q8_0_pool_pct_of_ceiling: f64,
    /// The same parallel read over the Q8_0 matrix's bytes, interleaved
    /// with its matvecs (and the Q4_0 ones likewise).
    q8_0_read_ceiling_gbs: Summary,
    q4_0_read_ceiling_gbs: Summary,
    /// The quantized matrices: [rows, cols] and MB, random blocks.
    q8_0_matrix: [usize; 2],
    q8_0_mb: f64,
    q8_0_rayon_gbs: Summary,
    q8_0_serial_gbs: Summary,
    q4_0_matrix: [usize; 2],
    q4_0_mb: f64,
    q4_0_pool_gbs: Summary,
    q4_0_rayon_gbs: Summary,
    q4_0_serial_gbs: Summary,
    q4_0_pool_pct_of_ceiling: f64,
    /// Where rows interleaved by sixteen pay (`pool_matvec::interleaving_pays`:
    /// AVX-512 VNNI), the same matrices so rearranged, as `pool decode`
    /// reads them here: the pool's matvec and the read of the same bytes,
    /// in rounds of their own after the row-major ones. `None` elsewhere
    /// (decode then runs the row-major kernels above).
    q8_0_interleaved: Option<InterleavedLine>,
    q4_0_interleaved: Option<InterleavedLine>,
    /// The k-quants (Q4_K, then Q6_K) the same way: a matrix of random
    /// super-blocks past the last-level cache, through the row job the
    /// decoder runs.
    k_quants: Vec<KQuantLine>,
}

/// One k-quant format's matvec against the parallel read of its bytes.
#[derive(Serialize)]
struct KQuantLine {
    format: &'static str,
    matrix: [usize; 2],
    mb: f64,
    read_ceiling_gbs: Summary,
    pool_gbs: Summary,
    rayon_gbs: Summary,
    serial_gbs: Summary,
    pool_pct_of_ceiling: f64,
    /// Where rows interleaved by sixteen pay (Q4_K and Q6_K on AVX-512 VNNI), the
    /// same matrix so rearranged, as `pool decode` reads it here.
    interleaved: Option<InterleavedLine>,
}

/// `ty`'s line: its matvec on the pool, rayon and one thread, and the
/// parallel read of the same bytes, in alternating rounds.
fn k_quant_line(
    pool: &Pool,
    rayon: &RayonExecutor,
    samples: usize,
    ty: WeightType,
    [rows, cols]: [usize; 2],
    rng: &mut XorShift,
) -> KQuantLine {
    let mut bytes = pool_benches::random_k_quant(ty, rows, cols, rng);
    let w = Weights::new(ty, rows, cols, &bytes).expect("whole rows of aligned super-blocks");
    let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
    let input = PreparedInput::new(&x, [ty]);
    let mut out = vec![0.0f32; rows];
    let read = read_ceiling_bytes_len(&bytes);
    let mut runs: [Vec<f64>; 4] = Default::default();
    for _ in 0..samples {
        runs[0].push(gbs_once(read, || {
            std::hint::black_box(read_ceiling_bytes(Some(pool), &bytes));
        }));
        runs[1].push(gbs_once(bytes.len(), || {
            pool.run_rows_into(&mut out, |start, rows| w.rows_into(&input, start, rows))
        }));
        runs[2].push(gbs_once(bytes.len(), || {
            rayon.run_rows_into(&mut out, |start, rows| w.rows_into(&input, start, rows))
        }));
        runs[3].push(gbs_once(bytes.len(), || w.rows_into(&input, 0, &mut out)));
    }
    let [read_ceiling_gbs, pool_gbs, rayon_gbs, serial_gbs] =
        runs.map(|r| Summary::from(Stats::of(r)));
    drop((w, input));
    let interleaved = interleaved_line(pool, samples, ty, &mut bytes, [rows, cols], &x);
    KQuantLine {
        format: ty.name(),
        matrix: [rows, cols],
        mb: bytes.len() as f64 / 1e6,
        read_ceiling_gbs,
        pool_gbs,
        rayon_gbs,
        serial_gbs,
        pool_pct_of_ceiling: 100.0 * pool_gbs.median / read_ceiling_gbs.median,
        interleaved,
    }
}

#[derive(Serialize)]
struct InterleavedLine {
    pool_gbs: Summary,
    read_ceiling_gbs: Summary,
    pool_pct_of_ceiling: f64,
}

/// Random Q8_0 blocks: any byte, scales in +-1/64 (no float work to make).
fn random_q8_0(blocks: usize, rng: &mut XorShift) -> Vec<BlockQ8_0> {
    (0..blocks)
        .map(|_| {
            let bytes: [u64; 4] = std::array::from_fn(|_| rng.next_u64());
            BlockQ8_0 {
                d: half::f16::from_f32(rng.uniform() / 64.0),
                qs: std::array::from_fn(|j| (bytes[j / 8] >> (8 * (j % 8))) as i8),
            }
        })
        .collect()
}

/// Random Q4_0 blocks.
fn random_q4_0(blocks: usize, rng: &mut XorShift) -> Vec<BlockQ4_0> {
    (0..blocks)
        .map(|_| {
            let bytes: [u64; 2] = std::array::from_fn(|_| rng.next_u64());
            BlockQ4_0 {
                d: half::f16::from_f32(rng.uniform() / 64.0),
                qs: std::array::from_fn(|j| (bytes[j / 8] >> (8 * (j % 8))) as u8),
            }
        })
        .collect()
}

/// One format's decode workload: serial, rayon and the pool, a token of
/// each in turn.
#[derive(Serialize)]
struct DecodeFormat {
    format: &'static str,
    bytes_per_token: usize,
    serial_tokens_per_s: Summary,
    rayon_tokens_per_s: Summary,
    pool_tokens_per_s: Summary,
    pool_vs_rayon: f64,
    pool_vs_serial: f64,
    dispatches_per_token: f64,
    caller_wait_share: f64,
}

fn decode_formats(
    config: DecodeConfig,
    pool: &Pool,
    rayon: &RayonExecutor,
    tokens: usize,
) -> Vec<DecodeFormat> {
    WeightFormat::ALL
        .into_iter()
        .map(|format| {
            let model = DecodeModel::random(config, format, 42);
            let execs: [&dyn DecodeExecutor; 3] = [&Serial, rayon, pool];
            for exec in execs {
                model.decode(exec, 1); // warm-up
            }
            let mut runs: [Vec<f64>; 3] = Default::default();
            let (mut pool_ns, mut dispatches) = (0.0, 0);
            let stats_before = pool.stats();
            for _ in 0..tokens {
                for (i, exec) in execs.into_iter().enumerate() {
                    let before = pool_core::dispatch_count();
                    let start = Instant::now();
                    std::hint::black_box(model.decode(exec, 1));
                    let elapsed = start.elapsed();
                    runs[i].push(1.0 / elapsed.as_secs_f64());
                    if i == 2 {
                        pool_ns += elapsed.as_nanos() as f64;
                        dispatches += pool_core::dispatch_count() - before;
                    }
                }
            }
            let stats = pool.stats().since(&stats_before);
            let [serial, rayon_rate, pool_rate] = runs.map(|r| Summary::from(Stats::of(r)));
            DecodeFormat {
                format: format.name(),
                bytes_per_token: config.weight_bytes(format),
                serial_tokens_per_s: serial,
                rayon_tokens_per_s: rayon_rate,
                pool_tokens_per_s: pool_rate,
                pool_vs_rayon: pool_rate.median / rayon_rate.median,
                pool_vs_serial: pool_rate.median / serial.median,
                dispatches_per_token: dispatches as f64 / tokens as f64,
                caller_wait_share: stats.caller_wait_ns as f64 / pool_ns,
            }
        })
        .collect()
}

/// The serial f32 kernel on a decode shape, cycling over distinct matrices
/// (from DRAM in the full run), beside a one-thread read of the same bytes.
#[derive(Serialize)]
struct KernelShape {
    rows: usize,
    cols: usize,
    matrices: usize,
    mb: f64,
    one_thread_ceiling_gbs: Summary,
    serial_kernel_gbs: Summary,
    kernel_vs_ceiling: f64,
}

/// Serial `matvec_f32_fast` on the 2048x768 and 768x2048 decode shapes,
/// interleaved with a one-thread read of the same bytes.
fn kernel_shapes(quick: bool) -> Vec<KernelShape> {
    // Full: 640 MiB of distinct matrices, past this machine's last-level
    // cache. Quick: 48 MiB, which may sit in cache.
    let bytes: usize = if quick { 48 << 20 } else { 640 << 20 };
    let rounds = if quick { 3 } else { 7 };
    let mut rng = XorShift(17);
    let w: Vec<f32> = (0..bytes / 4).map(|_| rng.uniform()).collect();
    [(2048, 768), (768, 2048)]
        .into_iter()
        .map(|(rows, cols)| {
            let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
            let mut out = vec![0.0f32; rows];
            let matrices = w.len() / (rows * cols);
            let used = &w[..matrices * rows * cols];
            let used_bytes = used.len() * 4;
            let mut runs: [Vec<f64>; 2] = Default::default();
            for _ in 0..rounds {
                runs[0].push(gbs_once(used_bytes, || {
                    std::hint::black_box(read_ceiling(None, used));
                }));
                runs[1].push(gbs_once(used_bytes, || {
                    for m in used.chunks_exact(rows * cols) {
                        matvec_f32_fast(None, m, &x, &mut out);
                        std::hint::black_box(&out);
                    }
                }));
            }
            let [ceiling, kernel] = runs.map(|r| Summary::from(Stats::of(r)));
            KernelShape {
                rows,
                cols,
                matrices,
                mb: used_bytes as f64 / 1e6,
                one_thread_ceiling_gbs: ceiling,
                serial_kernel_gbs: kernel,
                kernel_vs_ceiling: kernel.median / ceiling.median,
            }
        })
        .collect()
}

#[derive(Serialize)]
struct Decode {
    dim: usize,
    hidden: usize,
    layers: usize,
    vocab: usize,
    format: &'static str,
    tokens: usize,
    serial_tokens_per_s: Summary,
    rayon_tokens_per_s: Summary,
    pool_tokens_per_s: Summary,
    dispatches_per_token: f64,
    unparks_per_dispatch: f64,
    caller_wait_share: f64,
    pool_vs_rayon: f64,
    pool_vs_serial: f64,
}

fn ns_per_call(samples: usize, iters: usize, f: impl FnMut()) -> Summary {
    pool_benches::time_per_iter(samples, iters, f).into()
}

/// Latency of one call after `gap` of idleness, `samples` times.
fn after_gap(samples: usize, gap: Duration, mut f: impl FnMut()) -> Summary {
    let runs = (0..samples)
        .map(|_| {
            std::thread::sleep(gap);
            let start = Instant::now();
            f();
            start.elapsed().as_nanos() as f64
        })
        .collect();
    Stats::of(runs).into()
}

/// GB/s of `bytes` for one call of `f`.
fn gbs_once(bytes: usize, f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    bytes as f64 / start.elapsed().as_nanos() as f64
}

/// The pool's matvec over `bytes` (a `ty` matrix of `shape`) rearranged
/// into rows interleaved by sixteen, where that pays, timed in alternating
/// rounds with the parallel read of the same bytes.
fn interleaved_line(
    pool: &Pool,
    samples: usize,
    ty: WeightType,
    bytes: &mut [u8],
    [rows, cols]: [usize; 2],
    x: &[f32],
) -> Option<InterleavedLine> {
    if !interleaving_pays(ty) {
        return None;
    }
    interleave_rows(ty, bytes, rows, cols).expect("the bench matrices are whole rows");
    let bytes: &[u8] = bytes;
    let w = Weights::interleaved(ty, rows, cols, bytes).expect("just interleaved");
    let input = PreparedInput::new(x, [ty]);
    let mut out = vec![0.0f32; rows];
    let read = read_ceiling_bytes_len(bytes);
    let mut runs: [Vec<f64>; 2] = Default::default();
    for _ in 0..samples {
        runs[0].push(gbs_once(bytes.len(), || {
            pool.run_rows_into(&mut out, |start, rows| w.rows_into(&input, start, rows))
        }));
        runs[1].push(gbs_once(read, || {
            std::hint::black_box(read_ceiling_bytes(Some(pool), bytes));
        }));
    }
    let [pool_gbs, read_ceiling_gbs] = runs.map(|r| Summary::from(Stats::of(r)));
    Some(InterleavedLine {
        pool_gbs,
        read_ceiling_gbs,
        pool_pct_of_ceiling: 100.0 * pool_gbs.median / read_ceiling_gbs.median,
    })
}

pub(crate) fn measure(quick: bool) -> BenchReport {
    let cpus = pool_topo::usable_cpus();
    let participants = cpus.max(2);
    let workers = participants - 1;
    let (samples, iters) = if quick { (9, 3000) } else { (21, 20_000) };

    let mut ping = PingPong::new();
    let ping_pong = ns_per_call(samples, iters, || ping.round_trip());
    drop(ping);
    let spin = SpinPool::new();
    let spin_reference = ns_per_call(samples, iters, || spin.run(|_, _| {}));
    drop(spin);
    let pool = Pool::new(workers);
    let before = pool.stats();
    let pool_hot = ns_per_call(samples, iters, || pool.run(|_, _| {}));
    let hot_stats = pool.stats().since(&before);
    let hot_jobs = hot_stats.dispatches() + hot_stats.jobs_inline;
    let pool_hot_inline_share = hot_stats.jobs_inline as f64 / hot_jobs.max(1) as f64;
    let oversubscribed_workers = cpus * 4;
    let over = Pool::new(oversubscribed_workers);
    let pool_oversubscribed = ns_per_call(samples, iters / 10, || over.run(|_, _| {}));
    drop(over);
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(participants)
        .build()
        .expect("rayon pool");
    let rayon_broadcast_inside = rayon.install(|| {
        ns_per_call(samples, iters / 10, || {
            rayon::broadcast(|_| {});
        })
    });
    let rayon_broadcast_outside = ns_per_call(samples, iters / 10, || {
        rayon.broadcast(|_| {});
    });
    let spawn_per_job = ns_per_call(samples, iters / 50, || {
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {});
            }
        })
    });
    let gap = Duration::from_millis(if quick { 5 } else { 20 });
    let gap_samples = if quick { 9 } else { 21 };
    let pool_after_idle_gap = after_gap(gap_samples, gap, || pool.run(|_, _| {}));
    let rayon_after_idle_gap = after_gap(gap_samples, gap, || {
        rayon.broadcast(|_| {});
    });
    let fork_join_ns = ForkJoin {
        ping_pong,
        spin_reference,
        pool_hot,
        pool_hot_inline_share,
        pool_oversubscribed,
        rayon_broadcast_inside,
        rayon_broadcast_outside,
        spawn_per_job,
        pool_after_idle_gap,
        rayon_after_idle_gap,
        idle_gap_ms: gap.as_secs_f64() * 1e3,
    };
    let ratios = Ratios {
        pool_vs_ping_pong: pool_hot.median / ping_pong.median,
        pool_vs_spin_reference: pool_hot.median / spin_reference.median,
        rayon_inside_vs_pool: rayon_broadcast_inside.median / pool_hot.median,
        rayon_outside_vs_pool: rayon_broadcast_outside.median / pool_hot.median,
        spawn_vs_pool: spawn_per_job.median / pool_hot.median,
    };

    // Bandwidth. Full: a 1 GiB matrix, past any last-level cache (this CI
    // machine's L3 is 480 MiB). Quick: 32 MiB, which may sit in cache.
    let (rows, cols) = if quick { (2048, 4096) } else { (16384, 16384) };
    let mut rng = XorShift(9);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.uniform()).collect();
    let x: Vec<f32> = (0..cols).map(|_| rng.uniform()).collect();
    let mut out = vec![0.0f32; rows];
    let f32_bytes = rows * cols * 4;
    // Fifteen rounds: at the memory limit pool and rayon differ by less
    // than this host's drift between rounds, and nine medians flipped.
    let bw_samples = if quick { 7 } else { 15 };
    // Round-robin, one sample of each per round, so machine noise hits the
    // ceiling and the kernels alike.
    let mut runs: [Vec<f64>; 4] = Default::default();
    read_ceiling(Some(&pool), &w);
    for _ in 0..bw_samples {
        runs[0].push(gbs_once(f32_bytes, || {
            std::hint::black_box(read_ceiling(Some(&pool), &w));
        }));
        runs[1].push(gbs_once(f32_bytes, || {
            matvec_f32_fast(Some(&pool), &w, &x, &mut out)
        }));
        runs[2].push(gbs_once(f32_bytes, || {
            rayon_matvec_f32(&rayon, &w, &x, &mut out)
        }));
        runs[3].push(gbs_once(f32_bytes, || {
            matvec_f32_fast(None, &w, &x, &mut out)
        }));
    }
    let [read_ceiling_gbs, f32_pool_gbs, f32_rayon_gbs, f32_serial_gbs] =
        runs.map(|r| Summary::from(Stats::of(r)));
    // Quantized matrices past the last-level cache too (random blocks),
    // 4096 columns (the hidden size of 7B-class models): rows that wide
    // keep the activation in L1. At 32768 and 65536 columns the
    // activation (~40 bytes per block) outgrows L1 and its reloads compete
    // with the weight stream: Q8_0 86 %, Q4_0 77 % of the ceiling there
    // (docs/benchmarks.md).
    let (q8_rows, q8_cols) = if quick { (2048, 4096) } else { (131072, 4096) };
    let (q4_rows, q4_cols) = if quick { (4096, 4096) } else { (262144, 4096) };
    let q8 = random_q8_0(q8_rows * q8_cols / QK8_0, &mut rng);
    let q4 = random_q4_0(q4_rows * q4_cols / QK4_0, &mut rng);
    let q8_x_f32: Vec<f32> = (0..q8_cols).map(|_| rng.uniform()).collect();
    let q4_x_f32: Vec<f32> = (0..q4_cols).map(|_| rng.uniform()).collect();
    let (q8_x, q4_x) = (quantize_q8_0(&q8_x_f32), quantize_q8_0(&q4_x_f32));
    let (q8_bytes, q4_bytes) = (
        q8.len() * std::mem::size_of::<BlockQ8_0>(),
        q4.len() * std::mem::size_of::<BlockQ4_0>(),
    );
    let mut q8_out = vec![0.0f32; q8_rows];
    let mut q4_out = vec![0.0f32; q4_rows];
    // The quantized blocks as bytes, for a ceiling read of the same
    // memory in the same round-robin (the f32 matrix's read above is
    // another buffer at another time: it moved 10-20 % between phases).
    // SAFETY: both block types are `repr(C)` without padding (2 + 32 and
    // 2 + 16 bytes, alignment 2): every byte is initialised.
    let (q8_raw, q4_raw) = unsafe {
        (
            std::slice::from_raw_parts(q8.as_ptr().cast::<u8>(), q8_bytes),
            std::slice::from_raw_parts(q4.as_ptr().cast::<u8>(), q4_bytes),
        )
    };
    let (q8_read, q4_read) = (
        read_ceiling_bytes_len(q8_raw),
        read_ceiling_bytes_len(q4_raw),
    );
    let mut q_runs: [Vec<f64>; 8] = Default::default();
    for _ in 0..bw_samples {
        q_runs[6].push(gbs_once(q8_read, || {
            std::hint::black_box(read_ceiling_bytes(Some(&pool), q8_raw));
        }));
        q_runs[7].push(gbs_once(q4_read, || {
            std::hint::black_box(read_ceiling_bytes(Some(&pool), q4_raw));
        }));
        q_runs[0].push(gbs_once(q8_bytes, || {
            matvec_q8_0_prepared(Some(&pool), &q8, &q8_x, &mut q8_out)
        }));
        q_runs[1].push(gbs_once(q8_bytes, || {
            rayon_matvec_q8_0(&rayon, &q8, &q8_x, &mut q8_out)
        }));
        q_runs[2].push(gbs_once(q8_bytes, || {
            matvec_q8_0_prepared(None, &q8, &q8_x, &mut q8_out)
        }));
        q_runs[3].push(gbs_once(q4_bytes, || {
            matvec_q4_0_prepared(Some(&pool), &q4, &q4_x, &mut q4_out)
        }));
        q_runs[4].push(gbs_once(q4_bytes, || {
            rayon_matvec_q4_0(&rayon, &q4, &q4_x, &mut q4_out)
        }));
        q_runs[5].push(gbs_once(q4_bytes, || {
            matvec_q4_0_prepared(None, &q4, &q4_x, &mut q4_out)
        }));
    }
    drop(w);
    let (mut q8, mut q4) = (q8, q4);
    // SAFETY: as for `q8_raw` above (the shared views ended with the
    // rounds); the blocks' bytes are rearranged in place, any bytes being
    // valid blocks.
    let (q8_bytes_mut, q4_bytes_mut) = unsafe {
        (
            std::slice::from_raw_parts_mut(q8.as_mut_ptr().cast::<u8>(), q8_bytes),
            std::slice::from_raw_parts_mut(q4.as_mut_ptr().cast::<u8>(), q4_bytes),
        )
    };
    let q8_0_interleaved = interleaved_line(
        &pool,
        bw_samples,
        WeightType::Q8_0,
        q8_bytes_mut,
        [q8_rows, q8_cols],
        &q8_x_f32,
    );
    let q4_0_interleaved = interleaved_line(
        &pool,
        bw_samples,
        WeightType::Q4_0,
        q4_bytes_mut,
        [q4_rows, q4_cols],
        &q4_x_f32,
    );
    drop((q8, q4));
    // The k-quants past the last-level cache too: 4096 columns, about the
    // Q4_0 matrix's bytes (Q4_K 0.56 bytes a weight, Q6_K 0.82).
    let k_rows = if quick { 4096 } else { 147456 };
    let k_rayon = RayonExecutor::new(participants);
    let k_quants = [WeightType::Q4_K, WeightType::Q6_K]
        .into_iter()
        .map(|ty| k_quant_line(&pool, &k_rayon, bw_samples, ty, [k_rows, 4096], &mut rng))
        .collect();
    drop(k_rayon);
    let [q8_0_pool_gbs, q8_0_rayon_gbs, q8_0_serial_gbs, q4_0_pool_gbs, q4_0_rayon_gbs, q4_0_serial_gbs, q8_0_read_ceiling_gbs, q4_0_read_ceiling_gbs] =
        q_runs.map(|r| Summary::from(Stats::of(r)));
    let bandwidth = Bandwidth {
        matrix: [rows, cols],
        read_ceiling_gbs,
        f32_pool_gbs,
        f32_rayon_gbs,
        f32_serial_gbs,
        q8_0_pool_gbs,
        f32_pool_pct_of_ceiling: 100.0 * f32_pool_gbs.median / read_ceiling_gbs.median,
        q8_0_pool_pct_of_ceiling: 100.0 * q8_0_pool_gbs.median / q8_0_read_ceiling_gbs.median,
        q8_0_matrix: [q8_rows, q8_cols],
        q8_0_mb: q8_bytes as f64 / 1e6,
        q8_0_rayon_gbs,
        q8_0_serial_gbs,
        q4_0_matrix: [q4_rows, q4_cols],
        q4_0_mb: q4_bytes as f64 / 1e6,
        q4_0_pool_gbs,
        q4_0_rayon_gbs,
        q4_0_serial_gbs,
        q4_0_pool_pct_of_ceiling: 100.0 * q4_0_pool_gbs.median / q4_0_read_ceiling_gbs.median,
        q8_0_read_ceiling_gbs,
        q4_0_read_ceiling_gbs,
        q8_0_interleaved,
        q4_0_interleaved,
        k_quants,
    };

    let kernel_shapes = kernel_shapes(quick);

    let config = if quick {
        DecodeConfig {
            dim: 512,
            hidden: 1408,
            layers: 6,
            vocab: 8000,
        }
    } else {
        DecodeConfig::default()
    };
    let model = DecodeModel::random(config, WeightFormat::F32, 42);
    let tokens = if quick { 9 } else { 21 };
    let rayon_exec = RayonExecutor(rayon);
    let serial_tokens_per_s = tokens_per_s(&model, &Serial, tokens);
    let rayon_tokens_per_s = tokens_per_s(&model, &rayon_exec, tokens);
    let before = pool_core::dispatch_count();
    let stats_before = pool.stats();
    let started = Instant::now();
    let pool_tokens_per_s = tokens_per_s(&model, &pool, tokens);
    let elapsed_ns = started.elapsed().as_nanos() as f64;
    let stats = pool.stats().since(&stats_before);
    let dispatches = pool_core::dispatch_count() - before;
    let decode = Decode {
        dim: config.dim,
        hidden: config.hidden,
        layers: config.layers,
        vocab: config.vocab,
        format: "f32",
        tokens,
        serial_tokens_per_s,
        rayon_tokens_per_s,
        pool_tokens_per_s,
        dispatches_per_token: dispatches as f64 / (tokens + 1) as f64,
        unparks_per_dispatch: stats.unparks_per_dispatch(),
        caller_wait_share: stats.caller_wait_ns as f64 / elapsed_ns,
        pool_vs_rayon: pool_tokens_per_s.median / rayon_tokens_per_s.median,
        pool_vs_serial: pool_tokens_per_s.median / serial_tokens_per_s.median,
    };
    let decode_formats = decode_formats(config, &pool, &rayon_exec, tokens);
    drop(rayon_exec);
    let llama2 = crate::llama::measure_checkpoints(&pool, quick).unwrap_or_else(|err| {
        eprintln!("pool bench: llama2 checkpoints skipped: {err}");
        Vec::new()
    });
    drop(pool);
    let waiting = crate::waiting::measure(&model, workers, tokens, quick);
    BenchReport {
        quick,
        simd_tier: pool_matvec::simd_tier().name(),
        quantized_kernel: pool_matvec::quantized_kernel_name(pool_matvec::simd_tier()),
        participants,
        pool_workers: workers,
        oversubscribed_workers,
        fork_join_ns,
        ratios,
        bandwidth,
        kernel_shapes,
        decode,
        decode_formats,
        llama2,
        waiting,
        contamination: None,
        measurement_problems: Vec::new(),
    }
}

/// The fork-join line when more than 1 % of its jobs ran inline: the
/// adaptive policy saw foreign load or another busy caller, and the line
/// timed a function call (one run read 29 ns against a 56 ns ping-pong).
fn inline_fork_join(inline_share: f64) -> Option<String> {
    (inline_share > 0.01).then(|| {
        format!(
            "the pool ran {:.0} % of the empty jobs of \"pool run, hot\" inline (it saw foreign \
             load or another busy caller): that line measured no fork-join: a measurement \
             problem, not a result",
            100.0 * inline_share
        )
    })
}

/// The figures of `r` this machine cannot produce, in words.
fn measurement_problems(r: &BenchReport) -> Vec<String> {
    let b = &r.bandwidth;
    let mut problems: Vec<String> = [
        ("pool f32 matvec", b.f32_pool_pct_of_ceiling),
        ("pool Q8_0 matvec", b.q8_0_pool_pct_of_ceiling),
        ("pool Q4_0 matvec", b.q4_0_pool_pct_of_ceiling),
    ]
    .into_iter()
    .chain(
        [
            ("pool Q8_0 matvec, rows interleaved", &b.q8_0_interleaved),
            ("pool Q4_0 matvec, rows interleaved", &b.q4_0_interleaved),
        ]
        .into_iter()
        .filter_map(|(what, line)| Some((what, line.as_ref()?.pool_pct_of_ceiling))),
    )
    .chain(b.k_quants.iter().map(|k| (k.format, k.pool_pct_of_ceiling)))
    .chain(
        b.k_quants
            .iter()
            .filter_map(|k| Some((k.format, k.interleaved.as_ref()?.pool_pct_of_ceiling))),
    )
    .filter_map(|(what, pct)| crate::measure::impossible_share(what, pct / 100.0))
    .collect();
    for k in &r.kernel_shapes {
        problems.extend(crate::measure::impossible_share(
            &format!("the serial kernel on {}x{}", k.rows, k.cols),
            k.kernel_vs_ceiling,
        ));
    }
    problems.extend(crate::llama::impossible_figures(&r.llama2));
    problems.extend(inline_fork_join(r.fork_join_ns.pool_hot_inline_share));
    let limit = r.participants as f64 * 1.1;
    for f in &r.decode_formats {
        if f.pool_vs_serial > limit {
            problems.push(format!(
                "the {} decode ran {:.2}x faster on the pool than serially with {} participants: \
                 a measurement problem, not a result",
                f.format, f.pool_vs_serial, r.participants
            ));
        }
    }
    problems
}

pub(crate) fn run(quick: bool, json: bool, markdown: bool) -> Result<(), String> {
    if !json {
        eprintln!(
            "pool bench: measuring{}...",
            if quick { " (quick)" } else { "" }
        );
    }
    let (mut r, contamination) = crate::measure::watched_for_neighbours(|| measure(quick));
    r.contamination = contamination;
    r.measurement_problems = measurement_problems(&r);
    // On stderr in every mode (stdout stays the figures), before them, so
    // nobody reads them as results.
    for problem in &r.measurement_problems {
        eprintln!("pool bench: {problem}");
    }
    crate::measure::warn_if_contaminated("pool bench", r.contamination);
    if markdown {
        let value = serde_json::to_value(&r).map_err(|e| e.to_string())?;
        let command = if quick {
            "pool bench --quick --markdown"
        } else {
            "pool bench --markdown"
        };
        crate::markdown::print(&value, command);
        return Ok(());
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let f = &r.fork_join_ns;
    println!(
        "fork-join, empty job, {} participants (medians)",
        r.participants
    );
    line("cache-line ping-pong (floor)", &f.ping_pong, "ns");
    line("minimal spin pool (reference)", &f.spin_reference, "ns");
    line("pool run, hot", &f.pool_hot, "ns");
    line(
        &format!(
            "pool run, {} workers (oversubscr.)",
            r.oversubscribed_workers
        ),
        &f.pool_oversubscribed,
        "ns",
    );
    line(
        "rayon broadcast, inside its pool",
        &f.rayon_broadcast_inside,
        "ns",
    );
    line(
        "rayon broadcast, from outside",
        &f.rayon_broadcast_outside,
        "ns",
    );
    line("thread::scope spawn per job", &f.spawn_per_job, "ns");
    line(
        &format!("pool run after {} ms idle", f.idle_gap_ms),
        &f.pool_after_idle_gap,
        "ns",
    );
    line(
        &format!("rayon broadcast after {} ms idle", f.idle_gap_ms),
        &f.rayon_after_idle_gap,
        "ns",
    );
    let q = &r.ratios;
    println!(
        "  ratios: pool/ping-pong {:.2}x, pool/spin-reference {:.2}x, rayon-inside/pool {:.1}x, rayon-outside/pool {:.1}x, spawn/pool {:.1}x",
        q.pool_vs_ping_pong, q.pool_vs_spin_reference, q.rayon_inside_vs_pool, q.rayon_outside_vs_pool, q.spawn_vs_pool
    );
    let b = &r.bandwidth;
    println!(
        "bandwidth, {}x{} f32 matrix, {} kernels",
        b.matrix[0], b.matrix[1], r.simd_tier
    );
    line(
        "parallel read of the same bytes (ceiling)",
        &b.read_ceiling_gbs,
        "GB/s",
    );
    line("f32 matvec, pool", &b.f32_pool_gbs, "GB/s");
    line("f32 matvec, rayon", &b.f32_rayon_gbs, "GB/s");
    line("f32 matvec, serial", &b.f32_serial_gbs, "GB/s");
    println!(
        "  pool f32 at {:.0} % of the read ceiling",
        b.f32_pool_pct_of_ceiling
    );
    for (name, shape, mb, ceiling, pool, rayon, serial, pct, interleaved) in [
        (
            "Q8_0",
            b.q8_0_matrix,
            b.q8_0_mb,
            &b.q8_0_read_ceiling_gbs,
            &b.q8_0_pool_gbs,
            &b.q8_0_rayon_gbs,
            &b.q8_0_serial_gbs,
            b.q8_0_pool_pct_of_ceiling,
            &b.q8_0_interleaved,
        ),
        (
            "Q4_0",
            b.q4_0_matrix,
            b.q4_0_mb,
            &b.q4_0_read_ceiling_gbs,
            &b.q4_0_pool_gbs,
            &b.q4_0_rayon_gbs,
            &b.q4_0_serial_gbs,
            b.q4_0_pool_pct_of_ceiling,
            &b.q4_0_interleaved,
        ),
    ] {
        println!(
            "  {name} {}x{} ({mb:.0} MB of blocks, {} kernel), weight bytes read per second:",
            shape[0], shape[1], r.quantized_kernel
        );
        line("parallel read of the same bytes (ceiling)", ceiling, "GB/s");
        line(&format!("{name} matvec, pool"), pool, "GB/s");
        line(&format!("{name} matvec, rayon"), rayon, "GB/s");
        line(&format!("{name} matvec, serial"), serial, "GB/s");
        println!(
            "  pool {name} at {pct:.0} % of the read ceiling; pool/rayon {:.2}x, pool/serial {:.2}x",
            pool.median / rayon.median,
            pool.median / serial.median
        );
        if let Some(i) = interleaved {
            println!("  {name} rows interleaved by sixteen (what `pool decode` runs here):");
            line(
                "parallel read of the same bytes (ceiling)",
                &i.read_ceiling_gbs,
                "GB/s",
            );
            line(&format!("{name} matvec, pool"), &i.pool_gbs, "GB/s");
            println!(
                "  pool {name}, rows interleaved, at {:.0} % of the read ceiling; {:.2}x the row-major pool line",
                i.pool_pct_of_ceiling,
                i.pool_gbs.median / pool.median
            );
        }
    }
    for k in &b.k_quants {
        println!(
            "  {} {}x{} ({:.0} MB of super-blocks, {} tier), weight bytes read per second:",
            k.format, k.matrix[0], k.matrix[1], k.mb, r.simd_tier
        );
        line(
            "parallel read of the same bytes (ceiling)",
            &k.read_ceiling_gbs,
            "GB/s",
        );
        line(&format!("{} matvec, pool", k.format), &k.pool_gbs, "GB/s");
        line(&format!("{} matvec, rayon", k.format), &k.rayon_gbs, "GB/s");
        line(
            &format!("{} matvec, serial", k.format),
            &k.serial_gbs,
            "GB/s",
        );
        println!(
            "  pool {} at {:.0} % of the read ceiling; pool/rayon {:.2}x, pool/serial {:.2}x",
            k.format,
            k.pool_pct_of_ceiling,
            k.pool_gbs.median / k.rayon_gbs.median,
            k.pool_gbs.median / k.serial_gbs.median
        );
        if let Some(i) = &k.interleaved {
            println!(
                "  {} rows interleaved by sixteen (what `pool decode` runs here):",
                k.format
            );
            line(
                "parallel read of the same bytes (ceiling)",
                &i.read_ceiling_gbs,
                "GB/s",
            );
            line(&format!("{} matvec, pool", k.format), &i.pool_gbs, "GB/s");
            println!(
                "  pool {}, rows interleaved, at {:.0} % of the read ceiling; {:.2}x the row-major pool line",
                k.format,
                i.pool_pct_of_ceiling,
                i.pool_gbs.median / k.pool_gbs.median
            );
        }
    }
    for k in &r.kernel_shapes {
        println!(
            "serial f32 kernel ({} tier), {}x{} decode shape, {} matrices ({:.0} MB)",
            r.simd_tier, k.rows, k.cols, k.matrices, k.mb
        );
        line(
            "one-thread read of the same bytes",
            &k.one_thread_ceiling_gbs,
            "GB/s",
        );
        line("matvec_f32_fast, serial", &k.serial_kernel_gbs, "GB/s");
        println!(
            "  kernel at {:.0} % of the one-thread ceiling",
            100.0 * k.kernel_vs_ceiling
        );
    }
    let d = &r.decode;
    println!(
        "decode, dim {} hidden {} layers {} vocab {}, {}",
        d.dim, d.hidden, d.layers, d.vocab, d.format
    );
    line("serial", &d.serial_tokens_per_s, "tokens/s");
    line("rayon", &d.rayon_tokens_per_s, "tokens/s");
    line("pool", &d.pool_tokens_per_s, "tokens/s");
    println!(
        "  pool/rayon {:.2}x, pool/serial {:.2}x, {:.0} dispatches per token, {:.3} unparks per dispatch, caller waits {:.1} % of the time",
        d.pool_vs_rayon,
        d.pool_vs_serial,
        d.dispatches_per_token,
        d.unparks_per_dispatch,
        100.0 * d.caller_wait_share
    );
    println!("decode workload per format, a token of each executor in turn (medians)");
    println!(
        "  {:<6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>12} {:>12}",
        "format", "MB/token", "serial", "rayon", "pool", "pool/rayon", "dispatches", "caller wait"
    );
    for f in &r.decode_formats {
        println!(
            "  {:<6} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>10.2}x {:>12.0} {:>11.1}%",
            f.format,
            f.bytes_per_token as f64 / 1e6,
            f.serial_tokens_per_s.median,
            f.rayon_tokens_per_s.median,
            f.pool_tokens_per_s.median,
            f.pool_vs_rayon,
            f.dispatches_per_token,
            100.0 * f.caller_wait_share
        );
    }
    crate::llama::print_checkpoints(&r.llama2);
    crate::waiting::print(&r.waiting);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::inline_fork_join;

    #[test]
    fn a_fork_join_line_whose_jobs_ran_inline_is_a_measurement_problem() {
        assert_eq!(inline_fork_join(0.0), None);
        assert_eq!(inline_fork_join(0.005), None, "a stray inline job is noise");
        let problem = inline_fork_join(0.6).expect("60 % inline");
        assert!(
            problem.contains("60 %") && problem.contains("no fork-join"),
            "{problem}"
        );
    }
}

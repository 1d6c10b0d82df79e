//! GB/s of weights streamed: serial vs pool vs rayon, next to the read
//! ceiling of the same bytes, for matrices past, in and well inside the LLC;
//! `run_many` of three matrices vs three `run_rows`; and every quantized
//! format's kernel on one decode-shaped matrix on one thread (Q8_0, Q4_0
//! Q4_K and Q6_K, row-major and interleaved by sixteen).

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pool_benches::{random_k_quant, rayon_matvec_f32, read_ceiling};
use pool_core::Pool;
use pool_matvec::decode::XorShift;
use pool_matvec::{
    interleave_rows, matvec_f32_fast, matvec_q4_0, matvec_q8_0, matvec_rows, quantize_q4_0,
    quantize_q8_0, BlockQ4_0, BlockQ8_0, PreparedInput, RowParallel, WeightType, Weights,
};

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = XorShift(seed);
    (0..n).map(|_| rng.uniform()).collect()
}

fn matvec(c: &mut Criterion) {
    let cpus = pool_topo::usable_cpus();
    let pool = Pool::with_spin(cpus.saturating_sub(1).max(1), 20_000);
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(cpus)
        .build()
        .unwrap();
    // 4096x4096 (64 MiB) is the usual "DRAM-sized" matrix, but this CI
    // machine's L3 is 480 MiB: the 1 GiB matrix is the one past the cache.
    for (name, n) in [
        ("16384x16384_1GiB", 16384),
        ("4096x4096_64MiB", 4096),
        ("1024x1024_4MiB", 1024),
    ] {
        let mut group = c.benchmark_group(format!("matvec_{name}"));
        group
            .measurement_time(Duration::from_secs(3))
            .warm_up_time(Duration::from_millis(500));
        let w = random(n * n, 1);
        let x = random(n, 2);
        let mut out = vec![0.0f32; n];
        group.throughput(Throughput::Bytes((n * n * 4) as u64));
        group.bench_function("read_ceiling_pool", |b| {
            b.iter(|| read_ceiling(Some(&pool), &w))
        });
        group.bench_function("read_ceiling_serial", |b| b.iter(|| read_ceiling(None, &w)));
        group.bench_function("f32_fast_serial", |b| {
            b.iter(|| matvec_f32_fast(None, &w, &x, &mut out))
        });
        group.bench_function("f32_fast_pool", |b| {
            b.iter(|| matvec_f32_fast(Some(&pool), &w, &x, &mut out))
        });
        group.bench_function("f32_fast_rayon", |b| {
            b.iter(|| rayon_matvec_f32(&rayon, &w, &x, &mut out))
        });
        group.bench_function("f32_exact_pool", |b| {
            b.iter(|| matvec_rows(Some(&pool), &w, &x, &mut out))
        });
        let q: Vec<BlockQ8_0> = quantize_q8_0(&w);
        group.throughput(Throughput::Bytes(
            (q.len() * std::mem::size_of::<BlockQ8_0>()) as u64,
        ));
        group.bench_function("q8_0_serial", |b| {
            b.iter(|| matvec_q8_0(None, &q, &x, &mut out))
        });
        group.bench_function("q8_0_pool", |b| {
            b.iter(|| matvec_q8_0(Some(&pool), &q, &x, &mut out))
        });
        drop(q);
        let q4: Vec<BlockQ4_0> = quantize_q4_0(&w);
        group.throughput(Throughput::Bytes(
            (q4.len() * std::mem::size_of::<BlockQ4_0>()) as u64,
        ));
        group.bench_function("q4_0_serial", |b| {
            b.iter(|| matvec_q4_0(None, &q4, &x, &mut out))
        });
        group.bench_function("q4_0_pool", |b| {
            b.iter(|| matvec_q4_0(Some(&pool), &q4, &x, &mut out))
        });
        group.finish();
    }
}

fn fused_qkv(c: &mut Criterion) {
    let mut group = c.benchmark_group("qkv_768");
    group.measurement_time(Duration::from_secs(2));
    let pool = Pool::with_spin(pool_topo::usable_cpus().saturating_sub(1).max(1), 20_000);
    let dim = 768;
    let w: Vec<Vec<f32>> = (0..3).map(|i| random(dim * dim, 10 + i)).collect();
    let x = random(dim, 3);
    let kernel = |m: &[f32], start: usize, end: usize| {
        let mut sink = 0.0f32;
        for row in start..end {
            sink += pool_matvec::dot_fast(&m[row * dim..(row + 1) * dim], &x);
        }
        std::hint::black_box(sink);
    };
    let (fq, fk, fv) = (
        |s: usize, e: usize| kernel(&w[0], s, e),
        |s: usize, e: usize| kernel(&w[1], s, e),
        |s: usize, e: usize| kernel(&w[2], s, e),
    );
    group.bench_function(BenchmarkId::new("run_many", 3), |b| {
        b.iter(|| pool.run_many(&[(dim, &fq), (dim, &fk), (dim, &fv)]))
    });
    group.bench_function(BenchmarkId::new("three_run_rows", 3), |b| {
        b.iter(|| {
            pool.run_rows(dim, &fq);
            pool.run_rows(dim, &fk);
            pool.run_rows(dim, &fv);
        })
    });
    group.finish();
}

/// stories110M's gate (2048 x 768; 1.7 MB in Q8_0, from L2 or L3) on one
/// thread, in every quantized format: the row-major kernels, and for Q8_0
/// and Q4_0 the interleaved layout too (`pool_matvec::interleave_rows`;
/// the VNNI kernels where the CPU has them, elsewhere the row-major kernel
/// after putting each group back). Throughput is the format's own bytes:
/// the kernels' pace where the memory is not the limit.
fn formats(c: &mut Criterion) {
    let mut group = c.benchmark_group("formats_2048x768");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    let (rows, cols) = (2048, 768);
    let (w, x) = (random(rows * cols, 3), random(cols, 4));
    let block = |d: half::f16, qs: &[u8]| {
        let mut v = d.to_bits().to_le_bytes().to_vec();
        v.extend_from_slice(qs);
        v
    };
    let q8_0: Vec<u8> = quantize_q8_0(&w)
        .iter()
        .flat_map(|b| block(b.d, &b.qs.map(|q| q as u8)))
        .collect();
    let q4_0: Vec<u8> = quantize_q4_0(&w)
        .iter()
        .flat_map(|b| block(b.d, &b.qs))
        .collect();
    let mut out = vec![0.0f32; rows];
    for (ty, row_major) in [(WeightType::Q8_0, q8_0), (WeightType::Q4_0, q4_0)] {
        let mut interleaved = row_major.clone();
        interleave_rows(ty, &mut interleaved, rows, cols).unwrap();
        let input = PreparedInput::new(&x, [ty]);
        group.throughput(Throughput::Bytes(row_major.len() as u64));
        let plain = Weights::new(ty, rows, cols, &row_major).unwrap();
        group.bench_function(format!("{ty}_row_major"), |b| {
            b.iter(|| plain.rows_into(&input, 0, &mut out))
        });
        let grouped = Weights::interleaved(ty, rows, cols, &interleaved).unwrap();
        group.bench_function(format!("{ty}_interleaved"), |b| {
            b.iter(|| grouped.rows_into(&input, 0, &mut out))
        });
    }
    for ty in [WeightType::Q4_K, WeightType::Q6_K] {
        let bytes = random_k_quant(ty, rows, cols, &mut XorShift(5));
        let input = PreparedInput::new(&x, [ty]);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        let plain = Weights::new(ty, rows, cols, &bytes).unwrap();
        group.bench_function(format!("{ty}_row_major"), |b| {
            b.iter(|| plain.rows_into(&input, 0, &mut out))
        });
        let mut interleaved = bytes.clone();
        interleave_rows(ty, &mut interleaved, rows, cols).unwrap();
        let grouped = Weights::interleaved(ty, rows, cols, &interleaved).unwrap();
        group.bench_function(format!("{ty}_interleaved"), |b| {
            b.iter(|| grouped.rows_into(&input, 0, &mut out))
        });
    }
    group.finish();
}

criterion_group!(benches, matvec, fused_qkv, formats);
criterion_main!(benches);

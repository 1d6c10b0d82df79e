//! How an engine links the crates as its decode-path executor: one pool for
//! the process, fused row jobs per layer, a rayon `par_chunks_mut` migrated.
//! Run: `cargo run --release -p pool-matvec --example embedding`.

use pool_core::{Pool, PoolBuilder};
use pool_matvec::{for_each_chunk_init, matvec_f32_fast, matvec_rows, RowFn, RowParallel};

/// The engine's weights for one layer (row-major, `dim` columns each).
struct Layer {
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
}

fn main() {
    // 1. Once, at start-up: the process-wide pool, sized from
    //    FERROX_CPU_THREADS / RAYON_NUM_THREADS / the physical performance
    //    cores, workers pinned per the plan. Every later call anywhere in
    //    the program finds it with `pool_core::global()`.
    let built = pool_core::init_global(PoolBuilder::from_env().thread_name_prefix("decode"))
        .expect("start the decode pool");
    println!("global pool built now: {built}");
    let pool: Option<&Pool> = Some(pool_core::global());
    println!(
        "decode pool: {} participants",
        pool.map_or(1, |p| p.n_workers() + 1)
    );

    // A second, intra-op pool (say, for a tokenizer or a sampler) gets what
    // the decode pool leaves: physical cores - workers - coordinator - 1.
    let topology = pool_topo::CpuTopology::detect();
    let plan = pool_topo::plan_cpu_pool_in(&topology, pool.map_or(1, |p| p.n_workers() + 1), false);
    let intra_op = pool_topo::clamp_intra_op_threads(&plan, topology.physical_cores(), 4);
    println!("intra-op pool: {intra_op} threads");

    let dim = 512;
    let layer = Layer {
        wq: vec![0.01; dim * dim],
        wk: vec![0.02; dim * dim],
        wv: vec![0.03; dim * dim],
    };
    let x = vec![1.0f32; dim];
    let (mut q, mut k, mut v) = (vec![0.0; dim], vec![0.0; dim], vec![0.0; dim]);

    // 2. Per token, per layer: Q, K and V share an input, so fuse them into
    //    one dispatch (one barrier instead of three) with run_many.
    match pool {
        Some(pool) => {
            let outs = [
                std::sync::Mutex::new(&mut q),
                std::sync::Mutex::new(&mut k),
                std::sync::Mutex::new(&mut v),
            ];
            let mats = [&layer.wq, &layer.wk, &layer.wv];
            let part = |which: usize| {
                let (outs, mats, x) = (&outs, &mats, &x);
                move |start: usize, end: usize| {
                    // Real engines hand disjoint rows out without a lock (as
                    // pool-matvec's kernels do internally); a Mutex keeps this
                    // example free of unsafe code.
                    let mut rows = vec![0.0f32; end - start];
                    matvec_rows(None, &mats[which][start * dim..end * dim], x, &mut rows);
                    outs[which].lock().unwrap()[start..end].copy_from_slice(&rows);
                }
            };
            let (fq, fk, fv) = (part(0), part(1), part(2));
            let parts: [(usize, &RowFn<'_>); 3] = [(dim, &fq), (dim, &fk), (dim, &fv)];
            pool.run_many(&parts);
        }
        None => {
            matvec_rows(None, &layer.wq, &x, &mut q);
            matvec_rows(None, &layer.wk, &x, &mut k);
            matvec_rows(None, &layer.wv, &x, &mut v);
        }
    }
    println!("q[0] = {}, k[0] = {}, v[0] = {}", q[0], k[0], v[0]);

    // 3. Single matrices go straight to the kernels, which gate on size
    //    (below ~256k multiply-adds they run serially).
    let mut out = vec![0.0; dim];
    matvec_f32_fast(pool, &layer.wq, &x, &mut out);

    // 4. Migrating rayon: `out.par_chunks_mut(64).enumerate().for_each(|(i, c)| ..)`
    //    becomes for_each_chunk_init, with a per-range scratch buffer.
    let mut activations = vec![0.0f32; 4096];
    for_each_chunk_init(
        pool,
        &mut activations,
        64,
        || vec![0.0f32; 64],
        |scratch, index, chunk| {
            for (j, a) in chunk.iter_mut().enumerate() {
                scratch[j] = (index * 64 + j) as f32;
                *a = scratch[j].tanh();
            }
        },
    );
    println!("activations[4095] = {}", activations[4095]);
}

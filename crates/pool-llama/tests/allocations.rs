//! A decode token allocates nothing: the activations' quantized forms, the
//! row jobs' parts and the pool's dispatch reuse what the first token
//! made. An allocation per input costs a decode more than its
//! instructions: the allocator's lists sit in lines the weights' stream
//! has evicted, so each is a chain of cache misses between the jobs.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use common::{Spec, TestModel};
use pool_core::Pool;
use pool_llama::Model;
use pool_matvec::{RowParallel, Serial, WeightType};
use testkit::watched;

/// The system allocator, counting allocations on every thread.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The size of the seeded check's allocations, which are also counted
/// apart: nothing else in the test allocates it.
const SEEDED_SIZE: usize = 4093;
static SEEDED: AtomicU64 = AtomicU64::new(0);

fn count(layout: Layout) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if layout.size() == SEEDED_SIZE {
        SEEDED.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(layout);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made between consecutive generated tokens, after the first
/// `warm` tokens; `None` for a token during which the pool's load sampler
/// refreshed the process's CPU set (its one allocating step, at most once
/// a second: `pool_core::cpu_set_refreshes`).
fn allocations_per_token(
    model: &Model,
    exec: &dyn RowParallel,
    steps: usize,
    warm: usize,
) -> Vec<Option<u64>> {
    let mut at = Vec::with_capacity(steps);
    model.generate(exec, steps, |_, _| {
        at.push((
            ALLOCATIONS.load(Ordering::Relaxed),
            pool_core::cpu_set_refreshes(),
        ))
    });
    at.windows(2)
        .skip(warm)
        .map(|w| (w[0].1 == w[1].1).then(|| w[1].0 - w[0].0))
        .collect()
}

#[test]
#[cfg_attr(miri, ignore = "decodes several models")]
fn a_decode_token_allocates_nothing_after_the_first() {
    watched("allocations", |stage| {
        let pool = Pool::with_spin(1, 1000);
        stage.set("the seeded allocation on the worker");
        an_allocation_on_a_worker_inside_a_job_is_counted(&pool);
        use WeightType::*;
        let mut q4_0 = Spec::all(Q4_0);
        q4_0.output = Some(Q6_K);
        let mut q4_k_m = Spec::all(Q4_K);
        q4_k_m.down = Q6_K;
        q4_k_m.output = Some(Q6_K);
        let specs = [
            ("F32", Spec::all(F32)),
            ("F16", Spec::all(F16)),
            ("Q8_0", Spec::all(Q8_0)),
            ("Q4_0 + Q6_K output", q4_0),
            ("Q4_K_M", q4_k_m),
        ];
        let mut allocating = Vec::new();
        for (seed, (name, spec)) in specs.into_iter().enumerate() {
            stage.set(name);
            let test = TestModel::random(&spec, 700 + seed as u64);
            let model =
                Model::from_bytes(&test.to_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
            for (exec_name, exec) in [("serial", &Serial as &dyn RowParallel), ("pool", &pool)] {
                let per_token = allocations_per_token(&model, exec, 8, 2);
                let measured = per_token.iter().flatten().count();
                assert!(
                    measured >= 3,
                    "{name} on the {exec_name} executor: only {measured} tokens without a CPU-set refresh"
                );
                if per_token.iter().flatten().any(|&n| n > 0) {
                    allocating.push(format!("{name} on the {exec_name} executor: {per_token:?}"));
                }
            }
        }
        assert!(
            allocating.is_empty(),
            "allocations per token:\n{}",
            allocating.join("\n")
        );
    });
}

/// The seeded check, run first by the test above (one test in this
/// binary, so no other test's allocations land in the count): an
/// allocation made only on `pool`'s worker, inside a job, is counted, so
/// the zeros are not a counter that misses the pool's threads.
fn an_allocation_on_a_worker_inside_a_job_is_counted(pool: &Pool) {
    {
        let caller = std::thread::current().id();
        let on_worker = AtomicU64::new(0);
        let before = SEEDED.load(Ordering::Relaxed);
        // Jobs whose rows take a while, until the worker has taken some
        // (at once on an idle machine; within a few time slices on a busy
        // one).
        let since = std::time::Instant::now();
        while on_worker.load(Ordering::Relaxed) == 0 && since.elapsed().as_secs() < 10 {
            pool.run_rows(64, &|start, end| {
                for _ in start..end {
                    let row = std::time::Instant::now();
                    while row.elapsed().as_micros() < 5 {
                        std::hint::spin_loop();
                    }
                    if std::thread::current().id() != caller {
                        drop(std::hint::black_box(Box::new([0u8; SEEDED_SIZE])));
                        on_worker.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let seeded = on_worker.load(Ordering::Relaxed);
        assert!(
            seeded > 0,
            "setting not reached: the worker ran no rows in 10 s of jobs"
        );
        let counted = SEEDED.load(Ordering::Relaxed) - before;
        assert_eq!(
            counted, seeded,
            "{seeded} allocations on the worker, {counted} counted"
        );
    }
}

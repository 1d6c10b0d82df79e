//! The hot empty fork-join over time: one pool, one line per window.
//!
//! ```text
//! cargo run --release -p pool-core --example hot_run_trace -- [SECONDS] [WORKERS]
//! ```
//!
//! Prints, every 100 ms for `SECONDS` (10), the mean time of an empty
//! `Pool::run` on a pool of `WORKERS` (1) workers: a cache-line round trip
//! between two CPUs and little else. Run it before trusting a benchmark on
//! a virtual machine: on the 2-vCPU AMD EPYC guest of 2026-12-05 it read
//! 110-150 ns in some stretches and 405-500 ns in others, each from a
//! tenth of a second to tens of seconds, with no other process running,
//! and the same with the caller and the worker pinned to the two vCPUs:
//! the host moves the vCPUs between its cores, sometimes onto two core
//! complexes that share no L3. Every multi-threaded executor slows down
//! with it (docs/benchmarks.md, "Stretches of slow cross-CPU transfers").

use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = parse(args.next(), 10.0, "SECONDS");
    let workers: usize = parse(args.next(), 1, "WORKERS");
    if workers == 0 {
        eprintln!("hot_run_trace: WORKERS must be at least 1");
        std::process::exit(2);
    }
    let pool = pool_core::Pool::new(workers);
    let window = Duration::from_millis(100);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let began = Instant::now();
        let mut runs = 0u64;
        while began.elapsed() < window {
            for _ in 0..256 {
                pool.run(|_, _| {});
            }
            runs += 256;
        }
        let ns = began.elapsed().as_nanos() as f64 / runs as f64;
        println!(
            "{:7.1} s {:7.0} ns per hot run",
            start.elapsed().as_secs_f64(),
            ns
        );
    }
}

fn parse<T: std::str::FromStr>(arg: Option<String>, default: T, name: &str) -> T {
    match arg {
        None => default,
        Some(text) => text.parse().unwrap_or_else(|_| {
            eprintln!("hot_run_trace: {name} must be a number, not {text:?}");
            std::process::exit(2);
        }),
    }
}

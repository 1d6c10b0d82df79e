//! Configuration: `CMF_POOL_SPIN`, the builder's options and their errors.
//! This binary is the only one that sets `CMF_POOL_SPIN`, and one test sets
//! it, so no other test sees the change.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pool_core::{parse_spin_policy, Pool, SpinPolicy, SPIN_ENV};
use testkit::{capture_warnings, watched};

#[test]
fn spin_values_parse_as_non_negative_integers_only_and_unset_means_adaptive() {
    assert_eq!(parse_spin_policy(None), Ok(SpinPolicy::adaptive()));
    assert_eq!(parse_spin_policy(Some("0")), Ok(SpinPolicy::Fixed(0)));
    assert_eq!(
        parse_spin_policy(Some("250000\n")),
        Ok(SpinPolicy::Fixed(250_000))
    );
    for bad in ["abc", "-1", "", "1e3", "4k", "18446744073709551616"] {
        let err = parse_spin_policy(Some(bad)).unwrap_err();
        assert_eq!(err.value(), bad);
        assert!(err.to_string().contains(SPIN_ENV), "{err}");
    }
}

#[test]
fn an_unparsable_cmf_pool_spin_is_warned_about_and_the_default_used() {
    watched("bad_env", |_| {
        for bad in ["abc", "-1"] {
            std::env::set_var(SPIN_ENV, bad);
            let (pool, warnings) = capture_warnings(|| Pool::new(1));
            assert_eq!(
                pool.spin_policy(),
                SpinPolicy::adaptive(),
                "{bad:?} must not read as 0"
            );
            assert!(
                warnings.contains(SPIN_ENV),
                "warning names the variable: {warnings}"
            );
            assert!(
                warnings.contains(bad),
                "warning names the value: {warnings}"
            );
        }
        std::env::set_var(SPIN_ENV, "17");
        let (pool, warnings) = capture_warnings(|| Pool::new(1));
        assert_eq!(pool.spin_policy(), SpinPolicy::Fixed(17));
        assert_eq!(pool.spin_budget(), 17);
        assert!(warnings.is_empty(), "{warnings}");
        std::env::remove_var(SPIN_ENV);
    });
}

#[test]
fn pinning_needs_exactly_one_cpu_per_worker() {
    let err = Pool::builder()
        .workers(2)
        .pin_workers(vec![0])
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("1 CPUs for 2 workers"), "{err}");
}

/// The CPU the calling thread runs on now.
#[cfg(any(target_os = "linux", windows))]
fn current_cpu() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu has no preconditions.
        unsafe { libc::sched_getcpu() as usize }
    }
    #[cfg(windows)]
    {
        #[link(name = "kernel32")]
        extern "system" {
            fn GetCurrentProcessorNumber() -> u32;
        }
        // SAFETY: no arguments, cannot fail.
        unsafe { GetCurrentProcessorNumber() as usize }
    }
}

#[test]
#[cfg(any(target_os = "linux", windows))]
#[cfg_attr(miri, ignore = "Miri has no sched_getcpu")]
fn pinned_workers_run_on_their_cpu() {
    watched("pinned", |_| {
        let cpu = pool_topo::process_affinity_cpus()[0];
        let pool = Pool::builder()
            .workers(1)
            .pin_workers(vec![cpu])
            .build()
            .unwrap();
        let seen = AtomicUsize::new(usize::MAX);
        pool.run_limited(1, |idx, _| {
            if idx == 0 {
                seen.store(current_cpu(), Ordering::Relaxed);
            }
        });
        assert_eq!(seen.load(Ordering::Relaxed), cpu);
    });
}

#[test]
#[cfg(any(target_os = "linux", windows))]
fn a_refused_pin_is_an_error_naming_the_worker_and_cpu() {
    watched("bad_pin", |_| {
        let err = Pool::builder()
            .workers(1)
            .pin_workers(vec![1000])
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains("worker 0: pinning to CPU 1000"),
            "{err}"
        );
    });
}

#[test]
fn the_on_start_hook_runs_on_every_worker_before_build_returns() {
    watched("on_start", |_| {
        let started = Arc::new(AtomicUsize::new(0));
        let hook_count = started.clone();
        let pool = Pool::builder()
            .workers(3)
            .on_start(move |_| {
                hook_count.fetch_add(1, Ordering::Relaxed);
            })
            .build()
            .unwrap();
        assert_eq!(started.load(Ordering::Relaxed), 3);
        drop(pool);
    });
}

#[test]
fn a_panicking_on_start_hook_fails_the_build_without_hanging() {
    watched("on_start_panic", |_| {
        let err = Pool::builder()
            .workers(2)
            .on_start(|worker| {
                if worker == 1 {
                    panic!("hook fails");
                }
            })
            .build()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("worker 1: the on_start hook panicked"),
            "{err}"
        );
    });
}

#[test]
fn from_env_follows_ferrox_cpu_threads() {
    watched("from_env", |_| {
        // This binary runs its tests in parallel, but only this test reads
        // FERROX_CPU_THREADS.
        std::env::set_var("FERROX_CPU_THREADS", "1");
        assert!(Pool::from_env().is_none(), "width 1 means serial");
        std::env::set_var("FERROX_CPU_THREADS", "3");
        let pool = Pool::from_env().expect("width 3 means a pool");
        assert_eq!(pool.n_workers(), 2);
        std::env::remove_var("FERROX_CPU_THREADS");
    });
}

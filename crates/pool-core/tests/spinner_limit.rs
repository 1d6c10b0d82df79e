#![cfg(not(miri))]
//! The spinner limit is the process's, whichever thread computes it first.
//! Its own test binary: the limit is computed once per process.

use testkit::watched;

#[test]
#[cfg(any(target_os = "linux", windows))]
fn the_spinner_limit_is_the_processs_usable_cpus_even_when_a_pinned_thread_computes_it() {
    watched("spinner_limit", |_| {
        let usable = pool_topo::usable_cpus();
        let cpu = pool_topo::process_affinity_cpus()[0];
        let limit = std::thread::spawn(move || {
            pool_topo::pin_current_thread(&[cpu]).unwrap();
            // The first call in this process: a pinned thread computes it.
            pool_core::spinner_limit()
        })
        .join()
        .unwrap();
        assert_eq!(limit, usable);
        assert_eq!(pool_core::spinner_limit(), usable);
    });
}

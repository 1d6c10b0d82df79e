//! `run_phased`: a barrier inside a job. Every participant sees every write
//! made before a barrier, the barrier is reused across phases and jobs,
//! a panic or a skipped barrier releases the others instead of hanging,
//! and inline and nested runs pass barriers at once.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pool_core::Pool;
use testkit::{panic_message, watched};

const PHASES: usize = if cfg!(miri) { 3 } else { 40 };
const JOBS: usize = if cfg!(miri) { 2 } else { 50 };

/// Each phase every participant writes its slot, then after the barrier
/// reads every other slot: a barrier that lets anyone through early shows
/// a stale value.
fn check_phases(pool: &Pool) {
    let slots: Vec<AtomicU64> = (0..pool.n_workers() + 1)
        .map(|_| AtomicU64::new(0))
        .collect();
    for job in 0..JOBS {
        pool.run_phased(|idx, n, barrier| {
            for phase in 0..PHASES {
                let stamp = (job * PHASES + phase) as u64 + 1;
                slots[idx].store(stamp, Ordering::Relaxed);
                barrier.wait();
                for (other, slot) in slots[..n].iter().enumerate() {
                    assert_eq!(
                        slot.load(Ordering::Relaxed),
                        stamp,
                        "participant {idx} read participant {other}'s slot after barrier {phase}"
                    );
                }
                barrier.wait();
            }
            assert_eq!(barrier.passed(), 2 * PHASES);
        });
    }
}

#[test]
fn every_participant_sees_every_write_made_before_each_barrier() {
    watched("phases", |stage| {
        for workers in [1, 2, 3] {
            stage.set(format!("{workers} workers"));
            check_phases(&Pool::with_spin(workers, 1000));
        }
    });
}

#[test]
fn barriers_hold_when_workers_park_between_jobs() {
    watched("phases_parking", |_| check_phases(&Pool::with_spin(2, 0)));
}

#[test]
fn barriers_hold_with_pinned_workers_and_a_pinned_caller() {
    watched("phases_pinned", |_| {
        let cpus = pool_topo::process_affinity_cpus();
        if cpus.len() < 2 {
            eprintln!("needs two usable CPUs: skipping");
            return;
        }
        // The watched body runs on its own thread: pinning it is harmless.
        pool_topo::pin_current_thread(&[cpus[0]]).unwrap();
        let pool = Pool::builder()
            .workers(1)
            .pin_workers(vec![cpus[1]])
            .spin(1000)
            .build()
            .unwrap();
        check_phases(&pool);
        // Oversubscribed: three workers pinned beside the caller's CPU.
        let pool = Pool::builder()
            .workers(3)
            .pin_workers(vec![cpus[1], cpus[0], cpus[1]])
            .spin(1000)
            .build()
            .unwrap();
        check_phases(&pool);
    });
}

#[test]
fn two_threads_sharing_one_pool_take_turns_with_their_phased_jobs() {
    watched("phases_two_callers", |_| {
        let pool = Pool::with_spin(1, 1000);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| check_phases(&pool));
            }
        });
    });
}

#[test]
fn a_worker_that_panics_mid_phase_releases_the_others_and_its_panic_reaches_the_caller() {
    watched("phases_worker_panic", |_| {
        let pool = Pool::with_spin(2, 1000);
        let reached_end = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|idx, _n, barrier| {
                barrier.wait();
                if idx == 0 {
                    panic!("worker zero fails in phase one");
                }
                barrier.wait(); // worker zero never arrives
                reached_end.fetch_add(1, Ordering::Relaxed);
            })
        }));
        let message = panic_message(result.expect_err("run_phased must re-raise"));
        assert_eq!(message, "worker zero fails in phase one");
        assert_eq!(reached_end.load(Ordering::Relaxed), 0);
        check_phases(&pool); // the pool is whole
    });
}

#[test]
fn the_callers_own_panic_wins_over_a_workers() {
    watched("phases_caller_panic", |_| {
        let pool = Pool::with_spin(1, 1000);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|idx, n, barrier| {
                barrier.wait();
                if idx == n - 1 {
                    panic!("the caller fails");
                }
                panic!("the worker fails");
            })
        }));
        assert_eq!(panic_message(result.unwrap_err()), "the caller fails");
    });
}

#[test]
fn a_participant_that_skips_a_barrier_makes_run_phased_panic_instead_of_hanging() {
    watched("phases_skip", |_| {
        let pool = Pool::with_spin(2, 1000);
        for skipper in 0..3 {
            let result = catch_unwind(AssertUnwindSafe(|| {
                pool.run_phased(|idx, _n, barrier| {
                    barrier.wait();
                    if idx != skipper {
                        barrier.wait();
                    }
                })
            }));
            let message = panic_message(result.expect_err("a skipped barrier must panic"));
            assert!(
                message.contains("different numbers of barriers (fewest 1, most 2)"),
                "participant {skipper} skipped: {message}"
            );
        }
        check_phases(&pool);
    });
}

#[test]
fn an_extra_barrier_in_one_participant_panics_too() {
    watched("phases_extra", |_| {
        let pool = Pool::with_spin(1, 1000);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|idx, _n, barrier| {
                if idx == 0 {
                    barrier.wait();
                }
            })
        }));
        assert!(panic_message(result.unwrap_err()).contains("fewest 0, most 1"));
    });
}

#[test]
fn inline_and_nested_runs_pass_their_barriers_at_once() {
    watched("phases_inline", |_| {
        // A caller-only pool: one participant.
        let alone = Pool::with_spin(0, 0);
        let phases = AtomicUsize::new(0);
        alone.run_phased(|idx, n, barrier| {
            assert_eq!((idx, n), (0, 1));
            for _ in 0..3 {
                barrier.wait();
                phases.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert_eq!(phases.load(Ordering::Relaxed), 3);
        // Nested in a job of the same pool: runs inline, n == 1.
        let pool = Pool::with_spin(1, 1000);
        let nested = AtomicUsize::new(0);
        pool.run_phased(|_, _, outer| {
            pool.run_phased(|idx, n, inner| {
                assert_eq!((idx, n), (0, 1));
                inner.wait();
                nested.fetch_add(1, Ordering::Relaxed);
            });
            outer.wait();
        });
        assert_eq!(nested.load(Ordering::Relaxed), 2);
    });
}

#[test]
fn a_phased_job_inside_another_pools_job_keeps_its_barriers() {
    watched("phases_two_pools", |_| {
        let outer = Pool::with_spin(1, 1000);
        let inner = Pool::with_spin(1, 1000);
        let sums = [AtomicU64::new(0), AtomicU64::new(0)];
        outer.run(|idx, n| {
            if idx == n - 1 {
                // The inner pool's turn is free: its job is dispatched (or
                // inline when another thread holds it); either way whole.
                let parts = [AtomicU64::new(0), AtomicU64::new(0)];
                inner.run_phased(|i, m, barrier| {
                    parts[i].store(i as u64 + 1, Ordering::Relaxed);
                    barrier.wait();
                    if i == m - 1 {
                        let sum: u64 = parts[..m].iter().map(|p| p.load(Ordering::Relaxed)).sum();
                        sums[0].store(sum, Ordering::Relaxed);
                        sums[1].store(m as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        let m = sums[1].load(Ordering::Relaxed);
        assert_eq!(sums[0].load(Ordering::Relaxed), m * (m + 1) / 2);
    });
}

/// Each phase every participant writes its part of a `PhaseOutput`, then
/// after the barrier reads all of it: the safe form of `check_phases`.
#[test]
fn phase_outputs_carry_every_part_to_every_participant_at_every_width() {
    watched("phase output", |stage| {
        for workers in 0..4 {
            stage.set(format!("{workers} workers"));
            let pool = Pool::new(workers);
            let out = pool_core::PhaseOutput::new(vec![0u64; 37]);
            pool.run_phased(|_, _, barrier| {
                for phase in 0..PHASES as u64 {
                    out.write(barrier, |start, part| {
                        for (i, v) in part.iter_mut().enumerate() {
                            *v = phase * 1000 + (start + i) as u64;
                        }
                    });
                    barrier.wait();
                    out.read(barrier, |all| {
                        for (i, &v) in all.iter().enumerate() {
                            assert_eq!(v, phase * 1000 + i as u64, "element {i}, phase {phase}");
                        }
                    });
                    barrier.wait();
                }
            });
            let last = (PHASES as u64 - 1) * 1000;
            assert_eq!(
                out.into_vec(),
                (0..37).map(|i| last + i).collect::<Vec<_>>()
            );
        }
    });
}

#[test]
fn reading_a_phase_output_in_its_writing_phase_panics_instead_of_racing() {
    watched("wrong parity", |_| {
        let pool = Pool::new(2);
        let out = pool_core::PhaseOutput::new(vec![0u32; 8]);
        let err = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|_, _, barrier| {
                out.write(barrier, |_, part| part.fill(1));
                out.read(barrier, |all| all.len());
            })
        }))
        .expect_err("a read in the phase that writes is refused");
        assert!(panic_message(err).contains("this output is written"));
    });
}

#[test]
fn writing_a_phase_output_in_its_reading_phase_panics_instead_of_racing() {
    watched("wrong parity", |_| {
        let pool = Pool::new(2);
        let out = pool_core::PhaseOutput::new(vec![0u32; 8]);
        let err = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|_, _, barrier| {
                out.write(barrier, |_, part| part.fill(1));
                barrier.wait();
                out.write(barrier, |_, part| part.fill(2));
            })
        }))
        .expect_err("a write in the phase after a write is refused");
        assert!(panic_message(err).contains("this output is read"));
    });
}

#[test]
fn one_phase_output_serves_one_job_until_values_mut_hands_it_on() {
    watched("two jobs", |_| {
        let pool = Pool::new(1);
        let other = Pool::new(1);
        let mut out = pool_core::PhaseOutput::new(vec![0u32; 4]);
        pool.run_phased(|_, _, barrier| out.write(barrier, |_, part| part.fill(1)));
        // A second job may be running beside the first (another pool,
        // another thread): refused, even once the first is over...
        let err = catch_unwind(AssertUnwindSafe(|| {
            other.run_phased(|_, _, barrier| out.write(barrier, |_, part| part.fill(2)))
        }))
        .expect_err("a second job is refused");
        assert!(panic_message(err).contains("two jobs"));
        // ...until exclusive access proves no job holds it.
        assert_eq!(out.values_mut(), [1, 1, 1, 1]);
        other.run_phased(|_, _, barrier| out.write(barrier, |_, part| part.fill(2)));
        assert_eq!(out.values_mut(), [2, 2, 2, 2]);
    });
}

#[test]
fn a_phase_reads_one_output_while_it_writes_the_next() {
    watched("read and write", |_| {
        let pool = Pool::new(2);
        let x: Vec<u64> = (0..50).collect();
        let (h, y) = (
            pool_core::PhaseOutput::new(vec![0u64; 50]),
            pool_core::PhaseOutput::new(vec![0u64; 50]),
        );
        pool.run_phased(|_, _, barrier| {
            h.write(barrier, |start, part| {
                for (i, v) in part.iter_mut().enumerate() {
                    *v = 3 * x[start + i];
                }
            });
            barrier.wait();
            h.read(barrier, |h| {
                y.write(barrier, |start, part| {
                    for (i, v) in part.iter_mut().enumerate() {
                        *v = h[start + i] + h[49 - (start + i)];
                    }
                })
            });
        });
        assert!(y.into_vec().iter().all(|&v| v == 3 * 49));
    });
}

#[test]
fn a_write_inside_a_write_of_the_same_output_panics_instead_of_aliasing() {
    watched("nested write", |_| {
        let pool = Pool::new(0);
        let out = pool_core::PhaseOutput::new(vec![0u8; 4]);
        let err = catch_unwind(AssertUnwindSafe(|| {
            pool.run_phased(|_, _, barrier| {
                out.write(barrier, |_, outer| {
                    out.write(barrier, |_, inner| inner[0] = 1);
                    outer[0] = 2;
                })
            })
        }))
        .expect_err("the inner write is refused");
        assert!(panic_message(err).contains("inside another write"));
    });
}

//! `map_reduce`: the same bits on every executor, width, spin policy and
//! call, whatever the machine's load (a reduction folded per participant
//! changes with the participant count; this one is folded per chunk of
//! the data).

use pool_core::{Pool, SpinPolicy};
use pool_matvec::{map_reduce, Serial};
use testkit::watched;

fn values(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.37)
        .collect()
}

fn sum_bits(exec: Option<&Pool>, values: &[f32]) -> u32 {
    map_reduce(
        exec,
        values.len(),
        |r| values[r].iter().sum::<f32>(),
        |a, b| a + b,
    )
    .unwrap()
    .to_bits()
}

#[test]
fn the_sum_has_the_same_bits_on_every_pool_width_policy_and_call() {
    watched("map_reduce_bits", |stage| {
        let len = if cfg!(miri) { 4_096 } else { 1_000_000 };
        let data = values(len);
        let expected = sum_bits(None, &data);
        let calls = if cfg!(miri) { 2 } else { 60 };
        for workers in [0, 1, 2, 3, 5] {
            for policy in [
                SpinPolicy::adaptive(),
                SpinPolicy::Fixed(0),
                SpinPolicy::Fixed(4000),
            ] {
                stage.set(format!("{workers} workers, {policy:?}"));
                let pool = Pool::builder()
                    .workers(workers)
                    .spin_policy(policy)
                    .build()
                    .unwrap();
                for call in 0..calls {
                    assert_eq!(
                        sum_bits(Some(&pool), &data),
                        expected,
                        "{workers} workers, {policy:?}, call {call}"
                    );
                }
            }
        }
        // Other executors: a pool by reference, the serial executor.
        let pool = Pool::new(2);
        let by_ref = map_reduce(&pool, len, |r| data[r].iter().sum::<f32>(), |a, b| a + b);
        assert_eq!(by_ref.unwrap().to_bits(), expected);
        let serial = map_reduce(Serial, len, |r| data[r].iter().sum::<f32>(), |a, b| a + b);
        assert_eq!(serial.unwrap().to_bits(), expected);
    });
}

#[test]
fn several_threads_sharing_one_pool_get_the_same_bits() {
    watched("map_reduce_threads", |_| {
        let data = values(if cfg!(miri) { 4_096 } else { 2_000_000 });
        let expected = sum_bits(None, &data);
        let pool = Pool::new(1);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..if cfg!(miri) { 1 } else { 20 } {
                        assert_eq!(sum_bits(Some(&pool), &data), expected);
                    }
                });
            }
        });
    });
}

#[test]
fn an_empty_range_is_none_and_every_index_is_mapped_once_in_order() {
    assert_eq!(map_reduce(None, 0, |_| 1u32, |a, b| a + b), None);
    let pool = Pool::with_spin(2, 1000);
    for len in [1, 2, 255, 256, 257, 1000, 300_000] {
        let ranges = map_reduce(
            Some(&pool),
            len,
            |r| vec![r],
            |mut a, b| {
                a.extend(b);
                a
            },
        )
        .unwrap();
        assert_eq!(ranges.first().unwrap().start, 0, "{len}");
        assert_eq!(ranges.last().unwrap().end, len, "{len}");
        assert!(
            ranges.windows(2).all(|w| w[0].end == w[1].start),
            "{len}: in order, no gap"
        );
        assert!(ranges.iter().all(|r| !r.is_empty()), "{len}");
    }
}

#[test]
fn an_adaptive_pool_beside_busy_processes_gives_the_same_bits_every_call() {
    watched("map_reduce_busy", |stage| {
        let data = values(if cfg!(miri) { 4_096 } else { 1_000_000 });
        let expected = sum_bits(None, &data);
        // Miri cannot spawn processes; the other tests cover the bits.
        let _busy = if cfg!(miri) {
            None
        } else {
            Some(testkit::BusyProcesses::start(2).expect("busy processes"))
        };
        for workers in [1, 2, 3] {
            stage.set(format!("{workers} workers beside two busy processes"));
            let pool = Pool::new(workers);
            for call in 0..if cfg!(miri) { 1 } else { 200 } {
                assert_eq!(
                    sum_bits(Some(&pool), &data),
                    expected,
                    "{workers} workers, call {call}"
                );
            }
        }
    });
}

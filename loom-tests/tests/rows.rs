//! The row layer (`pool_matvec::RowsInto` over the pool): the cursor that
//! hands out row ranges and `DisjointRows`, which turns each range into a
//! `&mut` through `unsafe`. In every interleaving each row is run exactly
//! once, and no two participants hold the same row at once: under loom
//! `DisjointRows` touches a loom cell per row it hands out, so loom itself
//! reports two unordered holders. The seeded cursor (`rows_seeded.rs`)
//! must be caught.
#![cfg(loom)]

use loom_tests::model;
use pool_core::Pool;
use pool_matvec::RowsInto;

/// Three rows on a one-worker pool: each row written once through its
/// `&mut`, whoever pulled it.
pub fn three_rows_once_each(pool: &Pool) {
    let mut out = [0u8; 3];
    pool.run_rows_into(&mut out, |_, rows| {
        for row in rows {
            *row += 1;
        }
    });
    assert_eq!(out, [1, 1, 1], "a row ran other than once");
}

#[test]
fn every_row_runs_once_and_no_two_participants_hold_the_same_row() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        three_rows_once_each(&pool);
    });
}

#[test]
fn rows_of_two_jobs_in_a_row_each_run_once() {
    model(|| {
        let pool = Pool::with_spin(1, 0);
        three_rows_once_each(&pool);
        let mut out = [0u8; 2];
        pool.run_rows_into(&mut out, |start, rows| {
            for (i, row) in rows.iter_mut().enumerate() {
                *row = (start + i) as u8 + 1;
            }
        });
        assert_eq!(out, [1, 2]);
    });
}

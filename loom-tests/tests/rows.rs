//! The row layer (`pool_matvec::RowsInto` over the pool): the home ranges
//! that hand out row ranges (each participant claims its own from the
//! front, a thief takes another's from the back) and `DisjointRows`, which
//! turns each range into a `&mut` through `unsafe`. In every interleaving
//! each row is run exactly once, and no two participants hold the same row
//! at once: under loom `DisjointRows` touches a loom cell per row it hands
//! out, so loom itself reports two unordered holders. The seeded claim
//! (`rows_seeded.rs`) must be caught.
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
fn every_row_runs_once_when_a_thief_steals_while_the_owner_claims() {
    model(|| {
        // Homes 0..2 (the worker's) and 2..5 (the caller's), claims of
        // one row: whoever finishes first steals from the other while it
        // claims its front (a started home by halves from the back, an
        // untouched one whole).
        let pool = Pool::with_spin(1, 0);
        let mut out = [0u8; 5];
        pool.run_rows_into(&mut out, |_, rows| {
            for row in rows {
                *row += 1;
            }
        });
        assert_eq!(out, [1; 5], "a row ran other than once");
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

#[test]
fn every_row_runs_once_through_the_shared_cursor() {
    model(|| {
        // The cursor the `Broadcast` executors and the phased decode pull
        // from (the pool's row jobs use home ranges).
        loom_tests::three_rows_through_the_cursor(&Pool::with_spin(1, 0));
    });
}

//! The row layer's seeded bug, in a binary of its own (it is switched on
//! for the whole process): rows claimed with a load and a store, by the
//! owner of a home range (which a thief's steal can overlap) or from the
//! shared cursor, so two participants can take the same rows. loom must
//! find the interleaving where both hold them.
#![cfg(loom)]

use loom_tests::model;
use pool_core::Pool;
use pool_matvec::RowsInto;

#[test]
#[should_panic(expected = "Causality violation")]
fn a_claim_that_hands_out_a_range_twice_is_caught() {
    pool_matvec::__loom::seed_claim_bug();
    model(|| {
        let pool = Pool::with_spin(1, 0);
        let mut out = [0u8; 3];
        pool.run_rows_into(&mut out, |_, rows| {
            for row in rows {
                *row += 1;
            }
        });
    });
}

#[test]
#[should_panic(expected = "a row ran other than once")]
fn a_cursor_that_hands_out_a_range_twice_is_caught() {
    pool_matvec::__loom::seed_claim_bug();
    model(|| {
        loom_tests::three_rows_through_the_cursor(&Pool::with_spin(1, 0));
    });
}

//! The row layer's seeded bug, in a binary of its own (it is switched on
//! for the whole process): a cursor that claims a range with a load and a
//! store, so two participants can take the same rows. loom must find the
//! interleaving where both hold them.
#![cfg(loom)]

use loom_tests::model;
use pool_core::Pool;
use pool_matvec::RowsInto;

#[test]
#[should_panic(expected = "Causality violation")]
fn a_cursor_that_hands_out_a_range_twice_is_caught() {
    pool_matvec::__loom::seed_cursor_bug();
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

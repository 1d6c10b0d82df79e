//! The serial gate of the element loops: a call below it runs on the
//! calling thread (no dispatch); one above it is exactly one dispatch. Its
//! own test binary: `dispatch_count` is process-wide.

use pool_core::{dispatch_count, Pool};
use pool_matvec::{for_each_chunk_init, for_each_row, PARALLEL_THRESHOLD};
use testkit::watched;

#[test]
#[cfg_attr(
    miri,
    ignore = "256k elements a loop: minutes under Miri, for a gate that is arithmetic"
)]
fn a_loop_below_the_gate_makes_no_dispatch_and_one_above_it_makes_one() {
    watched("serial_gate", |_| {
        // A fixed budget invites its worker whatever the machine's load.
        let pool = Pool::with_spin(1, 1000);
        let mut small = vec![0u32; PARALLEL_THRESHOLD - 1];
        let before = dispatch_count();
        for_each_row(&pool, &mut small, |i, v| *v = i as u32);
        for_each_chunk_init(
            &pool,
            &mut small,
            64,
            || (),
            |_, i, chunk| chunk.fill(i as u32),
        );
        assert_eq!(dispatch_count(), before, "below the gate: on the caller");
        let mut large = vec![0u32; PARALLEL_THRESHOLD];
        let before = dispatch_count();
        for_each_row(&pool, &mut large, |i, v| *v = i as u32);
        assert_eq!(dispatch_count(), before + 1, "above the gate: one job");
        assert!(large.iter().enumerate().all(|(i, &v)| v == i as u32));
        let before = dispatch_count();
        for_each_chunk_init(
            &pool,
            &mut large,
            64,
            || (),
            |_, i, chunk| chunk.fill(i as u32),
        );
        assert_eq!(dispatch_count(), before + 1, "above the gate: one job");
    });
}

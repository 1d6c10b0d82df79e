//! Everything the common path needs, in one import:
//!
//! ```
//! use pool_matvec::prelude::*;
//! let pool = Pool::for_this_machine();
//! let mut out = vec![0.0f32; 1000];
//! pool.run_rows_into(&mut out, |start, rows| {
//!     for (i, row) in rows.iter_mut().enumerate() {
//!         *row = (start + i) as f32;
//!     }
//! });
//! let sum = map_reduce(&pool, out.len(), |r| out[r].iter().sum::<f32>(), |a, b| a + b);
//! assert_eq!(sum, Some(499_500.0));
//! ```

pub use pool_core::{global, Pool, PoolBuilder};

pub use crate::{
    for_each_chunk_init, for_each_row, map_reduce, Broadcast, Executor, RowParallel, RowsInto,
    Serial, WeightType, Weights,
};

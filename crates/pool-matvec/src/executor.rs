//! What every kernel and row-job entry point takes as its executor: a pool
//! (`&pool`, `pool_core::global()`), `Option<&Pool>` (`None`: on the
//! calling thread), [`Serial`], or a reference to any [`RowParallel`]
//! executor (`&dyn RowParallel`, your own [`crate::Broadcast`] one), with
//! no wrapping at the call site.
//!
//! ```
//! let pool = pool_core::Pool::new(1);
//! let (w, x) = (vec![1.0f32; 4 * 3], vec![1.0f32; 3]);
//! let mut out = vec![0.0f32; 4];
//! pool_matvec::matvec_rows(&pool, &w, &x, &mut out); // a pool
//! pool_matvec::matvec_rows(Some(&pool), &w, &x, &mut out); // maybe a pool
//! pool_matvec::matvec_rows(None, &w, &x, &mut out); // no pool
//! pool_matvec::matvec_rows(pool_matvec::Serial, &w, &x, &mut out);
//! assert_eq!(out, [3.0; 4]);
//! ```

use pool_core::Pool;

use crate::rows::RowParallel;
use crate::serial::Serial;
use crate::shape::should_parallelize;

/// An executor, as the kernels and row jobs take it (module docs).
pub trait Executor {
    /// The row executor this stands for.
    fn rows(&self) -> &dyn RowParallel;
}

/// The serial executor, for `&dyn` hand-outs.
static SERIAL: Serial = Serial;

/// `None` runs on the calling thread.
impl Executor for Option<&Pool> {
    #[inline]
    fn rows(&self) -> &dyn RowParallel {
        match self {
            Some(pool) => *pool,
            None => &SERIAL,
        }
    }
}

impl Executor for Serial {
    #[inline]
    fn rows(&self) -> &dyn RowParallel {
        &SERIAL
    }
}

/// `&pool`, `global()`, `&Serial`, `&your_executor`.
impl<E: RowParallel> Executor for &E {
    #[inline]
    fn rows(&self) -> &dyn RowParallel {
        *self
    }
}

/// An executor chosen at run time.
impl Executor for &dyn RowParallel {
    #[inline]
    fn rows(&self) -> &dyn RowParallel {
        *self
    }
}

/// `exec`'s rows for a job of `rows x cols` element-operations: the
/// calling thread below the serial gate ([`should_parallelize`]), else
/// `exec`.
#[inline]
pub(crate) fn gated(exec: &impl Executor, rows: usize, cols: usize) -> &dyn RowParallel {
    if should_parallelize(rows, cols) {
        exec.rows()
    } else {
        &SERIAL
    }
}

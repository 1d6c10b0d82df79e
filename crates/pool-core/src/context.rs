//! Caller context that rides with each job.
//!
//! A persistent worker keeps its own thread-locals between jobs, but an
//! engine's kernels read thread-local policy set by the caller: which device
//! a dispatch belongs to, whether activations stay in f32 for an exact pass,
//! the request's tracing span. A [`JobContext`] registered on a pool
//! (`PoolBuilder::context`) is captured on the caller at every dispatch,
//! entered on each worker for that job, and the worker's previous value is
//! restored after it, even if the job panics. A pool with no context pays
//! one branch per dispatch.
//!
//! ```
//! use std::cell::Cell;
//! use pool_core::{Pool, ThreadLocalContext};
//!
//! thread_local!(static DEVICE: Cell<u32> = const { Cell::new(0) });
//!
//! let pool = Pool::builder().workers(1).context(ThreadLocalContext::new(&DEVICE)).build().unwrap();
//! DEVICE.with(|d| d.set(1));
//! pool.run(|_, _| assert_eq!(DEVICE.with(Cell::get), 1));
//! ```

use std::any::Any;
use std::cell::Cell;
use std::thread::LocalKey;

/// A value captured on the caller, shared by the job's participants.
pub type Captured = Box<dyn Any + Send + Sync>;

/// What a worker had before [`JobContext::enter`]; stays on that thread.
pub type Previous = Box<dyn Any>;

/// Thread-local caller state carried into every job of a pool.
pub trait JobContext: Send + Sync + 'static {
    /// Reads the calling thread's state when a job is dispatched.
    fn capture(&self) -> Captured;
    /// Installs `captured` on a worker for the job's duration and returns
    /// the worker's previous state.
    fn enter(&self, captured: &Captured) -> Previous;
    /// Puts back what `enter` returned (after the job, also after a panic).
    fn restore(&self, previous: Previous);
}

/// A `thread_local!` `Cell<T>` carried from the caller into each job.
pub struct ThreadLocalContext<T: Copy + Send + Sync + 'static> {
    key: &'static LocalKey<Cell<T>>,
}

impl<T: Copy + Send + Sync + 'static> ThreadLocalContext<T> {
    /// Carries `key`'s value.
    pub fn new(key: &'static LocalKey<Cell<T>>) -> Self {
        ThreadLocalContext { key }
    }
}

impl<T: Copy + Send + Sync + 'static> JobContext for ThreadLocalContext<T> {
    fn capture(&self) -> Captured {
        Box::new(self.key.with(Cell::get))
    }

    fn enter(&self, captured: &Captured) -> Previous {
        let value = *captured
            .downcast_ref::<T>()
            .expect("ThreadLocalContext: captured by this same context");
        Box::new(self.key.with(|cell| cell.replace(value)))
    }

    fn restore(&self, previous: Previous) {
        if let Ok(value) = previous.downcast::<T>() {
            self.key.with(|cell| cell.set(*value));
        }
    }
}

/// Enters the caller's current `tracing` span on every participant, so
/// worker-side events nest under the caller's request span.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingSpanContext;

impl JobContext for TracingSpanContext {
    fn capture(&self) -> Captured {
        Box::new(tracing::Span::current())
    }

    fn enter(&self, captured: &Captured) -> Previous {
        match captured.downcast_ref::<tracing::Span>() {
            Some(span) => Box::new(span.clone().entered()),
            None => Box::new(()),
        }
    }

    fn restore(&self, previous: Previous) {
        // Dropping the `EnteredSpan` exits the span on this thread.
        drop(previous);
    }
}

/// Enters every context for a job; restores them in reverse on drop, so a
/// panicking job still leaves the worker's own values in place.
pub(crate) struct Entered<'a> {
    contexts: &'a [std::sync::Arc<dyn JobContext>],
    previous: Vec<Previous>,
}

impl<'a> Entered<'a> {
    /// Enters the contexts one by one into `slot`, so that if the k-th
    /// `enter` panics, the ones already entered are restored when the
    /// partly built guard in `slot` is dropped by the unwind.
    pub(crate) fn enter(
        contexts: &'a [std::sync::Arc<dyn JobContext>],
        captured: &[Captured],
    ) -> Self {
        let mut entered = Entered {
            contexts,
            previous: Vec::with_capacity(contexts.len()),
        };
        for (context, value) in contexts.iter().zip(captured) {
            let previous = context.enter(value);
            entered.previous.push(previous);
        }
        entered
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // `previous` may be shorter than `contexts` (an `enter` panicked):
        // restore exactly the ones entered, innermost first.
        let entered = self.previous.len();
        for (context, previous) in self.contexts[..entered]
            .iter()
            .zip(self.previous.drain(..))
            .rev()
        {
            context.restore(previous);
        }
    }
}

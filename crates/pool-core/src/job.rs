//! The job descriptor: a type-erased, lifetime-erased `&dyn Fn(idx, n)` plus
//! its participant count.
//!
//! # The one-shot contract
//!
//! A [`Job`] is a borrowed closure with its lifetime erased so it can sit in
//! a worker's inbox. That is sound only because of how the dispatcher uses
//! it (see `dispatch.rs`, "Invariants"):
//!
//! 1. the caller builds a `Job` from a closure that outlives the call to
//!    `run` that published it;
//! 2. a worker calls it only after acquiring the ticket issued for it, and
//!    before its decrement of `remaining`;
//! 3. `run` returns (ending the borrow) only after `remaining` reached 0, so
//!    no worker can call a `Job` whose closure is gone.

/// The closure type every participant runs: `f(idx, n)`.
pub(crate) type JobFn<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// A published job: the closure as a fat pointer, and the participant count.
#[derive(Clone, Copy)]
pub(crate) struct Job {
    f: *const JobFn<'static>,
    participants: usize,
}

fn no_job(_idx: usize, _n: usize) {}

/// What an inbox holds before its first job; never called by a correct
/// dispatcher (an idle worker reads its inbox only after a new ticket).
static NO_JOB: fn(usize, usize) = no_job;

impl Job {
    /// The inbox's value before the first job.
    pub(crate) fn none() -> Job {
        Job {
            f: &NO_JOB as &JobFn<'static> as *const JobFn<'static>,
            participants: 0,
        }
    }

    /// Erases `f`'s lifetime.
    ///
    /// The returned `Job` must not be called after `f`'s borrow ends: the
    /// dispatcher guarantees this by waiting for `remaining == 0` before
    /// `run` returns (contract point 3 above).
    #[inline]
    pub(crate) fn new(f: &JobFn<'_>, participants: usize) -> Job {
        let short: *const JobFn<'_> = f;
        // SAFETY: only the trait object's lifetime bound changes; the two
        // fat-pointer types have identical layout. The erased pointer is
        // dereferenced only while the borrow is live (one-shot contract).
        let f = unsafe { std::mem::transmute::<*const JobFn<'_>, *const JobFn<'static>>(short) };
        Job { f, participants }
    }

    /// Runs participant `idx`'s share.
    ///
    /// # Safety
    ///
    /// The closure this job was built from must still be borrowed by the
    /// `run` call that published it: the caller holds a ticket for this job
    /// and has not yet decremented `remaining` for it.
    #[inline]
    pub(crate) unsafe fn call(&self, idx: usize) {
        // SAFETY: the function's contract: the publishing `run` is still
        // waiting on `remaining`, so the closure is alive.
        let f = unsafe { &*self.f };
        f(idx, self.participants);
    }
}

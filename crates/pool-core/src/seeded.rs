//! Seeded bugs for the loom models: each reinstates one bug this project
//! has had (or nearly had), so the models prove they catch it. They exist
//! only in `--cfg loom` builds and are chosen per pool
//! (`PoolBuilder::seeded_bug`), so one model build checks the correct
//! protocol and every seeded variant side by side. In normal builds
//! [`Shared::has_bug`](crate::dispatch::Shared::has_bug) is a constant
//! `false` and the branches vanish.

/// A bug to reinstate in one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(loom), allow(dead_code, unreachable_pub))]
pub enum SeededBug {
    /// The worker reads its last-seen ticket live at start instead of
    /// starting from 0 (invariant 4): a ticket issued before the thread
    /// first runs is taken as already seen.
    LiveTicketBaseline,
    /// The caller's SeqCst fence between its ticket stores and its `parked`
    /// loads is gone: a parking worker and the caller can each miss the
    /// other's store (a lost wakeup).
    MissingWakeFence,
    /// The nesting check sees only the innermost pool, and a thread nested
    /// in another pool's job blocks on a busy turn (the protocol before
    /// issue 11): A -> B -> A deadlocks.
    NestingSeesInnermostOnly,
    /// `run_sides` counts far threads before the job and each participant
    /// re-reads the flags: an inline run skips a side.
    FarCountOutsideJob,
    /// `run_phased`'s participants count their arrival at a barrier with a
    /// `Relaxed` RMW: a participant past the barrier may miss a write
    /// another made before it.
    BarrierArrivalRelaxed,
    /// A worker without a spinner slot does not give its place in the
    /// yielders' count back after a job: one leaked count per job, and
    /// every slot-holding worker then yields at every checkpoint for good.
    YielderCountLeaked,
    /// A worker's `remaining` decrement is `Relaxed`: the caller can see
    /// the count reach 0 without the worker's writes, and
    /// `Pool::reduce` reads a slot the worker may still be writing.
    CompletionRelaxed,
    /// The caller announces that it sleeps at the join with a plain store
    /// of `remaining | CALLER_ASLEEP` instead of a compare-exchange
    /// (`sleep.rs`): a decrement between its load and its store is lost,
    /// and the caller sleeps for ever.
    SleepFlagByStore,
    /// A departing `JobBarrier` participant skips the fence before it
    /// looks for sleepers: a participant asleep at a barrier the departed
    /// one will never reach can sleep for ever.
    MissingDepartureFence,
    /// `unbind_two_nodes` holds the saved-masks lock across the job that
    /// restores the masks: a second unbind from inside another caller's
    /// job waits for the lock while the first waits for that job's turn.
    LockHeldAcrossJob,
    /// A worker takes a seat without checking that the seats word names
    /// its ticket's job (`tickets.rs`): a worker late for a withdrawn job
    /// takes a seat of the next one and reads that job's inbox through a
    /// ticket that never published it.
    SeatFromStaleWord,
}

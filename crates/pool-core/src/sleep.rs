//! Sleeping through a long wait: the caller at its join, participants at a
//! `JobBarrier`.
//!
//! Waiting spins, then yields. A yield returns at once when nothing else
//! is runnable, so a wait of hundreds of milliseconds (a worker's long
//! share, or one descheduled by a busy machine) used to burn its CPU in
//! `sched_yield`: a 500 ms share cost the waiting caller about 300 ms of
//! CPU. After [`SLEEP_AFTER`] of waiting, a waiter parks instead, and
//! whoever completes what it waits for wakes it.
//!
//! # Memory ordering
//!
//! The lost-wakeup argument is the dispatcher's **wake** handshake with
//! the roles turned round (dispatch.rs, "Memory ordering"):
//! - a waiter registers its thread, increments `sleepers`, issues a
//!   `SeqCst` fence, then re-checks its condition before each `park`;
//! - a completer makes the condition true (its own atomic write: the
//!   last `remaining` decrement, a barrier arrival, a departure), issues a
//!   `SeqCst` fence, then loads `sleepers` and unparks every registered
//!   thread if it is non-zero.
//!
//! The two fences are totally ordered: either the completer sees the
//! waiter's increment and unparks it (`park` keeps the token if the
//! unpark comes first), or the waiter's re-check sees the completed
//! condition and does not park. `sleepers` is `Relaxed`: the fences order
//! it. The waiter list is a lock, taken only on this slow path. A stale
//! entry (a thread that has just stopped waiting) gets a spurious unpark,
//! which `park`'s callers must tolerate anyway.

use std::time::Duration;

use crate::sync::{fence, lock, thread, AtomicUsize, Mutex, Ordering, Thread};

/// How long a waiter spins and yields before it parks. Long against a
/// hot fork-join (microseconds) and a futex wake-up (tens of µs), short
/// against a time slice: a waiter this far in is waiting for a thread the
/// scheduler is not running, or for a long share.
pub(crate) const SLEEP_AFTER: Duration = Duration::from_millis(1);

/// Yields between two checks of the clock for [`SLEEP_AFTER`] (under loom,
/// whose clock stands still, every wait long enough to yield goes on to
/// park, so the models explore the handshake).
pub(crate) const YIELDS_PER_SLEEP_CHECK: u64 = if cfg!(loom) { 1 } else { 64 };

/// The threads parked until a condition holds (module docs).
pub(crate) struct Sleepers {
    /// Threads registered in `waiters` now.
    sleepers: AtomicUsize,
    waiters: Mutex<Vec<Thread>>,
}

impl Sleepers {
    pub(crate) fn new() -> Sleepers {
        Sleepers {
            sleepers: AtomicUsize::new(0),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Parks the calling thread until `done()` holds. `done` must become
    /// true only through a write that its completer follows with
    /// [`Sleepers::wake`].
    #[cold]
    pub(crate) fn sleep_until(&self, done: impl Fn() -> bool) {
        let me = thread::current();
        let id = me.id();
        lock(&self.waiters).push(me);
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        // Pairs with the completer's fence in `wake` (module docs).
        fence(Ordering::SeqCst);
        while !done() {
            thread::park();
        }
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        lock(&self.waiters).retain(|waiter| waiter.id() != id);
    }

    /// Wakes every parked waiter; call after the write that completes
    /// their condition. Costs a fence and a load when nobody sleeps.
    /// `bug`: the seeded bug `MissingSleepFence` drops the fence.
    #[inline]
    pub(crate) fn wake(&self, bug: bool) {
        if !bug {
            // Pairs with the waiter's fence in `sleep_until`.
            fence(Ordering::SeqCst);
        }
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.wake_all();
        }
    }

    #[cold]
    fn wake_all(&self) {
        for waiter in lock(&self.waiters).iter() {
            waiter.unpark();
        }
    }
}

/// Whether a wait that has yielded `yields` times since `since` (clock
/// ticks) should park now.
#[inline]
pub(crate) fn time_to_sleep(yields: u64, since: u64, ns_per_tick: f64) -> bool {
    if !yields.is_multiple_of(YIELDS_PER_SLEEP_CHECK) {
        return false;
    }
    if cfg!(loom) {
        return true;
    }
    let waited_ns = crate::clock::ticks().wrapping_sub(since) as f64 * ns_per_tick;
    waited_ns >= SLEEP_AFTER.as_nanos() as f64
}

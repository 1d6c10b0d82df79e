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
//! # No lost wakeup, and no fence on the hot path
//!
//! A sleeper announces itself *in the very word it waits on*, by a
//! read-modify-write: the caller sets [`CALLER_ASLEEP`] in `remaining`
//! with a compare-exchange that also checks the count is not 0; a barrier
//! participant adds [`SLEEPER`] to the arrival word, checking the barrier
//! is still incomplete. The completer's own read-modify-write (the last
//! decrement, the last arrival) returns the word's previous value, flag or
//! sleeper count included. Read-modify-writes of one word are totally
//! ordered, so either the sleeper's comes first (the completer sees it and
//! unparks) or the completer's does (the sleeper's compare-exchange finds
//! the count done and does not park). No fence is needed, on either side:
//! a first version paired fences as the dispatcher's **wake** handshake
//! does, and the completer's `SeqCst` fence on every job cost the hot
//! fork-join about 50 ns (187 against 118-133 ns).
//!
//! The waiters' threads are registered in a list (a lock taken only on
//! this slow path) before they announce themselves; the announcing RMW is
//! `Release` and the completer's `Acquire`, so a completer that sees the
//! announcement finds the thread in the list. A stale entry (a thread that
//! has just stopped waiting) gets a spurious unpark, which `park`'s
//! callers must tolerate anyway. A departure from a `JobBarrier` (a
//! participant leaving its job) is a different word: it keeps the fence
//! pair (`Sleepers::wake_fenced`), once per participant per job.

use std::time::Duration;

use crate::sync::{fence, lock, thread, Mutex, Ordering, Thread};

/// How long a waiter spins and yields before it parks. Long against a
/// hot fork-join (microseconds) and a futex wake-up (tens of µs), short
/// against a time slice: a waiter this far in is waiting for a thread the
/// scheduler is not running, or for a long share.
pub(crate) const SLEEP_AFTER: Duration = Duration::from_millis(1);

/// Yields between two checks of the clock for [`SLEEP_AFTER`] (under loom,
/// whose clock stands still, every wait long enough to yield goes on to
/// park, so the models explore the handshake).
pub(crate) const YIELDS_PER_SLEEP_CHECK: u64 = if cfg!(loom) { 1 } else { 64 };

/// The flag in `remaining` of a caller asleep at its join: the top bit;
/// the count is the rest.
pub(crate) const CALLER_ASLEEP: usize = 1 << (usize::BITS - 1);

/// One sleeper in a `JobBarrier`'s arrival word: its top 16 bits count
/// the sleepers, the low 48 the arrivals (2^48 arrivals: no job lives to
/// see them).
pub(crate) const SLEEPER: u64 = 1 << 48;

/// The arrival count of a `JobBarrier`'s word.
pub(crate) const ARRIVALS: u64 = SLEEPER - 1;

/// The threads parked on one word.
pub(crate) struct Sleepers {
    waiters: Mutex<Vec<Thread>>,
}

impl Sleepers {
    pub(crate) fn new() -> Sleepers {
        Sleepers {
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// With room for `n` sleepers made now, so that registering up to `n`
    /// allocates nothing: a pool's join sleepers live as long as the pool,
    /// and the caller that parks at a join is between a decode's jobs.
    pub(crate) fn with_room(n: usize) -> Sleepers {
        Sleepers {
            waiters: Mutex::new(Vec::with_capacity(n)),
        }
    }

    /// Registers the calling thread, for a wake that may come as soon as
    /// it announces itself.
    #[cold]
    pub(crate) fn register(&self) -> thread::ThreadId {
        let me = thread::current();
        let id = me.id();
        lock(&self.waiters).push(me);
        id
    }

    /// Takes the calling thread off the list.
    #[cold]
    pub(crate) fn unregister(&self, id: thread::ThreadId) {
        lock(&self.waiters).retain(|waiter| waiter.id() != id);
    }

    /// Unparks every registered thread.
    #[cold]
    pub(crate) fn wake_all(&self) {
        for waiter in lock(&self.waiters).iter() {
            waiter.unpark();
        }
    }

    /// For a completer whose write is to another word than the sleepers
    /// announce themselves in (a departure): a `SeqCst` fence, then
    /// `sleeping()`; the sleepers fence between announcing and checking.
    #[cold]
    pub(crate) fn wake_fenced(&self, sleeping: impl Fn() -> bool, fence_dropped: bool) {
        if !fence_dropped {
            // Pairs with the fence in a sleeper's `wait_fenced`.
            fence(Ordering::SeqCst);
        }
        if sleeping() {
            self.wake_all();
        }
    }
}

/// The fence a sleeper issues between announcing itself and checking the
/// words a departure writes (pairs with `Sleepers::wake_fenced`).
#[inline]
pub(crate) fn announce_fence() {
    fence(Ordering::SeqCst);
}

/// Parks the calling thread in one of the pool's own waits (a join, a
/// barrier), counting the park: the wake trials tell an engine's pause
/// from a preemption by the times a thread blocked outside these
/// (`trials.rs`).
#[inline]
pub(crate) fn park_in_pool() {
    #[cfg(not(loom))]
    PARKS_IN_POOL.with(|parks| parks.set(parks.get() + 1));
    thread::park();
}

#[cfg(not(loom))]
std::thread_local! {
    // No destructor: readable from any thread-local destructor too.
    static PARKS_IN_POOL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The calling thread's parks in the pool's own waits so far (0 under
/// loom, where nothing reads it).
pub(crate) fn parks_in_pool() -> u64 {
    #[cfg(not(loom))]
    return PARKS_IN_POOL.with(std::cell::Cell::get);
    #[cfg(loom)]
    0
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

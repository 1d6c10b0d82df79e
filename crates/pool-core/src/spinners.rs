//! The process-wide spinner budget: one per process, over every pool.
//!
//! Every thread that burns a CPU while waiting needs one: an adaptive
//! worker that spins between jobs (it keeps its slot while it runs one), and
//! a caller thread that dispatches jobs and waits at their barriers. Their
//! sum never exceeds [`spinner_limit`], the CPUs this process may use
//! (`pool_topo::usable_cpus`: the process's affinity set, not the asking
//! thread's, bounded by the cgroup quota), so spinners never hold the CPU a
//! caller or a working participant needs.
//!
//! - Workers take a slot with a compare-exchange when they start spinning
//!   and give it back when they park or exit. A worker holding a slot that
//!   finds the budget
//!   overdrawn (a caller became active after it took its slot) gives its
//!   slot back: checked when a wait starts and every 64 spins. A worker
//!   without a slot stays awake yielding on every spin (parks at once under
//!   a cgroup quota); while any does, slot holders yield every 64 spins, so
//!   a yielder sharing a spinner's CPU gets it within microseconds.
//! - A caller thread becomes *active* at its first dispatch and counts
//!   until it blocks waiting for another caller's turn or exits (a
//!   thread-local guard releases it). Callers are never refused: a caller
//!   must run its share whatever the budget says, so the count may exceed
//!   the limit, and then no worker spins.
//!
//! Fixed spin budgets (`SpinPolicy::Fixed`) do not take worker slots; their
//! callers still count. Everything here is a hint for how long to spin,
//! never for whether a job is seen, so `std` atomics with `Relaxed` suffice
//! (also under loom, where callers are not counted and the limit is set by
//! the model).

#[cfg(not(loom))]
use crate::sync::process::AtomicU64;
use crate::sync::process::{AtomicUsize, Ordering};

/// Adaptive workers holding a slot now, over every pool.
static WORKERS: AtomicUsize = AtomicUsize::new(0);
/// Active caller threads now.
static CALLERS: AtomicUsize = AtomicUsize::new(0);
/// Adaptive workers awake without a slot (yielding on every spin) now.
static YIELDERS: AtomicUsize = AtomicUsize::new(0);
/// The most workers + callers ever counted at once while a worker took a
/// slot (for tests and `pool bench`).
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);

/// The process-wide limit: the CPUs this process may use, computed once.
/// Whichever thread asks first (a pinned worker, a pinned caller), the
/// answer is the process's, not that thread's.
pub fn spinner_limit() -> usize {
    #[cfg(not(loom))]
    {
        static LIMIT: crate::fork_safe::OnceU64 = crate::fork_safe::OnceU64::new();
        LIMIT.get_or_init(|| pool_topo::usable_cpus().max(1) as u64) as usize
    }
    #[cfg(loom)]
    {
        LOOM_LIMIT.load(Ordering::Relaxed)
    }
}

/// The limit under loom: none unless a model sets one (models that do live
/// in a test binary of their own, so no other model sees it).
#[cfg(loom)]
pub(crate) static LOOM_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Takes a worker slot if workers + callers leave one free. A
/// compare-exchange loop, so workers never overshoot; it runs when a worker
/// starts spinning after a park, never per job.
pub(crate) fn try_acquire() -> bool {
    let limit = spinner_limit();
    let mut current = WORKERS.load(Ordering::Relaxed);
    loop {
        let callers = CALLERS.load(Ordering::Relaxed);
        if current + callers >= limit {
            return false;
        }
        match WORKERS.compare_exchange_weak(
            current,
            current + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                HIGH_WATER.fetch_max(current + 1 + callers, Ordering::Relaxed);
                return true;
            }
            Err(now) => current = now,
        }
    }
}

/// Gives a worker slot back.
pub(crate) fn release() {
    WORKERS.fetch_sub(1, Ordering::Relaxed);
}

/// A worker without a slot starts (`true`) or stops waiting awake.
pub(crate) fn yielding(starts: bool) {
    if starts {
        YIELDERS.fetch_add(1, Ordering::Relaxed);
    } else {
        YIELDERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether slot-less workers are waiting awake: a slot holder then yields
/// every 64 spins, so one that shares its CPU gets it within a few µs when
/// its job comes.
#[inline]
pub(crate) fn others_yielding() -> bool {
    YIELDERS.load(Ordering::Relaxed) != 0
}

/// Whether workers + callers exceed the limit: a worker holding a slot
/// then gives it back.
#[inline]
pub(crate) fn overdrawn() -> bool {
    WORKERS.load(Ordering::Relaxed) + CALLERS.load(Ordering::Relaxed) > spinner_limit()
}

/// In a forked child: the parent's spinners and callers do not exist there
/// (the thread that forked re-registers at its next dispatch). Their
/// recent-caller stamps go too: a stamp of a parent thread that was inside
/// an inline job would otherwise count as a busy caller for ever, and the
/// child's adaptive pools would run every job inline. The forking thread
/// keeps its own slot (it still exists, and may be inside a job now).
#[cfg_attr(any(loom, miri, not(unix)), allow(dead_code))]
pub(crate) fn reset_after_fork() {
    WORKERS.store(0, Ordering::Relaxed);
    CALLERS.store(0, Ordering::Relaxed);
    YIELDERS.store(0, Ordering::Relaxed);
    #[cfg(not(loom))]
    {
        let mine = CALLER
            .try_with(|caller| {
                caller.active.set(false);
                caller.last_scan.set((0, 0, 0));
                caller.recent_slot.get()
            })
            .unwrap_or(NO_SLOT);
        for (index, slot) in RECENT.iter().enumerate() {
            if index != mine {
                slot.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Caller threads whose last dispatch time is kept (the first 16 to
/// dispatch; later ones are not counted as recent).
#[cfg(not(loom))]
const RECENT_SLOTS: usize = 16;
/// Each tracked caller's last dispatch, in `clock::ticks` (0: free slot).
#[cfg(not(loom))]
static RECENT: [crossbeam_utils::CachePadded<AtomicU64>; RECENT_SLOTS] =
    [const { crossbeam_utils::CachePadded::new(AtomicU64::new(0)) }; RECENT_SLOTS];

/// Slots ever claimed: claims take the lowest free slot, so the scan reads
/// only `RECENT[..RECENT_CLAIMED]` (one line with one caller thread).
#[cfg(not(loom))]
static RECENT_CLAIMED: AtomicUsize = AtomicUsize::new(0);

/// No slot.
#[cfg(not(loom))]
const NO_SLOT: usize = usize::MAX;

/// A `RECENT` value: the caller is running a job on its own thread now
/// (counted as recent however long ago it started).
#[cfg(not(loom))]
const IN_JOB: u64 = u64::MAX;

/// This thread's caller registration; releases it when the thread exits.
#[cfg(not(loom))]
struct CallerRegistration {
    active: std::cell::Cell<bool>,
    /// Index into `RECENT`, or `NO_SLOT`.
    recent_slot: std::cell::Cell<usize>,
    /// The last scan of `RECENT`: `(ticks, window, callers)`
    /// ([`recent_callers`] reuses it for [`RESCAN_PER_WINDOW`] of a window).
    last_scan: std::cell::Cell<(u64, u64, usize)>,
}

#[cfg(not(loom))]
impl Drop for CallerRegistration {
    fn drop(&mut self) {
        if self.active.get() {
            CALLERS.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(slot) = RECENT.get(self.recent_slot.get()) {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(not(loom))]
crate::sync::process::thread_local! {
    static CALLER: CallerRegistration = const {
        CallerRegistration {
            active: std::cell::Cell::new(false),
            recent_slot: std::cell::Cell::new(NO_SLOT),
            last_scan: std::cell::Cell::new((0, 0, 0)),
        }
    };
}

/// A caller rescans the other callers' slots at most this many times per
/// window, and counts from its last scan in between.
#[cfg(not(loom))]
const RESCAN_PER_WINDOW: u64 = 8;

/// Records a dispatch by the calling thread at `now` and returns how many
/// caller threads dispatched within `window` ticks of it (this one
/// included). Scans the claimed slots' lines, each written only by its own
/// caller: with one caller thread, one line that stays in this core's
/// cache. With two or more, every line another caller writes is a cache
/// miss to read, and every read takes this caller's line away from the
/// core that writes it; so a scan that found another caller is reused for
/// an eighth of the window ([`reusable_scan`]): a caller that goes is seen
/// that much later, one that appears at once. Two threads on 2 CPUs, each
/// with its own pool, running empty jobs that both run inline: 54-76 ns a
/// job when every job scanned, 26-33 ns with the scans reused.
#[inline]
pub(crate) fn recent_callers(now: u64, window: u64) -> usize {
    #[cfg(not(loom))]
    {
        let (mine, reused) = CALLER
            .try_with(|caller| {
                let reused = reusable_scan(caller.last_scan.get(), now, window);
                if caller.recent_slot.get() == NO_SLOT {
                    // Claim a free slot (0) with a CAS; none free: untracked.
                    let claimed = RECENT.iter().position(|slot| {
                        slot.compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok()
                    });
                    if let Some(index) = claimed {
                        RECENT_CLAIMED.fetch_max(index + 1, Ordering::Relaxed);
                    }
                    caller.recent_slot.set(claimed.unwrap_or(NO_SLOT - 1));
                }
                (caller.recent_slot.get(), reused)
            })
            .unwrap_or((NO_SLOT, None));
        if let Some(slot) = RECENT.get(mine) {
            slot.store(now.max(1), Ordering::Relaxed);
        }
        if let Some(callers) = reused {
            return callers;
        }
        // Relaxed: a slot claimed a moment ago by another thread and missed
        // here only delays its count by a dispatch.
        let claimed = RECENT_CLAIMED.load(Ordering::Relaxed).min(RECENT_SLOTS);
        let callers = RECENT[..claimed]
            .iter()
            .filter(|slot| busy_within(slot.load(Ordering::Relaxed), now, window))
            .count();
        let _ = CALLER.try_with(|caller| caller.last_scan.set((now, window, callers)));
        callers
    }
    // Callers are not tracked under loom (see the module docs).
    #[cfg(loom)]
    {
        let _ = (now, window);
        0
    }
}

/// The count a scan `(ticks, window, callers)` still gives at `now` for
/// `window`, if it may be reused: only a scan that found other callers,
/// for [`RESCAN_PER_WINDOW`] of the same window. One that found none is
/// rescanned at the next dispatch, so a caller that appears is seen at
/// once: a stale "alone" would invite workers onto the CPU the other
/// caller runs on, a stale "not alone" only runs a job inline.
#[cfg(not(loom))]
#[inline]
fn reusable_scan(scan: (u64, u64, usize), now: u64, window: u64) -> Option<usize> {
    let (at, scanned_window, callers) = scan;
    (callers >= 2 && scanned_window == window && now >= at && now - at < window / RESCAN_PER_WINDOW)
        .then_some(callers)
}

/// Whether a recent-caller slot stamped `last` (0: free; `IN_JOB`: in a
/// job now) counts as busy at `now`. A stamp after `now` counts: its
/// caller stamped it after this one read the clock, and a wrapping
/// difference read it as 2^64 ticks old instead (two callers with
/// 20 µs jobs on 2 CPUs each missed the other in ~2 % of looks).
#[cfg(not(loom))]
#[inline]
fn busy_within(last: u64, now: u64, window: u64) -> bool {
    last != 0 && (last >= now || now - last < window)
}

/// Runs `job` (a job the calling thread runs alone, inline) with the
/// thread marked busy in its recent-caller slot, then stamps the slot with
/// the time it ended. Without the mark, an inline job longer than the
/// window (a 32000-row classifier: ~8 ms) made its caller look idle to
/// another caller, which then invited a worker that had no CPU to run on
/// and waited milliseconds for it (one pool shared by two callers on 2
/// CPUs: 0.83x the serial loop).
#[inline]
pub(crate) fn as_busy_caller<R>(job: impl FnOnce() -> R) -> R {
    #[cfg(not(loom))]
    {
        /// Stamps the end time, also when the job unwinds.
        struct Ended(usize);
        impl Drop for Ended {
            fn drop(&mut self) {
                RECENT[self.0].store(crate::clock::ticks().max(1), Ordering::Relaxed);
            }
        }
        let slot = CALLER
            .try_with(|caller| caller.recent_slot.get())
            .ok()
            .filter(|&slot| slot < RECENT_SLOTS);
        let _ended = slot.map(|slot| {
            RECENT[slot].store(IN_JOB, Ordering::Relaxed);
            Ended(slot)
        });
        job()
    }
    #[cfg(loom)]
    job()
}

/// Counts the calling thread as an active caller (idempotent: one
/// thread-local check per dispatch once it is).
#[inline]
pub(crate) fn caller_active() {
    #[cfg(not(loom))]
    {
        // `try_with`: a pool used from another thread-local's destructor
        // simply goes uncounted.
        let _ = CALLER.try_with(|caller| {
            if !caller.active.replace(true) {
                CALLERS.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// The calling thread is about to block on another caller's turn: it burns
/// no CPU until it gets it.
#[inline]
pub(crate) fn caller_blocked() {
    #[cfg(not(loom))]
    {
        let _ = CALLER.try_with(|caller| {
            if caller.active.replace(false) {
                CALLERS.fetch_sub(1, Ordering::Relaxed);
            }
        });
    }
}

/// Adaptive workers waiting without a spinner slot now (they yield on
/// every spin), over all pools.
pub fn yielding_workers() -> usize {
    YIELDERS.load(Ordering::Relaxed)
}

/// Adaptive workers holding spinner slots now, over all pools.
pub fn spinning_workers() -> usize {
    WORKERS.load(Ordering::Relaxed)
}

/// Caller threads counted as active now, over all pools.
pub fn active_callers() -> usize {
    CALLERS.load(Ordering::Relaxed)
}

/// The most workers + active callers counted at once when a worker took a
/// slot; never more than [`spinner_limit`].
pub fn spinning_workers_high_water() -> usize {
    HIGH_WATER.load(Ordering::Relaxed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_a_recent_scan_that_found_another_caller_is_reused() {
        let window = 8_000;
        let found_two = (1_000_000, window, 2);
        assert_eq!(reusable_scan(found_two, 1_000_999, window), Some(2));
        assert_eq!(
            reusable_scan(found_two, 1_001_000, window),
            None,
            "an eighth of the window later: rescanned"
        );
        assert_eq!(
            reusable_scan(found_two, 999_999, window),
            None,
            "a clock behind the scan"
        );
        assert_eq!(
            reusable_scan(found_two, 1_000_001, 2 * window),
            None,
            "another window"
        );
        assert_eq!(
            reusable_scan((1_000_000, window, 1), 1_000_001, window),
            None,
            "alone: a caller that appears must be seen at once"
        );
        assert_eq!(reusable_scan((0, 0, 0), 5, 0), None, "never scanned");
    }

    #[test]
    fn a_caller_stamped_after_the_clock_was_read_counts_as_busy() {
        let (now, window) = (1_000_000, 5_000);
        assert!(busy_within(now + 1, now, window), "stamped just after");
        assert!(busy_within(IN_JOB, now, window), "in a job");
        assert!(busy_within(now, now, window));
        assert!(busy_within(now - window + 1, now, window));
        assert!(!busy_within(now - window, now, window), "a window ago");
        assert!(!busy_within(0, now, window), "a free slot");
    }
}

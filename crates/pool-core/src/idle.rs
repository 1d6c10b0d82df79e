//! How a worker waits for its next ticket: spin, then park.
//!
//! State transitions of a worker's `parked` flag (only the worker writes it):
//! `RUNNING => PARKED` just before `thread::park`, `PARKED => RUNNING` right
//! after it returns. See `dispatch.rs` ("Memory ordering", **wake**) for the
//! fence pair that makes a lost wakeup impossible.

use crate::clock;
use crate::dispatch::{Shared, OVERSUBSCRIBED_SPINS_BEFORE_YIELD};
use crate::policy::{release_spinner, ticks_per_spin, try_acquire_spinner, GapWindow};
use crate::sync::{fence, process, spin_loop, thread, Ordering, SPIN_SCALE_SHIFT};

/// A worker with a CPU of its own still yields this often (~45 µs of
/// spinning on the CI VM): one cheap syscall that bounds how long it can
/// hold a CPU the scheduler made it share with its caller.
const SPINS_BETWEEN_YIELDS: u64 = 4096;

/// Why a worker stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A new ticket: the value now in the worker's inbox.
    Ticket(usize),
    /// The pool is being dropped.
    Shutdown,
}

/// A worker's waiting state across jobs (adaptive mode).
pub(crate) struct WaitState {
    gaps: GapWindow,
    /// Holds one of the process-wide spinner slots.
    has_spinner_slot: bool,
    /// The first wait spans the thread's start-up, not a gap between jobs.
    first_wait: bool,
}

impl WaitState {
    pub(crate) fn new() -> Self {
        WaitState {
            gaps: GapWindow::new(),
            has_spinner_slot: false,
            first_wait: true,
        }
    }

    /// Gives back the spinner slot, if held (when parking or exiting).
    pub(crate) fn release_slot(&mut self) {
        if self.has_spinner_slot {
            self.has_spinner_slot = false;
            release_spinner();
        }
    }
}

/// Waits until worker `index`'s ticket differs from `seen`, or shutdown.
///
/// The budget comes from the spin policy (`policy.rs`). Not oversubscribed:
/// a changed `epoch` (a limited job this worker was not invited to) re-arms
/// the budget: the pool is busy and the next job is microseconds away.
/// Oversubscribed: yields every 64 spins and re-arms only on its own
/// tickets (by returning), so idle spinners do not hold the CPUs invited
/// workers need. Under foreign load (adaptive), yields every spin. Budget
/// spent: park.
#[inline]
pub(crate) fn wait_for_ticket(
    shared: &Shared,
    index: usize,
    seen: usize,
    state: &mut WaitState,
) -> Wake {
    let slot = &shared.slots[index];
    let settings = &*shared.settings;
    let started = clock::ticks();
    let adaptive = settings.linger_ns.load(process::Ordering::Relaxed) != 0;
    let mut yield_every_spin = false;
    // Adaptive: a deadline in ticks (checked every 64 spins) and, as a
    // second cap, the linger in spins. Fixed: the budget in spins.
    let (budget, deadline_ticks) = if adaptive {
        let linger = settings.linger_ticks.load(process::Ordering::Relaxed);
        let floor = settings.floor_ticks.load(process::Ordering::Relaxed);
        let mut ticks = state.gaps.budget(linger, floor);
        if settings.contended.load(process::Ordering::Relaxed) {
            ticks = ticks.min(floor);
            yield_every_spin = true;
        }
        if !state.has_spinner_slot {
            state.has_spinner_slot = try_acquire_spinner();
        }
        let spins = settings.linger_spins.load(process::Ordering::Relaxed);
        if state.has_spinner_slot {
            (spins, ticks)
        } else {
            (0, 0)
        }
    } else {
        (settings.spin_budget.load(Ordering::Relaxed), u64::MAX)
    };
    let budget = budget >> SPIN_SCALE_SHIFT;
    let mut spins = 0usize;
    let mut spin_started = started;
    let mut parked = false;
    let mut spun = 0u64;
    let mut epoch = shared.epoch.load(Ordering::Relaxed);
    let counters = &*slot.counters;
    loop {
        // Acquire: pairs with the caller's Release ticket store, making the
        // inbox it wrote before visible (dispatch.rs, **publish**).
        let ticket = slot.inbox.ticket.load(Ordering::Acquire);
        if ticket != seen {
            counters.spins.add(spun);
            if parked {
                counters.jobs_after_park.add(1);
            } else {
                counters.jobs_hot.add(1);
            }
            if adaptive && !state.first_wait {
                let linger = settings.linger_ticks.load(process::Ordering::Relaxed);
                // A hot pickup reads no clock (it would delay the job): the
                // gap is its spins at the calibrated ticks per spin.
                let gap = if parked {
                    clock::ticks().wrapping_sub(started)
                } else {
                    (spun as f64 * ticks_per_spin()) as u64
                };
                state.gaps.record(gap, linger);
            }
            state.first_wait = false;
            return Wake::Ticket(ticket);
        }
        // Acquire: pairs with the Release store in `Pool::drop`.
        if settings.shutdown.load(Ordering::Acquire) {
            counters.spins.add(spun);
            return Wake::Shutdown;
        }
        // The clock is read every 64 spins, or every spin when each spin is
        // a yield (which may take a whole time slice).
        let in_time = deadline_ticks == u64::MAX
            || (!spins.is_multiple_of(64) && !yield_every_spin)
            || clock::ticks().wrapping_sub(spin_started) < deadline_ticks;
        if spins < budget && in_time {
            spins += 1;
            spun += 1;
            if yield_every_spin {
                thread::yield_now();
            } else if settings.oversubscribed {
                if spins.is_multiple_of(OVERSUBSCRIBED_SPINS_BEFORE_YIELD as usize) {
                    thread::yield_now();
                } else {
                    spin_loop();
                }
            } else {
                if spun.is_multiple_of(SPINS_BETWEEN_YIELDS) {
                    // Even with a CPU per thread, the scheduler may have put
                    // this worker on its caller's CPU (wake affinity): a
                    // spinner that never yields would keep the caller from
                    // seeing the job done for the whole budget.
                    thread::yield_now();
                }
                spin_loop();
                // Relaxed: a hint; a stale value only delays a re-arm.
                let now = shared.epoch.load(Ordering::Relaxed);
                if now != epoch {
                    epoch = now;
                    spins = 0;
                    spin_started = clock::ticks();
                }
            }
            continue;
        }
        state.release_slot();
        if park(shared, index, seen) {
            parked = true;
        }
    }
}

/// `RUNNING => PARKED => RUNNING`, unless the ticket or shutdown arrived
/// in between. A spurious wake just returns; the caller's loop re-checks.
/// Returns whether the thread parked.
#[cold]
fn park(shared: &Shared, index: usize, seen: usize) -> bool {
    let slot = &shared.slots[index];
    slot.parked.store(true, Ordering::Relaxed);
    // Pairs with the caller's fence between its ticket stores and its
    // `parked` loads (and with `Pool::drop`'s fence before its unparks).
    fence(Ordering::SeqCst);
    let ticket = slot.inbox.ticket.load(Ordering::Acquire);
    let parks = ticket == seen && !shared.settings.shutdown.load(Ordering::Acquire);
    if parks {
        // Counted before sleeping, so a parked worker shows in `stats`.
        slot.counters.parks.add(1);
        thread::park();
    }
    slot.parked.store(false, Ordering::Relaxed);
    parks
}

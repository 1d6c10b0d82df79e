//! How a worker waits for its next ticket: spin, then park.
//!
//! State transitions of a worker's `parked` flag (only the worker writes it):
//! `RUNNING => PARKED` just before `thread::park`, `PARKED => RUNNING` right
//! after it returns. See `dispatch.rs` ("Memory ordering", **wake**) for the
//! fence pair that makes a lost wakeup impossible.

use crate::dispatch::{Shared, OVERSUBSCRIBED_SPINS_BEFORE_YIELD};
use crate::sync::{fence, spin_loop, thread, Ordering, SPIN_SCALE_SHIFT};

/// Why a worker stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A new ticket: the value now in the worker's inbox.
    Ticket(usize),
    /// The pool is being dropped.
    Shutdown,
}

/// Waits until worker `index`'s ticket differs from `seen`, or shutdown.
///
/// Not oversubscribed: spins up to the budget, and a changed `epoch` (any job
/// published, even one this worker was not invited to) re-arms the budget:
/// the pool is busy and the next job is microseconds away. Oversubscribed:
/// yields every 64 spins and re-arms only on its own tickets (by returning),
/// so idle spinners do not hold the CPUs invited workers need. Budget spent:
/// park.
#[inline]
pub(crate) fn wait_for_ticket(shared: &Shared, index: usize, seen: usize) -> Wake {
    let slot = &shared.slots[index];
    let settings = &*shared.settings;
    let budget = settings.spin_budget.load(Ordering::Relaxed) >> SPIN_SCALE_SHIFT;
    let mut spins = 0usize;
    let mut spun = 0u64;
    let mut parked = false;
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
            return Wake::Ticket(ticket);
        }
        // Acquire: pairs with the Release store in `Pool::drop`.
        if settings.shutdown.load(Ordering::Acquire) {
            counters.spins.add(spun);
            return Wake::Shutdown;
        }
        if spins < budget {
            spins += 1;
            spun += 1;
            if settings.oversubscribed {
                if spins.is_multiple_of(OVERSUBSCRIBED_SPINS_BEFORE_YIELD as usize) {
                    thread::yield_now();
                } else {
                    spin_loop();
                }
            } else {
                spin_loop();
                // Relaxed: a hint; a stale value only delays a re-arm.
                let now = shared.epoch.load(Ordering::Relaxed);
                if now != epoch {
                    epoch = now;
                    spins = 0;
                }
            }
            continue;
        }
        if park(shared, index, seen) {
            parked = true;
            counters.parks.add(1);
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
        thread::park();
    }
    slot.parked.store(false, Ordering::Relaxed);
    parks
}

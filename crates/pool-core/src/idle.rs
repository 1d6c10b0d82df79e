//! How a worker waits for its next ticket: the handshake.
//!
//! This file is only the protocol: check the ticket, check shutdown, and
//! the park handshake. *How long* to spin, when to yield and when to park
//! is the policy's ([`WaitPlan`], `policy.rs`), asked once per iteration.
//!
//! State transitions of a worker's `parked` flag (only the worker writes it):
//! `RUNNING => PARKED` just before `thread::park`, `PARKED => RUNNING` right
//! after it returns. See `dispatch.rs` ("Memory ordering", **wake**) for the
//! fence pair that makes a lost wakeup impossible.

use crate::dispatch::Shared;
use crate::policy::{Pickup, Step, WaitPlan, WaitState};
use crate::sync::{fence, spin_loop, thread, Ordering};

/// Why a worker stopped waiting.
pub(crate) enum Wake {
    /// A new ticket: the value now in the worker's inbox, and what the
    /// wait leaves to record after the job.
    Ticket(u64, Pickup),
    /// The pool is being dropped.
    Shutdown,
}

/// Waits until worker `index`'s ticket differs from `seen`, or shutdown.
#[inline]
pub(crate) fn wait_for_ticket(
    shared: &Shared,
    index: usize,
    seen: u64,
    state: &mut WaitState,
) -> Wake {
    let slot = &shared.slots[index];
    let mut plan = WaitPlan::begin(shared, state);
    loop {
        // Acquire: pairs with the caller's Release ticket store, making the
        // inbox it wrote before visible (dispatch.rs, **publish**).
        let ticket = slot.inbox.ticket.load(Ordering::Acquire);
        if ticket != seen {
            return Wake::Ticket(ticket, plan.got_job(state));
        }
        // Acquire: pairs with the Release store in `Pool::drop`.
        if shared.settings.shutdown.load(Ordering::Acquire) {
            plan.stopped(&slot.counters);
            return Wake::Shutdown;
        }
        match plan.next(shared, &mut *state) {
            Step::Spin => spin_loop(),
            Step::Yield => {
                // Where this worker runs, for a caller that waited long
                // (`colocation.rs`); off the hot path: yields are rare
                // while jobs come fast.
                slot.counters.cpu.note();
                thread::yield_now();
            }
            Step::Park => {
                // Where it parks is most often where it wakes: for a caller
                // that withdraws its invitation (`colocation.rs`).
                slot.counters.cpu.note();
                state.release_slot();
                if park(shared, index, seen) {
                    plan.parked();
                }
            }
        }
    }
}

/// `RUNNING => PARKED => RUNNING`, unless the ticket or shutdown arrived
/// in between. A spurious wake just returns; the caller's loop re-checks.
/// Returns whether the thread parked.
#[cold]
fn park(shared: &Shared, index: usize, seen: u64) -> bool {
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

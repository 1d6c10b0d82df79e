//! The worker thread: wait for a ticket, run the job, report completion.

use std::panic::{self, AssertUnwindSafe};

use crate::context::Entered;
use crate::dispatch::{with_active_pool, Shared};
use crate::idle::{wait_for_ticket, Wake};
use crate::policy::WaitState;
use crate::seeded::SeededBug;
use crate::sync::{Arc, Ordering};
use crate::tickets;
use crate::timeslice::TurnWatch;

/// The worker loop, run until the pool shuts down.
pub(crate) fn run_worker(shared: Arc<Shared>, index: usize) {
    let pool_id = shared.id();
    let slot = &shared.slots[index];
    // Invariant 4: the construction value, never a fresh read. A ticket
    // handed out before the OS started this thread would otherwise be taken
    // as already seen, and the caller would wait forever.
    let mut seen = if shared.has_bug(SeededBug::LiveTicketBaseline) {
        slot.inbox.ticket.load(Ordering::Acquire)
    } else {
        0u64
    };
    let mut state = WaitState::new();
    let generation = crate::fork::generation();
    let mut turns = TurnWatch::default();
    loop {
        match wait_for_ticket(&shared, index, seen, &mut state) {
            Wake::Shutdown => {
                state.release_slot();
                return;
            }
            Wake::Ticket(ticket, pickup) => {
                seen = ticket;
                if tickets::is_withdrawable(ticket) {
                    // A turn nearly used ends here, between jobs, not in a
                    // grain the caller's join would wait out
                    // (timeslice.rs); the caller may withdraw the seat
                    // meanwhile.
                    if turns.before_seat() {
                        slot.counters.turn_yields.add(1);
                    }
                    if !shared.take_seat(tickets::seq_of(ticket)) {
                        // Withdrawn: not ours to run (tickets.rs). Touch
                        // neither the inbox nor `remaining`.
                        pickup.record(&shared, &mut state, &slot.counters, false);
                        continue;
                    }
                }
                // SAFETY: we hold the ticket issued for this inbox's job and
                // have not decremented `remaining` (invariant 1); the Acquire
                // ticket load ordered the caller's write before this read.
                let job = slot.inbox.job.with(|job| unsafe { *job });
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
                    // Inside the job from here: a context's `enter` that
                    // dispatches on this pool runs that job inline.
                    with_active_pool(pool_id, || {
                        // Restores the worker's own context values on drop,
                        // also when the job (or a later `enter`) unwinds.
                        let _entered = (!shared.contexts.is_empty()).then(|| {
                            shared.captured.0.with(|captured| {
                                // SAFETY: invariant 1, as for the inbox
                                // above: the caller wrote it before our
                                // ticket and rewrites it only after our
                                // decrement.
                                let captured = unsafe { &*captured };
                                Entered::enter(&shared.contexts, captured)
                            })
                        });
                        // SAFETY: the publishing `run` waits for our
                        // decrement below before its closure's borrow ends.
                        unsafe { job.call(index) }
                    })
                }));
                if let Err(payload) = outcome {
                    slot.counters.panics.add(1);
                    shared.record_worker_panic(payload);
                }
                // After the work, before the decrement: `stats()` read
                // once `run` returns counts this job (recorded after the
                // decrement, Miri caught the last job missing; the
                // telemetry is plain atomics, so loom cannot: the test
                // `stats_read_right_after_run_count_every_job` can).
                pickup.record(&shared, &mut state, &slot.counters, true);
                // Release: pairs with the caller's Acquire load of
                // `remaining`; our share's writes and any recorded panic are
                // visible once it reads 0. After this line the job's closure
                // may be gone: touch nothing of it.
                // Acquire too: a caller asleep at the join announced it in
                // this word (sleep.rs), after registering its thread.
                let order = if shared.has_bug(SeededBug::CompletionRelaxed) {
                    Ordering::Relaxed
                } else {
                    Ordering::AcqRel
                };
                let previous = shared.completion.remaining.fetch_sub(1, order);
                if previous & !crate::sleep::CALLER_ASLEEP == 1 {
                    // The job's last decrement. Only `Shared` is touched.
                    shared.job_completed(previous);
                }
                if crate::fork::generation() != generation {
                    forked_inside_a_share();
                }
            }
        }
    }
}

/// A worker that forked inside its share is, in the child, the only
/// thread: the pool it serves and the caller waiting for it are gone, and
/// there is no code to return to. It says so and ends the child.
#[cold]
fn forked_inside_a_share() -> ! {
    eprintln!(
        "pool-core: fork() was called inside a worker's share of a pool job; in the child that \
         worker is the only thread and has nothing to return to. Call exec or _exit in the \
         child at once, or fork outside jobs. Aborting the child."
    );
    std::process::abort()
}

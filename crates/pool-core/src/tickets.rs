//! Tickets, and the seats of a job whose invitations may be withdrawn.
//!
//! A ticket names a job: its sequence number (the pool's jobs counted from
//! 1, so a ticket is never the construction value 0 of invariant 4) and a
//! bit saying whether the invitation may be withdrawn. A worker's ticket
//! is bumped to the job's ticket when it is invited.
//!
//! # Withdrawable jobs
//!
//! For a job whose participants share work through a cursor (a row job:
//! whoever pulls a grain runs it), a worker that has not started when the
//! caller has finished every grain can only make the caller wait: on a
//! busy machine it may not be scheduled for a whole time slice. So such a
//! job opens one *seat* per invited worker, in one word beside `remaining`
//! (`seats`: the job's sequence number and the count left). A worker that
//! picks up the job's ticket takes a seat before it touches the job; the
//! caller, once its own share is done, withdraws the seats nobody took and
//! subtracts them from `remaining`. Each seat is taken exactly once, by a
//! worker's compare-exchange or by the caller's swap: modifications of one
//! word are totally ordered, so `Relaxed` suffices for the arbitration. A
//! worker that finds no seat for its ticket's job (withdrawn, or the word
//! already names a later job) neither reads the job nor decrements
//! `remaining`: the job is not its to run, and the caller may already be
//! publishing the next one into its inbox (invariant 1 holds: a worker
//! reads its inbox only after taking a seat, which the caller waits for).
//!
//! So the caller waits only for workers that started: one descheduled
//! inside a grain can still delay the join, one that was not scheduled at
//! all cannot. The loom model `an_invitation_nobody_took_is_withdrawn`
//! checks every interleaving of pickup and withdrawal, and the seeded bug
//! `SeatFromStaleWord` (a seat taken without checking the job it belongs
//! to) fails it.

/// The ticket bit of a withdrawable job.
const WITHDRAWABLE: u64 = 1;

/// Bits of the seat count in the seats word.
const COUNT_BITS: u32 = 16;

/// The most seats a job can open (workers a withdrawable job invites).
pub(crate) const MAX_SEATS: usize = (1 << COUNT_BITS) - 1;

/// Job `seq`'s ticket.
#[inline]
pub(crate) fn ticket(seq: u64, withdrawable: bool) -> u64 {
    (seq << 1) | u64::from(withdrawable)
}

/// Whether a ticket's invitation may be withdrawn.
#[inline]
pub(crate) fn is_withdrawable(ticket: u64) -> bool {
    ticket & WITHDRAWABLE != 0
}

/// A ticket's job sequence number.
#[inline]
pub(crate) fn seq_of(ticket: u64) -> u64 {
    ticket >> 1
}

/// The seats word of job `seq` with `count` seats open.
#[inline]
pub(crate) fn seats(seq: u64, count: usize) -> u64 {
    debug_assert!(count <= MAX_SEATS);
    (seq << COUNT_BITS) | count as u64
}

/// The job sequence number and the open seats of a seats word.
#[inline]
fn unpack(word: u64) -> (u64, usize) {
    (word >> COUNT_BITS, (word & MAX_SEATS as u64) as usize)
}

impl crate::dispatch::Shared {
    /// A worker holding job `seq`'s ticket takes a seat: `false` when the
    /// caller withdrew the seats first, or the word names a later job.
    #[inline]
    pub(crate) fn take_seat(&self, seq: u64) -> bool {
        let seats = &self.completion.seats;
        // Relaxed: the word's modification order decides who has each
        // seat (module docs); the job's data came with the ticket.
        let mut word = seats.load(crate::sync::Ordering::Relaxed);
        let any_job = self.has_bug(crate::seeded::SeededBug::SeatFromStaleWord);
        loop {
            let (job, open) = unpack(word);
            if (job != seq && !any_job) || open == 0 {
                return false;
            }
            match seats.compare_exchange_weak(
                word,
                word - 1,
                crate::sync::Ordering::Relaxed,
                crate::sync::Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }

    /// The caller, its share done, withdraws job `seq`'s open seats: how
    /// many nobody took.
    #[inline]
    pub(crate) fn withdraw_seats(&self, seq: u64) -> usize {
        // Relaxed: as in `take_seat`.
        let word = self
            .completion
            .seats
            .swap(seats(seq, 0), crate::sync::Ordering::Relaxed);
        let (job, open) = unpack(word);
        debug_assert_eq!(job, seq, "only the turn holder opens seats");
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_and_seats_pack_and_unpack() {
        let t = ticket(41, true);
        assert!(is_withdrawable(t) && seq_of(t) == 41);
        assert!(!is_withdrawable(ticket(41, false)));
        assert_ne!(ticket(1, false), 0, "never the construction value");
        assert_eq!(unpack(seats(7, 3)), (7, 3));
        assert_eq!(unpack(seats(1 << 40, MAX_SEATS)), (1 << 40, MAX_SEATS));
    }
}

//! Home ranges: each participant of a row job starts on its own
//! contiguous share of the rows and claims it front to back; one that runs
//! out takes the back half of what another has left, and goes on from
//! there the same way.
//!
//! Why not one shared cursor: participants pulling chunks from a cursor in
//! turn each jump to a new place in memory every chunk, and every chunk
//! starts the hardware prefetcher's stream cold. A decode is mostly small
//! matrices (a 768-row Q8_0 matrix is 0.6 MB, about 10 µs at 2 threads),
//! where those cold starts cost stories110M 3-7 % of its tokens/s (one
//! process alternating the two designs token by token). Here a
//! participant reads one stream per job plus one per steal, and a
//! descheduled one holds up at most its current claim, as with the cursor.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// Participants whose slots live in the job's frame (no allocation).
const INLINE: usize = 4;

/// The largest row count home ranges can index (`front` and `back` are
/// packed in 32 bits each); `pull_rows` uses its cursor above it.
pub(crate) const MAX_ROWS: usize = u32::MAX as usize;

/// `front..back` packed in one word, so that the owner (claiming from the
/// front) and a thief (taking from the back) each claim by one
/// compare-exchange.
fn pack(front: usize, back: usize) -> u64 {
    ((front as u64) << 32) | back as u64
}

fn unpack(v: u64) -> (usize, usize) {
    ((v >> 32) as usize, (v & 0xffff_ffff) as usize)
}

/// Rows interleaved by sixteen ([`crate::INTERLEAVED_ROWS`]) are computed
/// a group at a time, so a claim that cuts a group computes that group on
/// both sides of the cut. Jobs of at least this many rows per participant
/// (two groups) put every home edge, claim and steal on a multiple of a
/// group. With claims on multiples of four, a 432-row home claimed in
/// halves (216, 108, 52, 28, ...) recomputed a group at most of its cuts,
/// and stories15M's matrices are only 18 to 54 groups (288 to 864 rows).
const ALIGNED_ROWS_PER_PARTICIPANT: usize = 2 * crate::INTERLEAVED_ROWS;

/// The row multiple claims keep to, where they can: a group of interleaved
/// rows for a job large enough that its homes stay at least two groups,
/// else four (the row-major kernels' stride), as small jobs always had.
fn unit_for(rows: usize, n: usize) -> usize {
    if rows >= ALIGNED_ROWS_PER_PARTICIPANT * n {
        crate::INTERLEAVED_ROWS
    } else {
        4
    }
}

/// Participant `k`'s home of `rows` over `n`, packed: its share's edges
/// rounded down to `unit` rows where `unit` is a group (small jobs keep the
/// exact shares, which their loom models enumerate).
fn home_of(k: usize, rows: usize, n: usize) -> u64 {
    let edge = |k: usize| {
        let at = k * rows / n;
        if k >= n {
            rows
        } else if unit_for(rows, n) == crate::INTERLEAVED_ROWS {
            at - at % crate::INTERLEAVED_ROWS
        } else {
            at
        }
    };
    pack(edge(k), edge(k + 1))
}

/// The rows of one job, split into one slot per participant: participant
/// `k` of `n` starts with rows `k * rows / n .. (k + 1) * rows / n`.
pub(crate) struct HomeRanges {
    inline: [CachePadded<AtomicU64>; INLINE],
    spilled: Vec<CachePadded<AtomicU64>>,
    n: usize,
    rows: usize,
    /// The smallest claim: what the owner takes at the end of its range,
    /// and below which a thief takes everything left.
    floor: usize,
    /// The multiple claims are cut on ([`unit_for`]).
    unit: usize,
}

impl HomeRanges {
    /// Slots for `participants` (0 counts as 1) over `rows` (at most
    /// [`MAX_ROWS`]), claims of at least `floor` rows (0 counts as 1).
    pub(crate) fn new(rows: usize, participants: usize, floor: usize) -> HomeRanges {
        assert!(
            rows <= MAX_ROWS,
            "{rows} rows are past home ranges' {MAX_ROWS}"
        );
        let n = participants.max(1);
        let home = |k: usize| {
            let range = if k < n { home_of(k, rows, n) } else { 0 };
            CachePadded::new(AtomicU64::new(range))
        };
        HomeRanges {
            inline: std::array::from_fn(home),
            spilled: (INLINE..n).map(home).collect(),
            n,
            rows,
            floor: floor.max(1),
            unit: unit_for(rows, n),
        }
    }

    /// The fewest rows a claim takes while more are left: a group where
    /// claims keep to groups, else one.
    fn least(&self) -> usize {
        if self.unit == crate::INTERLEAVED_ROWS {
            self.unit
        } else {
            1
        }
    }

    /// Participant `k`'s home range, packed as its slot starts.
    fn home(&self, k: usize) -> u64 {
        home_of(k, self.rows, self.n)
    }

    fn slot(&self, k: usize) -> &AtomicU64 {
        match k.checked_sub(INLINE) {
            None => &self.inline[k],
            Some(i) => &self.spilled[i],
        }
    }

    /// Participant `me`'s side of the job (`me` below the participants
    /// given to `new`; any index works, each at most once at a time):
    /// `f(start, end)` on each of its claims until every slot is empty.
    /// Every row goes to exactly one call of one participant.
    pub(crate) fn run(&self, me: usize, mut f: impl FnMut(usize, usize)) {
        while let Some((start, end)) = self.next(me) {
            f(start, end);
        }
    }

    /// Participant `me`'s next claim: from its own slot's front, else,
    /// once that is empty, from the back of another's (the stolen rows
    /// become its own slot); `None` when every slot is empty.
    pub(crate) fn next(&self, me: usize) -> Option<(usize, usize)> {
        let own = self.slot(me % self.n);
        loop {
            if let Some(claim) = self.claim_front(own) {
                return Some(claim);
            }
            let (from, to) = self.steal(me % self.n)?;
            // Only the owner writes an empty slot (thieves skip it, and
            // the owner's own claims need rows), so a store suffices.
            // Relaxed: a thief that misses these rows leaves them to us.
            own.store(pack(from, to), Ordering::Relaxed);
        }
    }

    /// The owner's claim from the front of its slot: half of what is left,
    /// at least `floor` (and `least()`), a multiple of `unit` when it can be.
    /// A claim is what a thief cannot take, so a participant
    /// descheduled inside one holds at most half of its home (a quarter of
    /// a 2-participant job, as the cursor's first chunk did); the stream is
    /// one however claims fall. Measured against a quarter, per token
    /// alternating in one process: level on stories110M, 1-2 % ahead on
    /// stories15M.
    fn claim_front(&self, own: &AtomicU64) -> Option<(usize, usize)> {
        // Relaxed throughout: each compare-exchange hands rows to one
        // participant; the job's barrier orders the rows' writes before
        // anyone reads them.
        let mut v = own.load(Ordering::Relaxed);
        loop {
            let (front, back) = unpack(v);
            if front >= back {
                return None;
            }
            let left = back - front;
            let c = (left / 2).max(self.floor).max(self.least());
            let c = if c >= self.unit { c - c % self.unit } else { c };
            let end = front + c.clamp(1, left);
            if crate::sync::claim_bug() {
                // Seeded (loom builds only): a claim by a load and a
                // store, which a thief's steal can overlap.
                own.store(pack(end, back), Ordering::Relaxed);
                return Some((front, end));
            }
            match own.compare_exchange_weak(
                v,
                pack(end, back),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((front, end)),
                Err(now) => v = now,
            }
        }
    }

    /// Takes the back half of another participant's rows (all of them
    /// when at most `floor` are left, or when its owner has not claimed
    /// any yet), trying each other slot in turn from `me + 1`; `None`
    /// when every other slot is empty.
    fn steal(&self, me: usize) -> Option<(usize, usize)> {
        for k in (1..self.n).map(|i| (me + i) % self.n) {
            let victim = self.slot(k);
            let untouched = self.home(k);
            let mut v = victim.load(Ordering::Relaxed);
            loop {
                let (front, back) = unpack(v);
                if front >= back {
                    break;
                }
                let left = back - front;
                // A home nobody has claimed from by the time this
                // participant finished a whole range: its owner is late by
                // a share (parked, descheduled, or withdrawn), so take all
                // of it in one ascending stream rather than in halves from
                // the back, each a cold stream below the last.
                let from = if left <= self.floor || v == untouched {
                    front
                } else {
                    // About the back half, from a row on `unit`: the
                    // owner's claims end on one, so no group is cut.
                    let half = left / 2;
                    let from = (back - half).next_multiple_of(self.unit);
                    if from < back {
                        from
                    } else if left <= self.least() {
                        // At most one group left: all of it.
                        front
                    } else {
                        back - half.max(1)
                    }
                };
                // Relaxed: as for the owner's claims.
                match victim.compare_exchange_weak(
                    v,
                    pack(front, from),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some((from, back)),
                    Err(now) => v = now,
                }
            }
        }
        None
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Claims in the participants' `order` (one call each, in sequence)
    /// until none is left, checking each row is claimed once.
    fn claim_all(
        ranges: &HomeRanges,
        order: impl Iterator<Item = usize>,
        rows: usize,
    ) -> Vec<Vec<(usize, usize)>> {
        let mut seen = vec![false; rows];
        let mut claims = vec![Vec::new(); ranges.n];
        // Called in sequence, `None` means every row was claimed.
        for me in order {
            match ranges.next(me) {
                Some((start, end)) => {
                    assert!(start < end && end <= rows, "{start}..{end} of {rows}");
                    for row in &mut seen[start..end] {
                        assert!(!*row, "a row claimed twice");
                        *row = true;
                    }
                    claims[me].push((start, end));
                }
                None => break,
            }
        }
        assert!(seen.iter().all(|&s| s), "a row never claimed");
        claims
    }

    /// Claims that do not start where the previous one ended.
    fn breaks(claims: &[(usize, usize)]) -> usize {
        claims.windows(2).filter(|w| w[1].0 != w[0].1).count()
    }

    #[test]
    fn participants_claiming_in_turn_each_read_their_home_as_one_stream() {
        let rows = 768;
        let ranges = HomeRanges::new(rows, 2, 12);
        let claims = claim_all(&ranges, (0..).map(|i| i % 2), rows);
        for (me, mine) in claims.iter().enumerate() {
            assert_eq!(mine[0].0, me * rows / 2, "participant {me} starts at home");
            assert_eq!(breaks(mine), 0, "participant {me}: {mine:?}");
        }
    }

    #[test]
    fn a_participant_alone_reads_its_home_then_each_untouched_home_whole_in_one_stream() {
        let rows = 1000;
        let ranges = HomeRanges::new(rows, 4, 8);
        let claims = claim_all(&ranges, std::iter::repeat(3), rows);
        let mine = &claims[3];
        // Homes on multiples of sixteen: 0..240, 240..496, 496..736, 736..1000.
        assert_eq!(mine[0], (736, 864), "its home first, from the front");
        // Its home, then homes 0, 1 and 2 whole, each from its start: one
        // ascending stream from row 0 (the homes are adjacent), never a
        // new one per steal.
        assert_eq!(breaks(mine), 1, "{mine:?}");
        assert_eq!(mine.iter().find(|c| c.0 < 736), Some(&(0, 112)));
    }

    #[test]
    fn a_thief_takes_half_of_a_home_whose_owner_has_started() {
        let ranges = HomeRanges::new(800, 2, 8);
        assert_eq!(ranges.next(0), Some((0, 192)), "the owner's first claim");
        // Participant 1 drains its own home, then steals: its first claim
        // below 400 starts the back half of the owner's 192..400, on a
        // group of sixteen.
        let stolen = std::iter::from_fn(|| ranges.next(1)).find(|claim| claim.0 < 400);
        assert_eq!(
            stolen.map(|c| c.0),
            Some(304),
            "half of 192..400, not all of it"
        );
    }

    #[test]
    fn claims_of_a_large_enough_job_never_cut_a_group_of_interleaved_rows() {
        for rows in [288, 864, 1001, 32000] {
            for n in 2..=4 {
                for floor in [1, 3, 12] {
                    let ranges = HomeRanges::new(rows, n, floor);
                    let order = (0..).map(|i: usize| (i * 7 + i / 3) % n);
                    for claim in claim_all(&ranges, order, rows).concat() {
                        for edge in [claim.0, claim.1] {
                            assert!(
                                edge % crate::INTERLEAVED_ROWS == 0 || edge == rows,
                                "{rows} rows, {n} participants, floor {floor}: claim {claim:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_small_job_keeps_exact_shares() {
        // Five rows for two: homes 0..2 and 2..5, as the loom model of
        // the row layer enumerates them.
        let ranges = HomeRanges::new(5, 2, 1);
        assert_eq!(unpack(ranges.home(0)), (0, 2));
        assert_eq!(unpack(ranges.home(1)), (2, 5));
    }

    #[test]
    fn every_row_is_claimed_once_for_any_participants_and_floor() {
        let sizes: &[usize] = if cfg!(miri) {
            &[0, 1, 3, 64]
        } else {
            &[0, 1, 2, 3, 7, 64, 100, 1001]
        };
        for &rows in sizes {
            for n in 1..=7 {
                for floor in [0, 1, 3, 32] {
                    let ranges = HomeRanges::new(rows, n, floor);
                    // A fixed but uneven interleaving of the participants.
                    let order = (0..).map(|i: usize| (i * 7 + i / 3) % n);
                    claim_all(&ranges, order, rows);
                }
            }
        }
    }

    #[test]
    fn threads_claiming_at_once_take_every_row_once() {
        // Scaled down under Miri, which interprets every atomic.
        let rows = if cfg!(miri) { 2_000 } else { 100_000 };
        for n in [2, 3, 6] {
            let ranges = HomeRanges::new(rows, n, 4);
            let counts: Vec<_> = (0..rows)
                .map(|_| std::sync::atomic::AtomicU8::new(0))
                .collect();
            std::thread::scope(|s| {
                for me in 0..n {
                    let (ranges, counts) = (&ranges, &counts);
                    s.spawn(move || {
                        ranges.run(me, |start, end| {
                            for c in &counts[start..end] {
                                c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        })
                    });
                }
            });
            assert!(counts
                .iter()
                .all(|c| c.load(std::sync::atomic::Ordering::Relaxed) == 1));
        }
    }
}

//! [`Pool::reduce`]: every participant's value, folded in participant order.
//!
//! Each participant writes its value into a slot of its own (one padded
//! line per participant, so no two share a line); after the job's barrier
//! the caller folds them, `fold(fold(v0, v1), v2)` and so on. The order is
//! the participants', never the order they finished in, so the result
//! depends only on the participant count: a float sum is the same bits
//! whenever the job runs with the same count. (`run` may lower the count,
//! to 1 when it runs a job inline; a caller that needs the same bits at
//! every count folds per grain instead, as `pool-matvec` does.)
//!
//! The slots sit on the caller's stack for up to [`STACK_SLOTS`]
//! participants: no allocation per call. Measured in the peers suite's
//! reduction (`pool-benches::peers`, 2 threads): a `Vec` of padded slots
//! per call, as the suite's default reduction builds, cost the pool
//! 300-370 ns of its ~2 us, and the pool's adapter now calls this instead.

use crossbeam_utils::CachePadded;

use crate::sync::UnsafeCell;
use crate::Pool;

/// Participants whose slots fit on the caller's stack; wider pools
/// allocate one slot per participant per call.
pub const STACK_SLOTS: usize = 8;

/// One participant's value, on a line of its own.
struct Slot<T>(CachePadded<UnsafeCell<Option<T>>>);

// SAFETY: a job's participants have distinct indices, and participant
// `idx` alone touches slot `idx` during the job (`reduce_in`); the caller
// reads the slots only after `run` returned, which happens after every
// participant's write (`run`'s barrier: the workers' Release decrements,
// the caller's Acquire load). So a value moves from one thread to another
// (`T: Send`) and is never accessed from two at once.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T> Slot<T> {
    fn empty() -> Slot<T> {
        Slot(CachePadded::new(UnsafeCell::new(None)))
    }
}

impl Pool {
    /// Runs `map(idx, n)` on every participant (as [`Pool::run`]) and
    /// returns the values folded in participant order:
    /// `fold(fold(map(0, n), map(1, n)), map(2, n))`, and so on to
    /// `map(n - 1, n)` (the caller's). The order never depends on timing,
    /// so the result is the same for the same participant count; an
    /// inline run (`n == 1`) returns `map(0, 1)` unfolded. `n` is what
    /// [`Pool::run`] says it is: under the adaptive policy it can differ
    /// from call to call, and a float result with it; for the same bits on
    /// every call use `pool_matvec::map_reduce`, whose chunks depend on the
    /// data alone. A participant's panic reaches the caller as from `run`,
    /// after every participant finished; values already made are dropped.
    ///
    /// No allocation for up to [`STACK_SLOTS`] participants.
    ///
    /// ```
    /// let pool = pool_core::Pool::new(2);
    /// let data: Vec<u64> = (1..=1000).collect();
    /// let sum = pool.reduce(
    ///     &|idx, n| {
    ///         let share = data.len().div_ceil(n);
    ///         data.iter().skip(idx * share).take(share).sum::<u64>()
    ///     },
    ///     |a, b| a + b,
    /// );
    /// assert_eq!(sum, 500_500);
    /// ```
    pub fn reduce<T: Send>(
        &self,
        map: impl Fn(usize, usize) -> T + Sync,
        fold: impl FnMut(T, T) -> T,
    ) -> T {
        let participants = self.n_workers() + 1;
        if participants <= STACK_SLOTS {
            let slots: [Slot<T>; STACK_SLOTS] = std::array::from_fn(|_| Slot::empty());
            self.reduce_in(&slots[..participants], &map, fold)
        } else {
            let slots: Vec<Slot<T>> = (0..participants).map(|_| Slot::empty()).collect();
            self.reduce_in(&slots, &map, fold)
        }
    }

    /// [`Pool::reduce`] with `slots` (one per possible participant).
    fn reduce_in<T: Send>(
        &self,
        slots: &[Slot<T>],
        map: &(dyn Fn(usize, usize) -> T + Sync),
        mut fold: impl FnMut(T, T) -> T,
    ) -> T {
        self.run(|idx, n| {
            let value = map(idx, n);
            // SAFETY: `idx` is this participant's alone in this job (see
            // `Slot`'s `Sync`), and nothing reads the slot before `run`
            // returns. `idx < n <= slots.len()`: `run`'s `n` is at most
            // the workers plus the caller.
            slots[idx].0.with_mut(|slot| unsafe { *slot = Some(value) });
        });
        // `run` returned: every participant's write happened before this
        // (its barrier). The filled slots are exactly `0..n`.
        let mut values = slots.iter().map_while(|slot| {
            // SAFETY: the job is over; this thread alone holds the slots.
            slot.0.with_mut(|slot| unsafe { (*slot).take() })
        });
        let first = values
            .next()
            .expect("pool-core: a job always has a participant 0");
        values.fold(first, &mut fold)
    }
}

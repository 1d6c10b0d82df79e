//! Two-sided jobs on a pool split over two NUMA nodes (`pool_topo`'s
//! `TwoNodePlan`): the caller and even workers on the home node, odd workers
//! on the far node, each side pulling its own items with its own threads.

use std::io;

use pool_topo::{pin_current_thread, process_affinity_cpus, TwoNodePlan};

use crate::pool::Pool;
use crate::sync::{lock, process};

/// Which side of a split pool a participant (and its items) is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The caller's node.
    Near,
    /// The other node.
    Far,
}

/// Participants pull about this many grains each from their side's cursor.
const GRAINS_PER_THREAD: usize = 8;

impl Pool {
    /// Moves the odd workers to `plan.far` and keeps the even ones and the
    /// calling thread on `plan.home` (pinning each to its node's CPUs), so
    /// [`Pool::run_sides`] can give each side the data on its own node.
    /// The affinity masks before the call are restored by
    /// [`Pool::unbind_two_nodes`].
    pub fn bind_two_nodes(&self, plan: &TwoNodePlan) -> io::Result<()> {
        if plan.worker_cpus.len() != self.n_workers() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "two-node plan for {} workers, pool has {}",
                    plan.worker_cpus.len(),
                    self.n_workers()
                ),
            ));
        }
        *lock(&self.shared.unbound_mask) = Some(process_affinity_cpus());
        self.pin_each(|worker| plan.worker_cpus[worker].clone(), &plan.home.cpus)?;
        for (worker, far) in self.shared.far.iter().enumerate() {
            far.store(TwoNodePlan::is_far(worker), process::Ordering::Relaxed);
        }
        Ok(())
    }

    /// Undoes [`Pool::bind_two_nodes`]: every worker and the calling thread
    /// get back the affinity mask from before the bind. Nothing to do if the
    /// pool is not bound.
    pub fn unbind_two_nodes(&self) -> io::Result<()> {
        let Some(mask) = lock(&self.shared.unbound_mask).take() else {
            return Ok(());
        };
        for far in self.shared.far.iter() {
            far.store(false, process::Ordering::Relaxed);
        }
        self.pin_each(|_| mask.clone(), &mask)
    }

    /// Whether participant `idx` of a full job sits on the far node (only
    /// odd workers of a bound pool do; the caller never does).
    #[inline]
    pub fn far_worker(&self, idx: usize) -> bool {
        self.shared
            .far
            .get(idx)
            .is_some_and(|far| far.load(process::Ordering::Relaxed))
    }

    /// Runs a two-sided job: `f(side, start, end)` over disjoint ranges
    /// covering `0..near_items` on the near side and `0..far_items` on the
    /// far side, each side's items pulled by that side's participants only
    /// (locality). An unbound pool has no far threads: its participants
    /// take the far items too, after their own.
    pub fn run_sides(
        &self,
        near_items: usize,
        far_items: usize,
        f: &(dyn Fn(Side, usize, usize) + Sync),
    ) {
        let n = self.n_workers() + 1;
        let far_threads = (0..n).filter(|&idx| self.far_worker(idx)).count();
        let near_threads = n - far_threads;
        let grain =
            |items: usize, threads: usize| (items / (threads.max(1) * GRAINS_PER_THREAD)).max(1);
        let (near_grain, far_grain) = (
            grain(near_items, near_threads),
            grain(far_items, far_threads),
        );
        let near_cursor = process::AtomicUsize::new(0);
        let far_cursor = process::AtomicUsize::new(0);
        // Relaxed: each RMW hands a range to exactly one participant; the
        // pool's barrier orders the results.
        let pull = |side: Side, cursor: &process::AtomicUsize, items: usize, grain: usize| loop {
            let start = cursor.fetch_add(grain, process::Ordering::Relaxed);
            if start >= items {
                break;
            }
            f(side, start, (start + grain).min(items));
        };
        self.run(&|idx, _| {
            if self.far_worker(idx) {
                pull(Side::Far, &far_cursor, far_items, far_grain);
            } else {
                pull(Side::Near, &near_cursor, near_items, near_grain);
                if far_threads == 0 {
                    pull(Side::Far, &far_cursor, far_items, far_grain);
                }
            }
        });
    }

    /// Pins worker `i` to `worker_cpus(i)` (from inside a job, on the worker
    /// itself) and the calling thread to `caller_cpus`.
    fn pin_each(
        &self,
        worker_cpus: impl Fn(usize) -> Vec<usize> + Sync,
        caller_cpus: &[usize],
    ) -> io::Result<()> {
        let errors = crate::sync::Mutex::new(Vec::new());
        self.run(&|idx, n| {
            if idx < n - 1 {
                if let Err(err) = pin_current_thread(&worker_cpus(idx)) {
                    lock(&errors).push(format!("worker {idx}: {err}"));
                }
            }
        });
        pin_current_thread(caller_cpus)?;
        let errors = lock(&errors).clone();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(errors.join("; ")))
        }
    }
}

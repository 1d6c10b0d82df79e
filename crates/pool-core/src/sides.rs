//! Two-sided jobs on a pool split over two NUMA nodes (`pool_topo`'s
//! `TwoNodePlan`): the caller and even workers on the home node, odd workers
//! on the far node, each side pulling its own items with its own threads.
//!
//! # Invariants
//!
//! - The far flags and their count change only inside a job, written by the
//!   turn holder (the bind/unbind job's caller participant). A job holds
//!   the turn from publish to barrier, so every participant of every other
//!   job reads one consistent set, published by the ticket/`remaining`
//!   pairs like any job data.
//! - `run_sides` decides inside the job, from the participants it really
//!   got (`n`): a far item is pulled by a far participant of this job, or,
//!   when this job has none (an unbound pool, a nested or inline run, a
//!   limited one), by the near participants after their own items. So
//!   every item of both sides runs exactly once, always.
//! - Each thread's mask from before the first bind is saved by that thread
//!   itself, and restored onto that same thread by unbind.

use std::io;

use pool_topo::{pin_current_thread, thread_affinity_cpus, NumaDecision, NumaNode, TwoNodePlan};

use crate::pool::Pool;
use crate::seeded::SeededBug;
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

/// Where a pool's threads sit when bound to NUMA nodes.
pub(crate) struct Placement {
    /// Whether worker `i` sits on the far node, and how many do. Written
    /// only by a turn holder inside a job, so every participant of any job
    /// reads the same values.
    pub(crate) far: Box<[process::AtomicBool]>,
    pub(crate) far_workers: process::AtomicUsize,
    /// Each thread's affinity mask from before the first bind, restored
    /// by unbind.
    pub(crate) saved_masks: crate::sync::Mutex<Option<SavedMasks>>,
    /// The mask every thread calling into the bound pool adopts (the node's
    /// CPUs; the home node's for two nodes); `None` once unbound.
    /// Published with `Settings::mask_generation`.
    pub(crate) caller_mask: crate::sync::Mutex<Option<process::Arc<Vec<usize>>>>,
}

impl Placement {
    pub(crate) fn new(workers: usize) -> Placement {
        Placement {
            far: (0..workers)
                .map(|_| process::AtomicBool::new(false))
                .collect(),
            far_workers: process::AtomicUsize::new(0),
            saved_masks: crate::sync::Mutex::new(None),
            caller_mask: crate::sync::Mutex::new(None),
        }
    }
}

/// One bound pool as a calling thread saw it: the generation it adopted
/// and its own mask from before, to take back after unbind (`None`: the
/// thread that bound, whose mask unbind restores itself).
#[cfg(not(loom))]
struct Adopted {
    pool: usize,
    generation: u64,
    own_mask: Option<Vec<usize>>,
}

#[cfg(not(loom))]
std::thread_local! {
    static ADOPTED: std::cell::RefCell<Vec<Adopted>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Gives the calling thread the mask the last bind of `shared`'s pool
/// published, saving its own first, or its own back once unbound. Once
/// per thread per bind or unbind (the generation is remembered); pins the
/// OS refuses are logged and skipped. Not modelled under loom (placement
/// is not part of the protocol).
#[cfg(not(loom))]
pub(crate) fn adopt_caller_mask(shared: &crate::dispatch::Shared) {
    let pool = shared.id();
    let generation = shared
        .settings
        .mask_generation
        .load(process::Ordering::Relaxed);
    let _ = ADOPTED.try_with(|adopted| {
        let mut adopted = adopted.borrow_mut();
        let index = adopted.iter().position(|a| a.pool == pool);
        if index.is_some_and(|i| adopted[i].generation == generation) {
            return;
        }
        let mask = lock(&shared.placement.caller_mask).clone();
        let pin = |cpus: &[usize]| {
            if let Err(err) = pin_current_thread(cpus) {
                tracing::debug!(%err, "pool-core: a calling thread could not take the bound mask");
            }
        };
        match (index, mask) {
            (None, Some(mask)) => {
                let own = pool_topo::thread_affinity_cpus();
                pin(&mask);
                adopted.push(Adopted {
                    pool,
                    generation,
                    own_mask: Some(own),
                });
            }
            (Some(i), Some(mask)) => {
                pin(&mask);
                adopted[i].generation = generation;
            }
            (Some(i), None) => {
                if let Some(own) = adopted.swap_remove(i).own_mask {
                    pin(&own);
                }
            }
            (None, None) => {}
        }
    });
}

#[cfg(loom)]
pub(crate) fn adopt_caller_mask(_shared: &crate::dispatch::Shared) {}

impl Pool {
    /// Publishes `mask` (`None`: unbound) for the threads that call into
    /// this pool, and notes that the calling thread already has it.
    fn publish_caller_mask(&self, mask: Option<Vec<usize>>) {
        let bound = mask.is_some();
        *lock(&self.shared.placement.caller_mask) = mask.map(process::Arc::new);
        // Relaxed: callers read the mask under its lock; this is the hint
        // that there is one to read.
        let generation = self
            .shared
            .settings
            .mask_generation
            .fetch_add(1, process::Ordering::Relaxed)
            + 1;
        #[cfg(not(loom))]
        {
            let pool = self.shared.id();
            let _ = ADOPTED.try_with(|adopted| {
                let mut adopted = adopted.borrow_mut();
                adopted.retain(|a| a.pool != pool);
                if bound {
                    // The binding thread: unbind restores its mask itself.
                    adopted.push(Adopted {
                        pool,
                        generation,
                        own_mask: None,
                    });
                }
            });
        }
        #[cfg(loom)]
        let _ = (bound, generation);
    }
}

/// The affinity masks from before the first bind.
#[derive(Clone)]
pub(crate) struct SavedMasks {
    /// Worker `i`'s own mask.
    workers: Vec<Vec<usize>>,
    /// The mask of the thread that called the first bind.
    caller: Vec<usize>,
}

impl Pool {
    /// Moves the odd workers to `plan.far` and keeps the even ones and the
    /// calling thread on `plan.home` (pinning each to its node's CPUs), so
    /// [`Pool::run_sides`] can give each side the data on its own node.
    /// Each thread's affinity mask from before the *first* bind is saved
    /// (binding again keeps it) and restored by [`Pool::unbind_two_nodes`].
    ///
    /// Fails, changing nothing, when called from inside a job of this pool
    /// (its workers are busy running that job) or when the plan does not
    /// fit the pool. When a pin is refused, or a thread's mask read back
    /// shows it did not move (a cpuset that narrowed it), it fails naming
    /// each such thread, with every thread back on its mask from before
    /// the first bind and the sides unsplit.
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
        self.bind_threads("bind_two_nodes", |worker| {
            worker.map_or(plan.home.cpus.clone(), |w| plan.worker_cpus[w].clone())
        })?;
        self.publish_caller_mask(Some(plan.home.cpus.clone()));
        let far_workers = (0..self.n_workers())
            .filter(|&w| TwoNodePlan::is_far(w))
            .count();
        self.on_every_thread("bind_two_nodes", |worker| {
            if worker.is_none() {
                self.set_far(TwoNodePlan::is_far, far_workers);
            }
        })?;
        Ok(())
    }

    /// Undoes [`Pool::bind_two_nodes`]: every worker gets back its own mask
    /// from before the first bind, and the calling thread the mask of the
    /// thread that bound. Nothing to do if the pool is not bound. Fails,
    /// changing nothing, when called from inside a job of this pool; when a
    /// pin is refused, fails with the OS errors and may be called again.
    pub fn unbind_two_nodes(&self) -> io::Result<()> {
        self.restore_saved_masks("unbind_two_nodes", pin_current_thread)
    }

    /// Gives every thread its saved mask back through `apply`, then
    /// forgets the masks. The saved-masks lock is never held across the
    /// job: a second unbind from inside another caller's job would wait
    /// for it while this one waits for that job's turn (docs/design.md,
    /// "No lock across a job"; the loom model `unbind_inside_a_job_*`).
    fn restore_saved_masks(
        &self,
        what: &str,
        apply: impl Fn(&[usize]) -> io::Result<()> + Sync,
    ) -> io::Result<()> {
        if self.shared.has_bug(SeededBug::LockHeldAcrossJob) {
            return self.restore_saved_masks_holding_the_lock(what, apply);
        }
        let Some(masks) = lock(&self.shared.placement.saved_masks).clone() else {
            return Ok(());
        };
        let (workers, caller) = self.on_every_thread(what, |worker| match worker {
            Some(worker) => apply(&masks.workers[worker]),
            None => {
                self.set_far(|_| false, 0);
                apply(&masks.caller)
            }
        })?;
        joined_errors(workers.iter(), &caller)?;
        *lock(&self.shared.placement.saved_masks) = None;
        self.publish_caller_mask(None);
        Ok(())
    }

    /// The seeded bug `LockHeldAcrossJob`: the lock held across the job.
    #[cold]
    fn restore_saved_masks_holding_the_lock(
        &self,
        what: &str,
        apply: impl Fn(&[usize]) -> io::Result<()> + Sync,
    ) -> io::Result<()> {
        let mut saved = lock(&self.shared.placement.saved_masks);
        let Some(masks) = saved.as_ref() else {
            return Ok(());
        };
        let (workers, caller) = self.on_every_thread(what, |worker| match worker {
            Some(worker) => apply(&masks.workers[worker]),
            None => apply(&masks.caller),
        })?;
        joined_errors(workers.iter(), &caller)?;
        *saved = None;
        Ok(())
    }

    /// Moves every worker and the calling thread onto `node`: each gets
    /// the node's whole CPU set (inside the process's), not one CPU of
    /// it, so the scheduler still balances the threads inside the node, as
    /// the engines did. Refuses, saying why, a node with no usable CPU.
    /// Each thread's mask from before the first bind is saved and restored
    /// by [`Pool::unbind_node`]. Fails, changing nothing, from inside a job
    /// of this pool. `CMF_NUMA_TRACE=1` prints the mask.
    pub fn bind_node(&self, node: &NumaNode) -> io::Result<()> {
        let cpus = node.cpus_in(&pool_topo::process_affinity_cpus());
        if cpus.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "bind_node: node {} has no CPU in this process's affinity mask",
                    node.id
                ),
            ));
        }
        pool_topo::numa_trace(format_args!(
            "bind_node: node {}: the caller and {} workers on CPUs {}",
            node.id,
            self.n_workers(),
            pool_topo::format_cpu_list(&cpus)
        ));
        self.bind_threads("bind_node", |_| cpus.clone())?;
        self.publish_caller_mask(Some(cpus));
        self.on_every_thread("bind_node", |worker| {
            if worker.is_none() {
                self.set_far(|_| false, 0);
            }
        })?;
        Ok(())
    }

    /// Decides, from where the pages of `regions` (the weights) sit and
    /// `CMF_NUMA`, which node this pool should run on, and binds it there
    /// ([`Pool::bind_node`]). On a one-node host, with `CMF_NUMA=0`, or
    /// when the node has no CPU of this process, it does nothing and the
    /// returned decision says why.
    pub fn bind_to_weights(&self, regions: &[&[u8]]) -> io::Result<NumaDecision> {
        let decision = pool_topo::decide_node_for(regions)?;
        if let NumaDecision::Bind { node, .. } = &decision {
            self.bind_node(node)?;
        }
        tracing::info!(%decision, "pool-core: NUMA");
        Ok(decision)
    }

    /// Undoes [`Pool::bind_node`] (the same as
    /// [`Pool::unbind_two_nodes`]): every thread gets back its own mask
    /// from before the first bind.
    pub fn unbind_node(&self) -> io::Result<()> {
        self.unbind_two_nodes()
    }

    /// Whether the pool is split over two nodes (`bind_two_nodes`).
    pub fn two_nodes(&self) -> bool {
        self.shared
            .placement
            .far_workers
            .load(process::Ordering::Relaxed)
            > 0
    }

    /// Whether participant `idx` of a full job sits on the far node (only
    /// odd workers of a bound pool do; the caller never does).
    #[inline]
    pub fn far_worker(&self, idx: usize) -> bool {
        self.shared
            .placement
            .far
            .get(idx)
            .is_some_and(|far| far.load(process::Ordering::Relaxed))
    }

    /// Makes the page-cache pages of two spans of a mapped weights file
    /// sit on the nodes of a pool bound by [`Pool::bind_two_nodes`]:
    /// `near` on `plan.home`, `far` on `plan.far`. A span already there
    /// (90 % of its sample) is left alone; a cold span is filled from its
    /// node; a span elsewhere is dropped from the page cache and read
    /// again. Both sides read at once, each by its own side's threads, in
    /// one [`Pool::run_sides`] job, so each page is read on the node it
    /// should sit on. `on_move(side, what)` is called before the reading
    /// starts, for each span that moves (a re-read from disk can take
    /// seconds). Returns where each span sits afterwards (sampled again).
    ///
    /// Fails when the pool is not bound to two nodes (its far threads would
    /// read on the near node) or a span is not inside the file. Linux and
    /// Android.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn place_sides(
        &self,
        plan: &TwoNodePlan,
        file: &pool_topo::MappedFile,
        near: std::ops::Range<usize>,
        far: std::ops::Range<usize>,
        mut on_move: impl FnMut(Side, &pool_topo::SpanMove),
    ) -> io::Result<(pool_topo::SpanPlacement, pool_topo::SpanPlacement)> {
        use pool_topo::Placement;
        if !self.two_nodes() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "place_sides: the pool is not bound to two nodes (bind_two_nodes first): \
                 its far threads would read on the near node",
            ));
        }
        let near = file.begin_placement(near, &plan.home)?;
        let far = file.begin_placement(far, &plan.far)?;
        let (near_read, far_read) = (near.pending(), far.pending());
        for (side, read) in [(Side::Near, near_read), (Side::Far, far_read)] {
            if let Some(read) = read {
                on_move(side, &read.as_move());
            }
        }
        let pages = |read: Option<&pool_topo::PendingSpan>| read.map_or(0, |r| r.pages());
        self.run_sides(pages(near_read), pages(far_read), |side, start, end| {
            let read = match side {
                Side::Near => near_read,
                Side::Far => far_read,
            };
            if let Some(read) = read {
                file.read_span_pages(read, start..end);
            }
        });
        let finish = |placement: Placement| match placement {
            Placement::Done(done) => Ok(done),
            Placement::Read(read) => file.finish_placement(read),
        };
        Ok((finish(near)?, finish(far)?))
    }

    /// Runs a two-sided job: `f(side, start, end)` over disjoint ranges
    /// covering `0..near_items` on the near side and `0..far_items` on the
    /// far side, each exactly once. Each side's items are pulled by that
    /// side's participants (locality); when the job has no far participant
    /// (an unbound pool, or a call that ran inline, e.g. from inside one of
    /// this pool's jobs) the near participants take the far items too,
    /// after their own.
    pub fn run_sides(
        &self,
        near_items: usize,
        far_items: usize,
        f: impl Fn(Side, usize, usize) + Sync,
    ) {
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
        let grain =
            |items: usize, threads: usize| (items / (threads.max(1) * GRAINS_PER_THREAD)).max(1);
        let seeded_far_count = self.shared.has_bug(SeededBug::FarCountOutsideJob).then(|| {
            self.shared
                .placement
                .far_workers
                .load(process::Ordering::Relaxed)
        });
        self.run(|idx, n| {
            // Decided inside the job, from this job's participants: the
            // flags cannot change while it runs (module invariants).
            let far_threads = if let Some(count) = seeded_far_count {
                count
            } else if n == self.n_workers() + 1 {
                self.shared
                    .placement
                    .far_workers
                    .load(process::Ordering::Relaxed)
            } else {
                (0..n - 1).filter(|&w| self.far_worker(w)).count()
            };
            let near_threads = n - far_threads;
            let is_far_worker = (idx < n - 1 || seeded_far_count.is_some()) && self.far_worker(idx);
            if is_far_worker {
                pull(
                    Side::Far,
                    &far_cursor,
                    far_items,
                    grain(far_items, far_threads),
                );
            } else {
                pull(
                    Side::Near,
                    &near_cursor,
                    near_items,
                    grain(near_items, near_threads),
                );
                if far_threads == 0 {
                    pull(
                        Side::Far,
                        &far_cursor,
                        far_items,
                        grain(far_items, near_threads),
                    );
                }
            }
        });
    }

    /// Saves empty masks as `bind_two_nodes` would, without pinning: for
    /// loom models, which cannot pin.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __save_masks(&self) {
        *lock(&self.shared.placement.saved_masks) = Some(SavedMasks {
            workers: vec![Vec::new(); self.n_workers()],
            caller: Vec::new(),
        });
    }

    /// `unbind_two_nodes` without pinning: for loom models.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __unbind_without_pinning(&self) -> io::Result<()> {
        self.restore_saved_masks("__unbind_without_pinning", |_| Ok(()))
    }

    /// Marks the workers for which `far` holds as far, without pinning, the
    /// way `bind_two_nodes` does (inside a job): for loom models, which
    /// cannot pin.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __mark_far(&self, far: impl Fn(usize) -> bool + Sync) -> io::Result<()> {
        let count = (0..self.n_workers()).filter(|&w| far(w)).count();
        self.on_every_thread("__mark_far", |worker| {
            if worker.is_none() {
                self.set_far(&far, count);
            }
        })?;
        Ok(())
    }

    /// Pins worker `i` to `cpus(Some(i))` and the calling thread to
    /// `cpus(None)`, in one job, each thread saving its own mask first (kept
    /// from the first bind only). Every thread's error, joined.
    ///
    /// Each thread then checks that it really moved: its mask read back
    /// lies inside the CPUs asked for, and it runs on one of them
    /// ([`moved_onto`]). If any pin was refused or any thread did not
    /// move, every thread gets its saved mask back at once (a half-moved
    /// pool is worse than an unmoved one) and the error names each thread
    /// that failed.
    fn bind_threads(
        &self,
        what: &str,
        cpus: impl Fn(Option<usize>) -> Vec<usize> + Sync,
    ) -> io::Result<()> {
        let (workers, caller) = self.on_every_thread(what, |worker| {
            let saved = thread_affinity_cpus();
            let wanted = cpus(worker);
            let pinned = pin_current_thread(&wanted).and_then(|()| {
                moved_onto(
                    &wanted,
                    &thread_affinity_cpus(),
                    crate::colocation::current_cpu(),
                )
                .map_err(io::Error::other)
            });
            (saved, pinned)
        })?;
        let errors = joined_errors(workers.iter().map(|(_, r)| r), &caller.1);
        lock(&self.shared.placement.saved_masks).get_or_insert_with(|| SavedMasks {
            workers: workers.into_iter().map(|(mask, _)| mask).collect(),
            caller: caller.0,
        });
        if let Err(err) = errors {
            let rollback = self.restore_saved_masks(what, pin_current_thread);
            return Err(io::Error::other(match rollback {
                Ok(()) => format!("{what}: {err}; every thread got its mask back"),
                Err(again) => format!("{what}: {err}; rolling back failed too: {again}"),
            }));
        }
        Ok(())
    }

    /// Sets the far flags (`far(worker)`) and their count. Only from the
    /// turn holder's share of a job (module invariants).
    fn set_far(&self, far: impl Fn(usize) -> bool, count: usize) {
        for (worker, flag) in self.shared.placement.far.iter().enumerate() {
            flag.store(far(worker), process::Ordering::Relaxed);
        }
        self.shared
            .placement
            .far_workers
            .store(count, process::Ordering::Relaxed);
    }

    /// Runs `action(Some(worker))` on every worker and `action(None)` on the
    /// calling thread, in one job holding the turn; returns the workers'
    /// values in order and the caller's. Fails without running anything
    /// when the job would not reach every worker (called from inside a job
    /// of this pool, or nested while another thread holds its turn).
    fn on_every_thread<T: Send>(
        &self,
        what: &str,
        action: impl Fn(Option<usize>) -> T + Sync,
    ) -> io::Result<(Vec<T>, T)> {
        let workers = self.n_workers();
        if crate::fork::generation() != self.shared.fork_generation {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{what}: this is a forked child, where the pool's workers do not exist; \
                     build a new pool here"
                ),
            ));
        }
        let results: Vec<crate::sync::Mutex<Option<T>>> = (0..=workers)
            .map(|_| crate::sync::Mutex::new(None))
            .collect();
        // Every worker, whatever the adaptive policy would invite: under
        // it, a job fitted to the CPUs other processes leave free reached
        // too few workers, and the bind failed with a false "from inside a
        // job" (every time with workers equal to CPUs).
        self.shared.run_on_every_worker(&self.threads, &|idx, n| {
            if n == workers + 1 {
                *lock(&results[idx]) = Some(action((idx < n - 1).then_some(idx)));
            }
        });
        let mut values: Vec<T> = results
            .iter()
            .filter_map(|result| lock(result).take())
            .collect();
        if values.len() != workers + 1 {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{what}: the job did not reach every worker (called from inside a job of \
                     this pool, or nested while another thread holds its turn); call it from \
                     outside the pool's jobs"
                ),
            ));
        }
        let caller = values.pop().expect("workers + 1 values");
        Ok((values, caller))
    }
}

/// Every thread's error, named, joined into one; `Ok` if there is none.
/// Whether a thread that asked for `wanted` moved there: its mask read
/// back (`mask`) is non-empty and inside `wanted`, and the CPU it runs on
/// (where the platform says) is one of `wanted`. A cpuset or a container
/// runtime can accept a mask and narrow it; the kernel moves a thread
/// that sets its own mask before the call returns.
pub(crate) fn moved_onto(
    wanted: &[usize],
    mask: &[usize],
    running_on: Option<usize>,
) -> Result<(), String> {
    let list = pool_topo::format_cpu_list;
    if mask.is_empty() || mask.iter().any(|cpu| !wanted.contains(cpu)) {
        return Err(format!(
            "asked for CPUs {}, its mask reads {}",
            list(wanted),
            if mask.is_empty() {
                "empty".to_owned()
            } else {
                list(mask)
            }
        ));
    }
    if let Some(cpu) = running_on.filter(|cpu| !wanted.contains(cpu)) {
        return Err(format!(
            "asked for CPUs {}, it still runs on CPU {cpu}",
            list(wanted)
        ));
    }
    Ok(())
}

fn joined_errors<'a>(
    workers: impl Iterator<Item = &'a io::Result<()>>,
    caller: &io::Result<()>,
) -> io::Result<()> {
    let mut errors: Vec<String> = workers
        .enumerate()
        .filter_map(|(w, r)| r.as_ref().err().map(|e| format!("worker {w}: {e}")))
        .collect();
    if let Err(err) = caller {
        errors.push(format!("the calling thread: {err}"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(io::Error::other(errors.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::moved_onto;

    #[test]
    fn a_thread_moved_when_its_mask_and_its_cpu_are_inside_what_it_asked_for() {
        assert_eq!(moved_onto(&[4, 5, 6, 7], &[4, 5, 6, 7], Some(6)), Ok(()));
        assert_eq!(moved_onto(&[4, 5, 6, 7], &[5], None), Ok(()));
    }

    #[test]
    fn a_narrowed_or_foreign_mask_or_a_cpu_elsewhere_is_not_a_move() {
        let outside = moved_onto(&[4, 5], &[0, 1], Some(0)).unwrap_err();
        assert!(
            outside.contains("asked for CPUs 4-5, its mask reads 0-1"),
            "{outside}"
        );
        let empty = moved_onto(&[4, 5], &[], Some(4)).unwrap_err();
        assert!(empty.contains("mask reads empty"), "{empty}");
        let running = moved_onto(&[4, 5], &[4, 5], Some(0)).unwrap_err();
        assert!(running.contains("still runs on CPU 0"), "{running}");
    }
}

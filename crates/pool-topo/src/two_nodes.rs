//! Two-socket placement: a pool split over two NUMA nodes, each half
//! streaming the weights that sit on its own node.
//!
//! Measured on 2 x EPYC 9554: 28 threads on one node read 153-180 GB/s;
//! 14 + 14 over both nodes, each half's data on its own node, 393-421 GB/s.
//! The layout: the caller and the even workers stay on the *home* node, the
//! odd workers move to the *far* node (so any prefix of workers is split
//! evenly). [`MappedFile::place_span`](crate::MappedFile::place_span) moves
//! a mapped file span's page-cache pages to a node when fewer than 90 % of them are there already, without
//! `move_pages`/`mbind` (which containers often refuse): it drops the pages
//! (`madvise` + `posix_fadvise(DONTNEED)`) and reads them again from a
//! thread pinned to the wanted node.

use std::fmt;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::io;

#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::affinity::pin_current_thread;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::numa::{node_of_pages, page_size, BIND_THRESHOLD_PERCENT};
use crate::numa::{NumaNode, NumaSetting, NUMA_ENV};

/// Which node each participant of a split pool sits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwoNodePlan {
    /// The caller's node: the caller and the even workers.
    pub home: NumaNode,
    /// The other node: the odd workers.
    pub far: NumaNode,
    /// `worker_cpus[i]`: the CPUs worker `i` is pinned to (its node's).
    pub worker_cpus: Vec<Vec<usize>>,
}

impl TwoNodePlan {
    /// Whether worker `i` sits on the far node (odd workers do).
    pub fn is_far(worker: usize) -> bool {
        worker % 2 == 1
    }
}

/// Split the pool, or not, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwoNodeDecision {
    /// Split as planned.
    Split(TwoNodePlan),
    /// Do nothing.
    Stay {
        /// Why.
        reason: String,
    },
}

impl fmt::Display for TwoNodeDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TwoNodeDecision::Split(plan) => write!(
                f,
                "split: caller and even workers on node {}, odd workers on node {}",
                plan.home.id, plan.far.id
            ),
            TwoNodeDecision::Stay { reason } => write!(f, "no split: {reason}"),
        }
    }
}

/// Plans `workers` workers over two nodes. `home_cpu` is the CPU the caller
/// runs on (its node is home, unless `CMF_NUMA=node:N` forces home to N);
/// `allowed` is the process's affinity mask. Pure: fixtures pin every
/// branch.
pub fn plan_two_nodes(
    nodes: &[NumaNode],
    allowed: &[usize],
    workers: usize,
    home_cpu: usize,
    setting: NumaSetting,
) -> TwoNodeDecision {
    plan_by(nodes, allowed, workers, home_cpu, setting, "CPUs", |node| {
        node.cpus.len()
    })
}

/// [`plan_two_nodes`] counting physical cores, as the engines did: the
/// far node is the one with the most first SMT siblings (one CPU per
/// physical core) among the allowed CPUs of `topology`, and each side must
/// have a physical core per thread, so no two of a side's threads are
/// planned onto one core's siblings. On a host without SMT it decides as
/// [`plan_two_nodes`] does.
pub fn plan_two_nodes_on_cores(
    nodes: &[NumaNode],
    topology: &crate::CpuTopology,
    workers: usize,
    home_cpu: usize,
    setting: NumaSetting,
) -> TwoNodeDecision {
    let first_siblings = topology.physical_core_cpus();
    plan_by(
        nodes,
        topology.allowed_cpus(),
        workers,
        home_cpu,
        setting,
        "physical cores",
        |node| {
            node.cpus
                .iter()
                .filter(|cpu| first_siblings.contains(cpu))
                .count()
        },
    )
}

/// The decision, each node's capacity counted by `capacity` (of the
/// node's allowed CPUs), named `unit` in the reasons.
fn plan_by(
    nodes: &[NumaNode],
    allowed: &[usize],
    workers: usize,
    home_cpu: usize,
    setting: NumaSetting,
    unit: &str,
    capacity: impl Fn(&NumaNode) -> usize,
) -> TwoNodeDecision {
    let stay = |reason: String| TwoNodeDecision::Stay { reason };
    if setting == NumaSetting::Off {
        return stay(format!("disabled by {NUMA_ENV}"));
    }
    let usable: Vec<NumaNode> = nodes
        .iter()
        .map(|n| NumaNode {
            id: n.id,
            cpus: n.cpus_in(allowed),
        })
        .filter(|n| !n.cpus.is_empty())
        .collect();
    if usable.len() < 2 {
        return stay(
            "single-node host (or one node in the affinity mask): nothing to split".into(),
        );
    }
    let home = match setting {
        NumaSetting::Node(id) => match usable.iter().find(|n| n.id == id) {
            Some(node) => node.clone(),
            None => {
                return stay(format!(
                    "{NUMA_ENV}=node:{id} names no node with allowed CPUs"
                ))
            }
        },
        _ => usable
            .iter()
            .find(|n| n.cpus.contains(&home_cpu))
            .unwrap_or(&usable[0])
            .clone(),
    };
    let far = usable
        .iter()
        .filter(|n| n.id != home.id)
        // Most capacity; the lowest id among equals.
        .max_by_key(|n| (capacity(n), std::cmp::Reverse(n.id)))
        .expect("two usable nodes")
        .clone();
    let far_workers = workers / 2;
    let home_threads = workers - far_workers + 1;
    if capacity(&far) < far_workers {
        return stay(format!(
            "node {} has {} {unit} for {far_workers} far workers",
            far.id,
            capacity(&far)
        ));
    }
    if capacity(&home) < home_threads {
        return stay(format!(
            "node {} has {} {unit} for the caller and {} home workers",
            home.id,
            capacity(&home),
            home_threads - 1
        ));
    }
    let worker_cpus = (0..workers)
        .map(|i| {
            let node = if TwoNodePlan::is_far(i) { &far } else { &home };
            node.cpus.clone()
        })
        .collect();
    TwoNodeDecision::Split(TwoNodePlan {
        home,
        far,
        worker_cpus,
    })
}

/// What [`MappedFile::place_span`](crate::MappedFile::place_span) did.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanPlacement {
    /// The node the span should sit on.
    pub node: usize,
    /// Share (percent) of the resident sample on `node` before.
    pub share_before: usize,
    /// Share (percent) on `node` afterwards.
    pub share_after: usize,
    /// Share (percent) of the resident sample on each node afterwards.
    pub shares_after: std::collections::BTreeMap<usize, usize>,
    /// Bytes read from `node` (0: it was already there).
    pub bytes_moved: usize,
    /// Whether the span was cold (fewer than half of its sampled pages in
    /// the page cache) and was read in from `node` without dropping
    /// anything: a fill, not a move.
    pub filled: bool,
    /// Why nothing was moved, when nothing was.
    pub reason: Option<String>,
}

/// A placement about to read a span from its node: what
/// [`MappedFile::place_span_with`](crate::MappedFile::place_span_with)'s
/// `on_move` sees before the slow part starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanMove {
    /// The node the span is read from.
    pub node: usize,
    /// Bytes to read.
    pub bytes: usize,
    /// A cold span filled from the node (nothing dropped), rather than a
    /// resident one dropped and read again.
    pub fill: bool,
    /// Share (percent) of the resident sample on the node before.
    pub share_before: usize,
}

/// The first step of a placement
/// ([`MappedFile::begin_placement`](crate::MappedFile::begin_placement)):
/// done already, or a span whose pages now need reading from its node.
#[derive(Debug)]
pub enum Placement {
    /// Nothing to read: the span is in place (the placement says why).
    Done(SpanPlacement),
    /// The span's pages must be read from the node, by threads running
    /// there, through
    /// [`MappedFile::read_span_pages`](crate::MappedFile::read_span_pages);
    /// then [`MappedFile::finish_placement`](crate::MappedFile::finish_placement).
    Read(PendingSpan),
}

impl Placement {
    /// The span still to read, if any.
    pub fn pending(&self) -> Option<&PendingSpan> {
        match self {
            Placement::Read(pending) => Some(pending),
            Placement::Done(_) => None,
        }
    }
}

/// A span dropped from the page cache (or cold), waiting to be read from
/// its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSpan {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) node: usize,
    pub(crate) share_before: usize,
    pub(crate) fill: bool,
}

impl PendingSpan {
    /// What is about to happen, for a progress report.
    pub fn as_move(&self) -> SpanMove {
        SpanMove {
            node: self.node,
            bytes: self.range.len(),
            fill: self.fill,
            share_before: self.share_before,
        }
    }

    /// The span's pages: the unit
    /// [`MappedFile::read_span_pages`](crate::MappedFile::read_span_pages)
    /// splits the reading by.
    pub fn pages(&self) -> usize {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let page = page_size();
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let page = 4096;
        self.range.len().div_ceil(page)
    }
}

/// Percent of `span`'s resident sample per node, and whether the span is
/// cold.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn span_shares(
    span: &[u8],
) -> io::Result<(std::collections::BTreeMap<usize, usize>, bool)> {
    let placement = node_of_pages(&[span])?;
    let resident = placement.resident().max(1);
    let shares = placement
        .per_node
        .iter()
        .map(|(&id, &pages)| (id, pages * 100 / resident))
        .collect();
    Ok((shares, placement.cold()))
}

/// Decides what `span` needs to sit on `node` and, for a resident span
/// elsewhere, drops its pages (see
/// [`MappedFile::begin_placement`](crate::MappedFile::begin_placement), its
/// only caller).
///
/// # Safety
///
/// `span` lies inside a shared, read-only mapping of `file`, at
/// `file_offset` bytes into the file, and that mapping starts on a page
/// boundary: dropping the pages the span rounds out to (`MADV_DONTNEED`)
/// then only drops this process's page-table entries of that file, and the
/// next access reads the same bytes again. On any other memory (heap, a
/// private mapping that was written to) it would wipe the contents.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) unsafe fn begin_file_span(
    span: &[u8],
    range: std::ops::Range<usize>,
    file: &std::fs::File,
    node: &NumaNode,
) -> io::Result<Placement> {
    use std::os::fd::AsRawFd;
    let (before, cold) = span_shares(span)?;
    let share_before = before.get(&node.id).copied().unwrap_or(0);
    if !cold && share_before >= BIND_THRESHOLD_PERCENT {
        return Ok(Placement::Done(SpanPlacement {
            node: node.id,
            share_before,
            share_after: share_before,
            shares_after: before,
            bytes_moved: 0,
            filled: false,
            reason: Some(format!("{share_before} % already on node {}", node.id)),
        }));
    }
    if node.cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("node {} has no CPUs to read from", node.id),
        ));
    }
    if !cold {
        let page = page_size();
        let page_start = span.as_ptr() as usize / page * page;
        let length = span.as_ptr() as usize + span.len() - page_start;
        // SAFETY: the function's contract: `span` is in a shared read-only
        // file mapping that starts on a page boundary, so `page_start` (its
        // start rounded down) and the length (rounded out to whole pages by
        // the kernel) stay inside that mapping, and DONTNEED there only
        // drops this process's PTEs: the next access faults the same bytes
        // in again.
        let rc =
            unsafe { libc::madvise(page_start as *mut libc::c_void, length, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a plain syscall on a borrowed, open descriptor.
        let rc = unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                range.start as libc::off_t,
                span.len() as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    Ok(Placement::Read(PendingSpan {
        range,
        node: node.id,
        share_before,
        fill: cold,
    }))
}

/// Reads one byte of each page `pages` of `span` (page 0 is the page of
/// the span's first byte): run on the node's CPUs, the page cache fills
/// there.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn touch_pages(span: &[u8], pages: std::ops::Range<usize>) {
    let page = page_size();
    let mut sum = 0u8;
    for chunk in span.chunks(page).skip(pages.start).take(pages.len()) {
        sum = sum.wrapping_add(std::hint::black_box(chunk[0]));
    }
    std::hint::black_box(sum);
}

/// Samples a span read by [`touch_pages`] again: the placement's result.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn finish_file_span(span: &[u8], pending: PendingSpan) -> io::Result<SpanPlacement> {
    let (after, _) = span_shares(span)?;
    Ok(SpanPlacement {
        node: pending.node,
        share_before: pending.share_before,
        share_after: after.get(&pending.node).copied().unwrap_or(0),
        shares_after: after,
        bytes_moved: pending.range.len(),
        filled: pending.fill,
        reason: None,
    })
}

/// One thread pinned to `node`'s CPUs reads every page of `span`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn read_on_node(span: &[u8], node: &NumaNode, pages: usize) -> io::Result<()> {
    let cpus = node.cpus.clone();
    std::thread::scope(|s| {
        s.spawn(|| -> io::Result<()> {
            pin_current_thread(&cpus)?;
            touch_pages(span, 0..pages);
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the reading thread panicked")))
    })
}

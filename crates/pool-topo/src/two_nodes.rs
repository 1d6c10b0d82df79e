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
    let stay = |reason: String| TwoNodeDecision::Stay { reason };
    if setting == NumaSetting::Off {
        return stay(format!("disabled by {NUMA_ENV}"));
    }
    let usable: Vec<NumaNode> = nodes
        .iter()
        .map(|n| NumaNode {
            id: n.id,
            cpus: n
                .cpus
                .iter()
                .copied()
                .filter(|c| allowed.contains(c))
                .collect(),
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
        .max_by_key(|n| n.cpus.len())
        .expect("two usable nodes")
        .clone();
    let far_workers = workers / 2;
    let home_threads = workers - far_workers + 1;
    if far.cpus.len() < far_workers {
        return stay(format!(
            "node {} has {} CPUs for {far_workers} far workers",
            far.id,
            far.cpus.len()
        ));
    }
    if home.cpus.len() < home_threads {
        return stay(format!(
            "node {} has {} CPUs for the caller and {} home workers",
            home.id,
            home.cpus.len(),
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
    /// Bytes dropped and read again from `node` (0: it was already there).
    pub bytes_moved: usize,
    /// Why nothing was moved, when nothing was.
    pub reason: Option<String>,
}

/// Makes the page-cache pages behind `span` sit on `node` (see
/// [`MappedFile::place_span`](crate::MappedFile::place_span), its only
/// caller).
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
pub(crate) unsafe fn place_file_span(
    span: &[u8],
    file: &std::fs::File,
    file_offset: u64,
    node: &NumaNode,
) -> io::Result<SpanPlacement> {
    use std::os::fd::AsRawFd;
    // Percent of the resident sample per node.
    let shares = |span: &[u8]| -> io::Result<std::collections::BTreeMap<usize, usize>> {
        let placement = node_of_pages(&[span])?;
        let resident = placement.resident().max(1);
        Ok(placement
            .per_node
            .iter()
            .map(|(&id, &pages)| (id, pages * 100 / resident))
            .collect())
    };
    let before = shares(span)?;
    let share_before = before.get(&node.id).copied().unwrap_or(0);
    if share_before >= BIND_THRESHOLD_PERCENT {
        return Ok(SpanPlacement {
            node: node.id,
            share_before,
            share_after: share_before,
            shares_after: before,
            bytes_moved: 0,
            reason: Some(format!("{share_before} % already on node {}", node.id)),
        });
    }
    if node.cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("node {} has no CPUs to read from", node.id),
        ));
    }
    let page = page_size();
    let page_start = span.as_ptr() as usize / page * page;
    let length = span.as_ptr() as usize + span.len() - page_start;
    // SAFETY: the function's contract: `span` is in a shared read-only file
    // mapping that starts on a page boundary, so `page_start` (its start
    // rounded down) and the length (rounded out to whole pages by the
    // kernel) stay inside that mapping, and DONTNEED there only drops this
    // process's PTEs: the next access faults the same bytes in again.
    let rc = unsafe { libc::madvise(page_start as *mut libc::c_void, length, libc::MADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a plain syscall on a borrowed, open descriptor.
    let rc = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            file_offset as libc::off_t,
            span.len() as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let cpus = node.cpus.clone();
    std::thread::scope(|s| {
        s.spawn(|| -> io::Result<()> {
            pin_current_thread(&cpus)?;
            let mut sum = 0u8;
            for chunk in span.chunks(page) {
                sum = sum.wrapping_add(chunk[0]);
            }
            std::hint::black_box(sum);
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the reading thread panicked")))
    })?;
    let after = shares(span)?;
    Ok(SpanPlacement {
        node: node.id,
        share_before,
        share_after: after.get(&node.id).copied().unwrap_or(0),
        shares_after: after,
        bytes_moved: span.len(),
        reason: None,
    })
}

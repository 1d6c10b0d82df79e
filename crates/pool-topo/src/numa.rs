//! NUMA: which node holds the weights, and keeping the pool there.
//!
//! Decode streams every weight once per token, and the page cache keeps a
//! file's pages on the node that read them. On 2 x EPYC 7763 a read of a
//! node-0 buffer gave 42 GB/s from 31 unpinned threads and 74 GB/s from 31
//! threads kept on node 0. So: sample the weights' pages, and when one node
//! holds at least [`BIND_THRESHOLD_PERCENT`] % of the resident sample, keep
//! the caller and the workers (threads spawned afterwards inherit the mask)
//! on that node. `CMF_NUMA=0|off` disables; `CMF_NUMA=node:N` forces node N.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::Path;

use crate::affinity::{pin_current_thread, process_affinity_cpus};
use crate::cpulist::parse_cpu_list;
use crate::error::{read_text, TopoError};
use crate::topology::CpuTopology;

/// Where Linux describes NUMA nodes.
pub const SYSFS_NODE_ROOT: &str = "/sys/devices/system/node";
/// The variable that controls binding.
pub const NUMA_ENV: &str = "CMF_NUMA";

/// `CMF_NUMA_TRACE=1` prints every NUMA decision on stderr.
pub const NUMA_TRACE_ENV: &str = "CMF_NUMA_TRACE";
/// Share of the resident sample one node must hold to be bound to.
pub const BIND_THRESHOLD_PERCENT: usize = 90;
/// Pages sampled per region at most.
pub const MAX_SAMPLE_PAGES: usize = 4096;

/// One NUMA node and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// The node id (`nodeN`).
    pub id: usize,
    /// Its logical CPUs, ascending.
    pub cpus: Vec<usize>,
}

impl NumaNode {
    /// Its CPUs that are also in `allowed` (an affinity mask), ascending.
    pub fn cpus_in(&self, allowed: &[usize]) -> Vec<usize> {
        self.cpus
            .iter()
            .copied()
            .filter(|cpu| allowed.contains(cpu))
            .collect()
    }
}

/// The nodes under `root` (normally [`SYSFS_NODE_ROOT`]), by id, with CPUs
/// from `nodeN/cpulist`. A missing root is an error (no NUMA information).
pub fn numa_nodes(root: &Path) -> Result<Vec<NumaNode>, TopoError> {
    let entries = std::fs::read_dir(root).map_err(|err| TopoError::read(root, err))?;
    let mut nodes = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| TopoError::read(root, err))?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|name| name.strip_prefix("node"))
            .and_then(|id| id.parse::<usize>().ok())
        else {
            continue;
        };
        let file = entry.path().join("cpulist");
        let cpus = parse_cpu_list(&read_text(&file)?).map_err(|err| err.in_file(&file))?;
        nodes.push(NumaNode { id, cpus });
    }
    nodes.sort_unstable_by_key(|node| node.id);
    Ok(nodes)
}

/// How the page sample was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementMethod {
    /// `move_pages` in query mode, page by page.
    MovePages,
    /// `/proc/self/numa_maps`, per mapping (where seccomp refuses
    /// `move_pages`); coarser: whole mappings overlapping the regions.
    NumaMaps,
}

/// Where a sample of pages lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePlacement {
    /// Pages looked at.
    pub sampled: usize,
    /// Of those, pages in memory (the page cache, for a file): only these
    /// were asked about, so reading the sample never starts disk I/O.
    pub cached: usize,
    /// Pages per node, among the resident ones.
    pub per_node: BTreeMap<usize, usize>,
    /// How they were counted.
    pub method: PlacementMethod,
}

impl PagePlacement {
    /// Resident pages counted on any node.
    pub fn resident(&self) -> usize {
        self.per_node.values().sum()
    }

    /// Whether fewer than half the sampled pages are in memory: a cold
    /// file, whose pages will land wherever the first reads happen, so
    /// its sample says nothing yet about where the weights will be.
    pub fn cold(&self) -> bool {
        self.cached * 2 < self.sampled
    }

    /// The node holding the most resident pages, and its share in percent.
    pub fn majority(&self) -> Option<(usize, usize)> {
        let resident = self.resident();
        let (&node, &pages) = self.per_node.iter().max_by_key(|(_, &pages)| pages)?;
        Some((node, pages * 100 / resident.max(1)))
    }
}

/// `CMF_NUMA`'s meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumaSetting {
    /// Bind to the majority node when it holds enough of the sample.
    Auto,
    /// Never bind (`CMF_NUMA=0` or `off`).
    Off,
    /// Always bind to this node (`CMF_NUMA=node:N`).
    Node(usize),
}

/// Parses a `CMF_NUMA` value (`None`: unset). Invalid values are errors.
pub fn parse_numa_setting(value: Option<&str>) -> Result<NumaSetting, TopoError> {
    let Some(text) = value else {
        return Ok(NumaSetting::Auto);
    };
    match text.trim() {
        "" | "auto" | "1" | "on" => Ok(NumaSetting::Auto),
        "0" | "off" => Ok(NumaSetting::Off),
        other => other
            .strip_prefix("node:")
            .and_then(|n| n.parse().ok())
            .map(NumaSetting::Node)
            .ok_or_else(|| {
                TopoError::parse(text, format!("{NUMA_ENV} must be 0, off, auto or node:N"))
            }),
    }
}

/// `CMF_NUMA` from the environment; an invalid value is warned about and
/// read as `Auto`.
pub fn numa_setting_from_env() -> NumaSetting {
    let raw = std::env::var(NUMA_ENV).ok();
    parse_numa_setting(raw.as_deref()).unwrap_or_else(|err| {
        crate::warn_env(
            NUMA_ENV,
            raw.as_deref().unwrap_or_default(),
            format_args!("pool-topo: ignoring invalid {NUMA_ENV} ({err}); using auto"),
        );
        NumaSetting::Auto
    })
}

/// What to do, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumaDecision {
    /// Keep the pool on `node`.
    Bind {
        /// The chosen node.
        node: NumaNode,
        /// Why.
        reason: String,
    },
    /// Bind nothing.
    Stay {
        /// Why.
        reason: String,
    },
}

impl fmt::Display for NumaDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumaDecision::Bind { node, reason } => write!(f, "bind to node {}: {reason}", node.id),
            NumaDecision::Stay { reason } => write!(f, "no binding: {reason}"),
        }
    }
}

/// Decides where the pool goes: pure, so fixtures pin every branch.
pub fn decide_numa_node(
    nodes: &[NumaNode],
    placement: Option<&PagePlacement>,
    setting: NumaSetting,
) -> NumaDecision {
    let stay = |reason: String| NumaDecision::Stay { reason };
    let with_cpus: Vec<&NumaNode> = nodes.iter().filter(|n| !n.cpus.is_empty()).collect();
    match setting {
        NumaSetting::Off => return stay(format!("disabled by {NUMA_ENV}")),
        NumaSetting::Node(id) => {
            return match with_cpus.iter().find(|node| node.id == id) {
                Some(node) => NumaDecision::Bind {
                    node: (*node).clone(),
                    reason: format!("forced by {NUMA_ENV}=node:{id}"),
                },
                None => stay(format!("{NUMA_ENV}=node:{id} names no node with CPUs")),
            };
        }
        NumaSetting::Auto => {}
    }
    if with_cpus.len() < 2 {
        return stay("single-node host: nothing to bind".to_owned());
    }
    let Some(placement) = placement else {
        return stay("no page placement sample".to_owned());
    };
    if placement.cold() {
        return stay(format!(
            "cold file: {} of {} sampled pages are in memory (< half); read the weights \
             once before deciding",
            placement.cached, placement.sampled
        ));
    }
    let Some((id, share)) = placement.majority() else {
        return stay("no resident pages in the sample".to_owned());
    };
    if share < BIND_THRESHOLD_PERCENT {
        return stay(format!(
            "node {id} holds only {share} % of the resident sample (< {BIND_THRESHOLD_PERCENT} %)"
        ));
    }
    match with_cpus.iter().find(|node| node.id == id) {
        Some(node) => NumaDecision::Bind {
            node: (*node).clone(),
            reason: format!("node {id} holds {share} % of the resident sample"),
        },
        None => stay(format!("node {id} holds the pages but has no CPUs")),
    }
}

/// Samples the pages of `regions`: `mincore` for residency, then each
/// resident sampled page read once (a minor fault at most: it is in
/// memory), then `move_pages` in query mode for the node of each, falling
/// back to `/proc/self/numa_maps` when that syscall is refused.
///
/// The read matters: both queries see only pages mapped into this
/// process, and a freshly mapped file has none, although its pages sit in
/// the page cache on some node. Pages not in memory are never read (no
/// disk I/O); they count in `sampled` but not in `cached`.
pub fn node_of_pages(regions: &[&[u8]]) -> Result<PagePlacement, TopoError> {
    let sample = sample_pages(regions)?;
    for &address in &sample.resident {
        // SAFETY: each address is a byte of one of the live borrows in
        // `regions` (`sample_pages` takes the region's own first byte on
        // its first page), so reading it is reading borrowed memory; the
        // page is in memory (mincore), so the read cannot start I/O.
        std::hint::black_box(unsafe { std::ptr::read_volatile(address as *const u8) });
    }
    let placement = match query_nodes(&sample.resident) {
        Ok(per_node) => PagePlacement {
            sampled: sample.candidates,
            cached: sample.resident.len(),
            per_node,
            method: PlacementMethod::MovePages,
        },
        Err(err) => {
            tracing::debug!(%err, "pool-topo: move_pages refused; reading /proc/self/numa_maps");
            let maps = read_text(Path::new("/proc/self/numa_maps"))?;
            PagePlacement {
                sampled: sample.candidates,
                cached: sample.resident.len(),
                per_node: numa_maps_counts(&maps, regions),
                method: PlacementMethod::NumaMaps,
            }
        }
    };
    numa_trace(format_args!(
        "sampled {} pages, {} in memory, per node {:?} ({:?})",
        placement.sampled, placement.cached, placement.per_node, placement.method
    ));
    Ok(placement)
}

/// Whether `CMF_NUMA_TRACE=1`: each NUMA decision (the sample, the nodes'
/// shares, the masks set) is printed on stderr, as the engines did.
pub fn numa_trace_enabled() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0: not read yet, 1: off, 2: on. Relaxed: racing first readers
    // compute the same answer.
    static TRACE: AtomicU8 = AtomicU8::new(0);
    match TRACE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var(NUMA_TRACE_ENV).is_ok_and(|v| v.trim() == "1");
            TRACE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        state => state == 2,
    }
}

/// Prints `message` on stderr under `CMF_NUMA_TRACE=1` (always a
/// `tracing` debug event).
pub fn numa_trace(message: std::fmt::Arguments<'_>) {
    tracing::debug!("numa: {message}");
    if numa_trace_enabled() {
        eprintln!("{NUMA_TRACE_ENV}: {message}");
    }
}

/// Sampled page candidates and the resident ones among them.
struct PageSample {
    /// Pages considered (evenly spaced, at most [`MAX_SAMPLE_PAGES`] per
    /// region).
    candidates: usize,
    /// A byte address inside each candidate page that is in memory.
    resident: Vec<usize>,
}

/// The system's page size (4096 if it cannot be read).
#[cfg(unix)]
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// Not read off Unix (page placement is Linux-only anyway).
#[cfg(not(unix))]
#[allow(dead_code)]
pub(crate) fn page_size() -> usize {
    4096
}

/// Up to [`MAX_SAMPLE_PAGES`] evenly spaced pages per region, and the
/// resident ones among them.
#[cfg(unix)]
fn sample_pages(regions: &[&[u8]]) -> Result<PageSample, TopoError> {
    let page = page_size();
    let mut sample = PageSample {
        candidates: 0,
        resident: Vec::new(),
    };
    for region in regions.iter().filter(|r| !r.is_empty()) {
        let start = region.as_ptr() as usize / page * page;
        let end = region.as_ptr() as usize + region.len();
        let count = (end - start).div_ceil(page);
        let mut resident = vec![0u8; count];
        // SAFETY: [start, start + count pages) covers the live borrow
        // `region` (rounded out to pages, which are mapped since the region
        // is); `resident` has one byte per page, as mincore requires.
        let rc = unsafe {
            libc::mincore(
                start as *mut libc::c_void,
                end - start,
                resident.as_mut_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(TopoError::syscall("mincore", io::Error::last_os_error()));
        }
        let step = count.div_ceil(MAX_SAMPLE_PAGES).max(1);
        let first = region.as_ptr() as usize;
        sample.candidates += (0..count).step_by(step).count();
        sample.resident.extend(
            (0..count)
                .step_by(step)
                .filter(|&i| resident[i] & 1 == 1)
                // The region's own first byte on its first page (the page
                // may start before the borrow).
                .map(|i| (start + i * page).max(first)),
        );
    }
    Ok(sample)
}

/// No `mincore` off Unix: page placement is unsupported there.
#[cfg(not(unix))]
fn sample_pages(_regions: &[&[u8]]) -> Result<PageSample, TopoError> {
    Err(TopoError::syscall(
        "mincore",
        io::Error::new(
            io::ErrorKind::Unsupported,
            "NUMA page placement is Linux/Android only",
        ),
    ))
}

/// `move_pages(0, n, pages, NULL, status, 0)`: the node of each page.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn query_nodes(pages: &[usize]) -> Result<BTreeMap<usize, usize>, TopoError> {
    let mut per_node = BTreeMap::new();
    if pages.is_empty() {
        return Ok(per_node);
    }
    let pointers: Vec<*mut libc::c_void> = pages.iter().map(|&p| p as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; pages.len()];
    // SAFETY: `pointers` and `status` both hold `pages.len()` entries; a
    // NULL node list makes this a query that moves nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pointers.len() as libc::c_ulong,
            pointers.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc < 0 {
        return Err(TopoError::syscall("move_pages", io::Error::last_os_error()));
    }
    for node in status.into_iter().filter(|&s| s >= 0) {
        *per_node.entry(node as usize).or_insert(0) += 1;
    }
    Ok(per_node)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn query_nodes(_pages: &[usize]) -> Result<BTreeMap<usize, usize>, TopoError> {
    Err(TopoError::syscall(
        "move_pages",
        io::Error::new(io::ErrorKind::Unsupported, "Linux/Android only"),
    ))
}

/// Sums `N<node>=<pages>` over the `numa_maps` mappings overlapping the
/// regions (the mapping containing each region's start, and any starting
/// inside it).
pub fn numa_maps_counts(maps: &str, regions: &[&[u8]]) -> BTreeMap<usize, usize> {
    let mappings: Vec<(usize, &str)> = maps
        .lines()
        .filter_map(|line| {
            let (address, rest) = line.split_once(' ')?;
            Some((usize::from_str_radix(address, 16).ok()?, rest))
        })
        .collect();
    let mut chosen = std::collections::BTreeSet::new();
    for region in regions.iter().filter(|r| !r.is_empty()) {
        let (start, end) = (
            region.as_ptr() as usize,
            region.as_ptr() as usize + region.len(),
        );
        if let Some(index) = mappings.iter().rposition(|&(address, _)| address <= start) {
            chosen.insert(index);
        }
        for (index, &(address, _)) in mappings.iter().enumerate() {
            if address > start && address < end {
                chosen.insert(index);
            }
        }
    }
    let mut per_node = BTreeMap::new();
    for index in chosen {
        for field in mappings[index].1.split_whitespace() {
            let Some((node, pages)) = field.strip_prefix('N').and_then(|f| f.split_once('='))
            else {
                continue;
            };
            if let (Ok(node), Ok(pages)) = (node.parse::<usize>(), pages.parse::<usize>()) {
                *per_node.entry(node).or_insert(0) += pages;
            }
        }
    }
    per_node
}

/// For this host: reads `CMF_NUMA` and the nodes, samples `regions`, and
/// decides which node a pool streaming them should run on (binding
/// nothing). A node with no CPU in this process's set is `Stay`, saying so.
pub fn decide_node_for(regions: &[&[u8]]) -> io::Result<NumaDecision> {
    let setting = numa_setting_from_env();
    let nodes = match numa_nodes(Path::new(SYSFS_NODE_ROOT)) {
        Ok(nodes) => nodes,
        Err(err) => {
            return Ok(NumaDecision::Stay {
                reason: format!("no NUMA information ({err})"),
            })
        }
    };
    let placement = if setting == NumaSetting::Auto && nodes.len() > 1 {
        Some(node_of_pages(regions)?)
    } else {
        None
    };
    let mut decision = decide_numa_node(&nodes, placement.as_ref(), setting);
    if let NumaDecision::Bind { node, .. } = &decision {
        let allowed = process_affinity_cpus();
        if !node.cpus.iter().any(|c| allowed.contains(c)) {
            decision = NumaDecision::Stay {
                reason: format!(
                    "node {} has no CPU in this process's affinity mask",
                    node.id
                ),
            };
        }
    }
    numa_trace(format_args!(
        "{NUMA_ENV}={setting:?}, {} node(s): {decision}",
        nodes.len()
    ));
    Ok(decision)
}

/// For this host: [`decide_node_for`], and on `Bind` pins the *calling
/// thread* to the node's CPUs (inside the process's set). That is all it
/// moves: a pool built afterwards still runs its unpinned workers on the
/// process's CPUs (a thread's pin is never taken for the process's). To
/// keep a pool on the node, bind the pool itself:
/// `pool_core::Pool::bind_to_weights` (decides and binds) or
/// `Pool::bind_node`.
pub fn bind_to_node(regions: &[&[u8]]) -> io::Result<NumaDecision> {
    let decision = decide_node_for(regions)?;
    if let NumaDecision::Bind { node, .. } = &decision {
        pin_current_thread(&node.cpus_in(&process_affinity_cpus()))?;
    }
    tracing::info!(%decision, "pool-topo: NUMA");
    Ok(decision)
}

/// Where each thread of a pool bound to one node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBinding {
    /// The node.
    pub node: usize,
    /// `worker_cpus[i]`: the one CPU worker `i` is pinned to.
    pub worker_cpus: Vec<usize>,
    /// The calling thread's mask: all of the node's CPUs.
    pub caller_cpus: Vec<usize>,
}

/// Plans a pool of `workers` workers (plus the caller) on `node`: the
/// caller keeps the node's first CPU in placement order, and worker `i` the
/// next ones: one CPU of each physical core first (performance cores before
/// efficiency cores), SMT siblings only when cores run out. Refuses, saying
/// why, a node with fewer CPUs (inside `topology`'s set) than the pool has
/// threads.
pub fn plan_node_binding(
    topology: &CpuTopology,
    node: &NumaNode,
    workers: usize,
) -> Result<NodeBinding, String> {
    let order: Vec<usize> = crate::plan::placement_order(topology)
        .into_iter()
        .filter(|cpu| node.cpus.contains(cpu))
        .collect();
    if order.len() < workers + 1 {
        return Err(format!(
            "node {} has {} usable CPUs; the pool has {} threads ({workers} workers + the caller): \
             bind a smaller pool, or split it over two nodes",
            node.id,
            order.len(),
            workers + 1
        ));
    }
    Ok(NodeBinding {
        node: node.id,
        worker_cpus: order[1..=workers].to_vec(),
        caller_cpus: order,
    })
}

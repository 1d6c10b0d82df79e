//! Physical cores and their classes, read from sysfs.

use std::collections::BTreeMap;
use std::path::Path;

use crate::affinity::process_affinity_cpus;
use crate::cpulist::parse_cpu_list;
use crate::error::{read_text, TopoError};
use crate::hetero::{classify, ClassSource, CoreClass};

/// Where Linux describes CPUs.
pub const SYSFS_CPU_ROOT: &str = "/sys/devices/system/cpu";

/// One physical core: its allowed logical CPUs (SMT siblings) and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalCore {
    cpus: Vec<usize>,
    class: CoreClass,
}

impl PhysicalCore {
    /// The core's logical CPUs inside the allowed set, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The CPU to pin one thread of this core to: its lowest allowed id.
    pub fn first_cpu(&self) -> usize {
        self.cpus[0]
    }

    /// Performance or efficiency core.
    pub fn class(&self) -> CoreClass {
        self.class
    }
}

/// The CPUs this process may use, grouped into physical cores.
///
/// Decode is bandwidth-bound: an SMT sibling adds no bandwidth and contends
/// for the same load ports, so the pool counts physical cores, read from each
/// CPU's `topology/core_cpus_list` (older kernels: `thread_siblings_list`)
/// and never assumed from id adjacency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    allowed: Vec<usize>,
    cores: Vec<PhysicalCore>,
    class_source: ClassSource,
    degraded: Option<String>,
}

impl CpuTopology {
    /// This host's topology over the process's affinity mask. Never fails:
    /// an unreadable sysfs degrades to one core per logical CPU, logged.
    pub fn detect() -> CpuTopology {
        let allowed = process_affinity_cpus();
        #[cfg(target_os = "macos")]
        if let Some(topology) = macos::detect(&allowed) {
            return topology;
        }
        match CpuTopology::from_sysfs(Path::new(SYSFS_CPU_ROOT), &allowed) {
            Ok(topology) => topology,
            Err(err) => {
                let reason = format!("sysfs unreadable ({err})");
                tracing::warn!(%reason, "pool-topo: assuming one physical core per logical CPU");
                CpuTopology::one_core_per_cpu(&allowed, reason)
            }
        }
    }

    /// Reads the tree rooted at `root` (the `cpu` directory) for the
    /// `allowed` logical CPUs. A missing root or an empty `allowed` is an
    /// error; a partial tree (a CPU without a readable, valid sibling list)
    /// degrades to one core per logical CPU, says so in a `tracing` warning
    /// and in [`CpuTopology::degraded_reason`].
    pub fn from_sysfs(root: &Path, allowed: &[usize]) -> Result<CpuTopology, TopoError> {
        let mut allowed = allowed.to_vec();
        allowed.sort_unstable();
        allowed.dedup();
        if allowed.is_empty() {
            return Err(TopoError::no_cpus());
        }
        std::fs::read_dir(root).map_err(|err| TopoError::read(root, err))?;
        let (classes, class_source) = classify(root, &allowed);
        let mut topology = match sibling_groups(root, &allowed) {
            Ok(groups) => CpuTopology {
                cores: groups
                    .into_iter()
                    .map(|cpus| PhysicalCore {
                        cpus,
                        class: CoreClass::Performance,
                    })
                    .collect(),
                allowed,
                class_source,
                degraded: None,
            },
            Err(err) => {
                let reason = format!("partial sysfs ({err})");
                tracing::warn!(%reason, "pool-topo: assuming one physical core per logical CPU");
                let mut degraded = CpuTopology::one_core_per_cpu(&allowed, reason);
                degraded.class_source = class_source;
                degraded
            }
        };
        for core in &mut topology.cores {
            // Siblings share a class; a core is a performance core if any
            // of its CPUs is reported as one.
            let performance = core
                .cpus
                .iter()
                .any(|cpu| classes.get(cpu) != Some(&CoreClass::Efficiency));
            core.class = if performance {
                CoreClass::Performance
            } else {
                CoreClass::Efficiency
            };
        }
        Ok(topology)
    }

    /// The fallback shape: every allowed CPU its own performance core.
    pub fn one_core_per_cpu(allowed: &[usize], reason: String) -> CpuTopology {
        let mut allowed = allowed.to_vec();
        allowed.sort_unstable();
        allowed.dedup();
        CpuTopology {
            cores: allowed
                .iter()
                .map(|&cpu| PhysicalCore {
                    cpus: vec![cpu],
                    class: CoreClass::Performance,
                })
                .collect(),
            allowed,
            class_source: ClassSource::Uniform,
            degraded: Some(reason),
        }
    }

    /// The logical CPUs described, ascending.
    pub fn allowed_cpus(&self) -> &[usize] {
        &self.allowed
    }

    /// Physical cores with their siblings, ordered by lowest CPU id.
    pub fn cores(&self) -> &[PhysicalCore] {
        &self.cores
    }

    /// Number of physical cores with at least one allowed CPU.
    pub fn physical_cores(&self) -> usize {
        self.cores.len()
    }

    /// One logical CPU per physical core: the lowest allowed id of each.
    pub fn physical_core_cpus(&self) -> Vec<usize> {
        self.cores.iter().map(PhysicalCore::first_cpu).collect()
    }

    /// Number of physical performance cores.
    pub fn perf_cores(&self) -> usize {
        self.perf_core_iter().count()
    }

    /// One logical CPU per physical performance core.
    pub fn perf_core_cpus(&self) -> Vec<usize> {
        self.perf_core_iter().map(PhysicalCore::first_cpu).collect()
    }

    fn perf_core_iter(&self) -> impl Iterator<Item = &PhysicalCore> {
        self.cores
            .iter()
            .filter(|core| core.class == CoreClass::Performance)
    }

    /// The class of logical CPU `cpu`, if it is allowed.
    pub fn class_of(&self, cpu: usize) -> Option<CoreClass> {
        self.cores
            .iter()
            .find(|core| core.cpus.contains(&cpu))
            .map(PhysicalCore::class)
    }

    /// Where the classes came from.
    pub fn class_source(&self) -> ClassSource {
        self.class_source
    }

    /// Why the sibling information was not used, if it was not.
    pub fn degraded_reason(&self) -> Option<&str> {
        self.degraded.as_deref()
    }
}

/// Groups the allowed CPUs by their sibling lists.
fn sibling_groups(root: &Path, allowed: &[usize]) -> Result<Vec<Vec<usize>>, TopoError> {
    // Keyed by the full sibling list, so a core counts once even when only
    // some of its threads are allowed.
    let mut groups: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    for &cpu in allowed {
        let siblings = read_siblings(root, cpu)?;
        if !siblings.contains(&cpu) {
            return Err(TopoError::parse(
                &format!("{siblings:?}"),
                format!("cpu{cpu}'s sibling list does not contain cpu{cpu}"),
            ));
        }
        groups.entry(siblings).or_default().push(cpu);
    }
    let mut cores: Vec<Vec<usize>> = groups.into_values().collect();
    cores.sort_unstable_by_key(|cpus| cpus[0]);
    Ok(cores)
}

/// `core_cpus_list`, falling back to its older alias `thread_siblings_list`.
fn read_siblings(root: &Path, cpu: usize) -> Result<Vec<usize>, TopoError> {
    let topology = root.join(format!("cpu{cpu}/topology"));
    let primary = topology.join("core_cpus_list");
    let text = match read_text(&primary) {
        Ok(text) => text,
        Err(err) if err.is_not_found() => read_text(&topology.join("thread_siblings_list"))?,
        Err(err) => return Err(err),
    };
    let file = topology.join("core_cpus_list");
    let siblings = parse_cpu_list(&text).map_err(|err| err.in_file(&file))?;
    if siblings.is_empty() {
        return Err(TopoError::parse(&text, "empty sibling list").in_file(&file));
    }
    Ok(siblings)
}

/// Physical cores of this host (inside the affinity mask).
pub fn physical_core_count() -> usize {
    CpuTopology::detect().physical_cores()
}

/// Physical performance cores of this host (inside the affinity mask).
pub fn perf_core_count() -> usize {
    CpuTopology::detect().perf_cores()
}

#[cfg(target_os = "macos")]
mod macos {
    use super::{ClassSource, CoreClass, CpuTopology, PhysicalCore};

    fn sysctl_usize(name: &str) -> Option<usize> {
        let name = std::ffi::CString::new(name).ok()?;
        let mut value: libc::c_int = 0;
        let mut size = std::mem::size_of::<libc::c_int>();
        // SAFETY: `value` is a writable c_int and `size` its size; the name
        // is NUL-terminated.
        let rc = unsafe {
            libc::sysctlbyname(
                name.as_ptr(),
                (&mut value as *mut libc::c_int).cast(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0 && value > 0).then_some(value as usize)
    }

    /// macOS has no sysfs: physical cores from `hw.physicalcpu`, the first
    /// `hw.perflevel0.physicalcpu` of them performance cores.
    pub(super) fn detect(allowed: &[usize]) -> Option<CpuTopology> {
        let physical = sysctl_usize("hw.physicalcpu")?;
        let perf = sysctl_usize("hw.perflevel0.physicalcpu").unwrap_or(physical);
        let cores = (0..physical.min(allowed.len()))
            .map(|i| PhysicalCore {
                cpus: vec![allowed[i]],
                class: if i < perf {
                    CoreClass::Performance
                } else {
                    CoreClass::Efficiency
                },
            })
            .collect();
        Some(CpuTopology {
            allowed: allowed.to_vec(),
            cores,
            class_source: ClassSource::Sysctl,
            degraded: None,
        })
    }
}

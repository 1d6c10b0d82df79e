//! Heterogeneous cores: which CPUs are performance cores.
//!
//! Efficiency cores drag every fork-join to the slowest slice (llama.cpp on
//! an M2 Pro: SmolLM2-135M Q8_0 fell from 346 to 176 tokens/s going from 4
//! to 10 threads), so the default width counts performance cores. Sources,
//! first found wins:
//! 1. Intel hybrid: `/sys/devices/cpu_core/cpus` (P) and
//!    `/sys/devices/cpu_atom/cpus` (E), siblings of the `cpu` directory's
//!    parent's parent;
//! 2. ARM `cpuN/cpu_capacity`, else `cpuN/cpufreq/cpuinfo_max_freq`: a CPU
//!    is a performance core when `value * 8 >= max * 5` (max over the allowed
//!    CPUs), which keeps clock bins of one microarchitecture (ratio < 1.6)
//!    and drops an efficiency cluster; a CPU with no value among CPUs that
//!    have one counts as a performance core;
//! 3. otherwise every CPU is a performance core.
//!
//! The readers are plain code, not cfg'd by architecture, so every fixture
//! runs on every host. (macOS's `hw.perflevel0.physicalcpu` is read in
//! `topology.rs`, where there is no sysfs.)

use std::collections::BTreeMap;
use std::path::Path;

use crate::cpulist::parse_cpu_list;
use crate::error::read_text;

/// Whether a core is one the decode pool should use by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreClass {
    /// A performance core (or the only kind there is).
    Performance,
    /// An efficiency core: slower, left out of the default width.
    Efficiency,
}

/// Where the per-CPU classes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassSource {
    /// No heterogeneity information: every CPU is a performance core.
    Uniform,
    /// Intel hybrid `cpu_core`/`cpu_atom` lists.
    IntelHybrid,
    /// ARM `cpu_capacity`.
    Capacity,
    /// `cpufreq/cpuinfo_max_freq` (no capacity files).
    MaxFrequency,
    /// macOS `hw.perflevel0.physicalcpu`.
    Sysctl,
}

impl ClassSource {
    /// A short stable name, as used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassSource::Uniform => "uniform",
            ClassSource::IntelHybrid => "intel-hybrid",
            ClassSource::Capacity => "cpu_capacity",
            ClassSource::MaxFrequency => "cpuinfo_max_freq",
            ClassSource::Sysctl => "sysctl",
        }
    }
}

/// Classifies each allowed CPU. `root` is the sysfs `cpu` directory.
pub(crate) fn classify(
    root: &Path,
    allowed: &[usize],
) -> (BTreeMap<usize, CoreClass>, ClassSource) {
    if let Some(classes) = intel_hybrid(root, allowed) {
        return (classes, ClassSource::IntelHybrid);
    }
    for (file, source) in [
        ("cpu_capacity", ClassSource::Capacity),
        ("cpufreq/cpuinfo_max_freq", ClassSource::MaxFrequency),
    ] {
        let values: BTreeMap<usize, u64> = allowed
            .iter()
            .filter_map(|&cpu| {
                let path = root.join(format!("cpu{cpu}/{file}"));
                let text = read_text(&path).ok()?;
                match text.trim().parse::<u64>() {
                    Ok(value) => Some((cpu, value)),
                    Err(_) => {
                        tracing::warn!(path = %path.display(), text, "pool-topo: ignoring unparsable value");
                        None
                    }
                }
            })
            .collect();
        if let Some(&max) = values.values().max() {
            let classes = allowed
                .iter()
                .map(|&cpu| {
                    let class = match values.get(&cpu) {
                        Some(&value) if value * 8 < max * 5 => CoreClass::Efficiency,
                        _ => CoreClass::Performance,
                    };
                    (cpu, class)
                })
                .collect();
            return (classes, source);
        }
    }
    let uniform = allowed
        .iter()
        .map(|&cpu| (cpu, CoreClass::Performance))
        .collect();
    (uniform, ClassSource::Uniform)
}

/// Intel hybrid: `devices/cpu_core/cpus` and `devices/cpu_atom/cpus`.
fn intel_hybrid(root: &Path, allowed: &[usize]) -> Option<BTreeMap<usize, CoreClass>> {
    let devices = root.parent()?.parent()?;
    let core_path = devices.join("cpu_core/cpus");
    let atom_path = devices.join("cpu_atom/cpus");
    let read = |path: &Path| -> Option<Vec<usize>> {
        let text = read_text(path).ok()?;
        match parse_cpu_list(&text) {
            Ok(cpus) => Some(cpus),
            Err(err) => {
                tracing::warn!(%err, path = %path.display(), "pool-topo: ignoring hybrid CPU list");
                None
            }
        }
    };
    let performance = read(&core_path)?;
    let efficiency = read(&atom_path).unwrap_or_default();
    Some(
        allowed
            .iter()
            .map(|&cpu| {
                let class = if efficiency.contains(&cpu) && !performance.contains(&cpu) {
                    CoreClass::Efficiency
                } else {
                    CoreClass::Performance
                };
                (cpu, class)
            })
            .collect(),
    )
}

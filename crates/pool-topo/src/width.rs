//! How many participants a decode pool should have.
//!
//! First that is set wins: an explicit API value, `FERROX_CPU_THREADS`,
//! `RAYON_NUM_THREADS`, then the topology default (physical performance
//! cores inside the affinity mask and the cgroup quota, capped at 32).

use std::fmt;

use crate::cgroup::quota_cpus;
use crate::topology::CpuTopology;

/// The engine-level width variable.
pub const FERROX_THREADS_ENV: &str = "FERROX_CPU_THREADS";
/// rayon's width variable, honoured so one setting sizes both.
pub const RAYON_THREADS_ENV: &str = "RAYON_NUM_THREADS";

/// The default's ceiling. A cap of 8 left big machines idle (256-core EPYC:
/// 7.4 tokens/s at 8 threads, 14.8 at 32); past ~32 it falls off (5.5 at 64,
/// 1.6 at 256): one barrier over more threads costs more than their share.
pub const MAX_DEFAULT_THREADS: usize = 32;

/// Where a resolved width came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WidthSource {
    /// The value passed to [`resolve_cpu_threads`].
    Explicit,
    /// `FERROX_CPU_THREADS`.
    FerroxEnv,
    /// `RAYON_NUM_THREADS`.
    RayonEnv,
    /// The topology default.
    Topology,
}

impl WidthSource {
    /// A short stable name, as used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            WidthSource::Explicit => "api",
            WidthSource::FerroxEnv => FERROX_THREADS_ENV,
            WidthSource::RayonEnv => RAYON_THREADS_ENV,
            WidthSource::Topology => "topology",
        }
    }
}

impl fmt::Display for WidthSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A width and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedWidth {
    /// Participants, the calling thread included. At least 1.
    pub threads: usize,
    /// Which rule decided it.
    pub source: WidthSource,
}

/// The width for this process: `explicit`, else `FERROX_CPU_THREADS`, else
/// `RAYON_NUM_THREADS`, else [`default_cpu_threads`] of the detected
/// topology and quota. A value that does not parse or is 0 is warned about,
/// naming the variable and value, and skipped.
pub fn resolve_cpu_threads(explicit: Option<usize>) -> ResolvedWidth {
    resolve_width(
        explicit,
        |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()),
        || default_cpu_threads(&CpuTopology::detect(), quota_cpus()),
        // The real environment: never silent (see `warn_env`).
        crate::warn_env,
    )
}

/// [`resolve_cpu_threads`] with the environment and the default supplied,
/// for tests and for planning another machine.
pub fn resolve_cpu_threads_with(
    explicit: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
    default: impl FnOnce() -> usize,
) -> ResolvedWidth {
    // A supplied environment is not the process's: warn, but keep it out
    // of `env_warnings`.
    resolve_width(explicit, env, default, |variable, value, message| {
        tracing::warn!(variable, value, "{message}")
    })
}

fn resolve_width(
    explicit: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
    default: impl FnOnce() -> usize,
    warn: impl Fn(&'static str, &str, String),
) -> ResolvedWidth {
    match explicit {
        Some(0) => tracing::warn!("pool-topo: an explicit width of 0 threads is ignored"),
        Some(threads) => {
            return ResolvedWidth {
                threads,
                source: WidthSource::Explicit,
            }
        }
        None => {}
    }
    for (name, source) in [
        (FERROX_THREADS_ENV, WidthSource::FerroxEnv),
        (RAYON_THREADS_ENV, WidthSource::RayonEnv),
    ] {
        let Some(value) = env(name) else { continue };
        match value.trim().parse::<usize>() {
            Ok(threads) if threads > 0 => return ResolvedWidth { threads, source },
            _ => warn(
                name,
                &value,
                format!("pool-topo: {name}={value:?} is not a positive thread count; ignoring it"),
            ),
        }
    }
    ResolvedWidth {
        threads: default().max(1),
        source: WidthSource::Topology,
    }
}

/// The topology default: physical performance cores (all physical cores if
/// none is classed as performance), bounded by the cgroup quota, capped at
/// [`MAX_DEFAULT_THREADS`], at least 1.
pub fn default_cpu_threads(topology: &CpuTopology, quota: Option<usize>) -> usize {
    let perf = topology.perf_cores();
    let cores = if perf > 0 {
        perf
    } else {
        topology.physical_cores()
    };
    let bounded = quota.map_or(cores, |quota| cores.min(quota));
    bounded.clamp(1, MAX_DEFAULT_THREADS)
}

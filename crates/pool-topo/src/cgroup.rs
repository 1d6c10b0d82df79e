//! cgroup v2 CPU quota (`cpu.max`): how many CPUs a container may really use.

use std::path::{Path, PathBuf};

use crate::error::{read_text, TopoError};

/// Where cgroup v2 is mounted on Linux.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The CPU quota of this process's cgroup (and its ancestors), rounded up
/// to whole CPUs; `None` when there is no limit (`max`), no cgroup v2, or
/// the files cannot be read (logged at debug level).
pub fn quota_cpus() -> Option<usize> {
    let membership = match read_text(Path::new("/proc/self/cgroup")) {
        Ok(text) => text,
        Err(err) => {
            tracing::debug!(%err, "pool-topo: no cgroup membership; assuming no CPU quota");
            return None;
        }
    };
    match quota_cpus_in(Path::new(CGROUP_ROOT), &membership) {
        Ok(quota) => quota,
        Err(err) => {
            tracing::debug!(%err, "pool-topo: unreadable cgroup CPU quota; assuming none");
            None
        }
    }
}

/// The CPU quota for a process whose `/proc/self/cgroup` reads `membership`,
/// with cgroup v2 mounted at `root`: the tightest `cpu.max` on the path from
/// the process's cgroup up to the root, rounded up to whole CPUs. Missing
/// `cpu.max` files (the root has none) and `max` mean no limit there.
pub fn quota_cpus_in(root: &Path, membership: &str) -> Result<Option<usize>, TopoError> {
    // The v2 entry is the one with hierarchy id 0 and an empty controller list.
    let Some(relative) = membership.lines().find_map(|line| line.strip_prefix("0::")) else {
        return Ok(None);
    };
    let mut dir: PathBuf = root.join(relative.trim().trim_start_matches('/'));
    let mut tightest: Option<usize> = None;
    loop {
        let file = dir.join("cpu.max");
        match read_text(&file) {
            Ok(text) => {
                if let Some(cpus) = parse_cpu_max(&text).map_err(|err| err.in_file(&file))? {
                    tightest = Some(tightest.map_or(cpus, |t| t.min(cpus)));
                }
            }
            Err(err) if err.is_not_found() => {}
            Err(err) => return Err(err),
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            break;
        }
    }
    Ok(tightest)
}

/// Parses `cpu.max` (`"$QUOTA $PERIOD"` or `"max $PERIOD"`) into whole CPUs,
/// rounded up and at least 1; `None` for `max`.
///
/// ```
/// assert_eq!(pool_topo::parse_cpu_max("300000 100000\n").unwrap(), Some(3));
/// assert_eq!(pool_topo::parse_cpu_max("150000 100000").unwrap(), Some(2));
/// assert_eq!(pool_topo::parse_cpu_max("max 100000").unwrap(), None);
/// ```
pub fn parse_cpu_max(text: &str) -> Result<Option<usize>, TopoError> {
    let mut fields = text.split_whitespace();
    let (Some(quota), period) = (fields.next(), fields.next()) else {
        return Err(TopoError::parse(text, "empty cpu.max"));
    };
    if quota == "max" {
        return Ok(None);
    }
    let quota: u64 = quota
        .parse()
        .map_err(|_| TopoError::parse(text, "cpu.max quota is not an integer"))?;
    let period: u64 =
        match period {
            None => 100_000,
            Some(p) => p.parse().ok().filter(|&p| p > 0).ok_or_else(|| {
                TopoError::parse(text, "cpu.max period is not a positive integer")
            })?,
        };
    Ok(Some(quota.div_ceil(period).max(1) as usize))
}

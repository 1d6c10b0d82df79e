//! cgroup CPU quota: how many CPUs a container may really use.
//!
//! - **v2**: `cpu.max` (`"$QUOTA $PERIOD"` or `"max $PERIOD"`) in the
//!   process's group, found through the `0::/path` line of
//!   `/proc/self/cgroup`, under the unified mount.
//! - **v1**: `cpu.cfs_quota_us` (`-1`: no limit) over `cpu.cfs_period_us`,
//!   in the group named by the line whose controller list holds `cpu`
//!   (`4:cpu,cpuacct:/docker/abc`), under that controller's mount
//!   (`/sys/fs/cgroup/cpu,cpuacct` or `/sys/fs/cgroup/cpu`).
//!
//! In both, every group from the process's own up to the mount's root is
//! read and the tightest limit wins: a parent's quota bounds its children.
//! A container whose mount shows only its own subtree (the group path from
//! `/proc/self/cgroup` is not below the mount) is read from the mount root.
//! When a v1 `cpu` controller and a v2 `cpu.max` both limit, the tighter
//! wins.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{read_text, TopoError};

/// Where cgroups are mounted on Linux.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup interface a quota came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1, the `cpu` controller's CFS files.
    V1,
    /// cgroup v2, `cpu.max`.
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// A CPU quota and where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuQuota {
    /// The quota in CPUs (quota / period), e.g. 1.5.
    pub cpus: f64,
    /// The quota per period, in µs.
    pub quota_us: u64,
    /// The period, in µs.
    pub period_us: u64,
    /// v1 or v2.
    pub version: CgroupVersion,
    /// The group directory whose files set the limit.
    pub group: PathBuf,
}

impl CpuQuota {
    /// Whole CPUs, rounded up, at least 1: the most threads that can run at
    /// once without the group being throttled.
    pub fn whole_cpus(&self) -> usize {
        self.quota_us.div_ceil(self.period_us).max(1) as usize
    }
}

impl fmt::Display for CpuQuota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.2} CPUs ({} us per {} us, cgroup {} at {})",
            self.cpus,
            self.quota_us,
            self.period_us,
            self.version,
            self.group.display()
        )
    }
}

/// The CPU quota of this process's cgroup (and its ancestors), rounded up
/// to whole CPUs; `None` when there is no limit, no cgroup, or the files
/// cannot be read (logged at debug level).
pub fn quota_cpus() -> Option<usize> {
    cpu_quota().map(|quota| quota.whole_cpus())
}

/// The tightest CPU quota over this process's cgroups, v1 or v2; `None`
/// when there is none or the files cannot be read (logged at debug level).
pub fn cpu_quota() -> Option<CpuQuota> {
    let membership = match read_text(Path::new("/proc/self/cgroup")) {
        Ok(text) => text,
        Err(err) => {
            tracing::debug!(%err, "pool-topo: no cgroup membership; assuming no CPU quota");
            return None;
        }
    };
    match cpu_quota_in(Path::new(CGROUP_ROOT), &membership) {
        Ok(quota) => quota,
        Err(err) => {
            tracing::debug!(%err, "pool-topo: unreadable cgroup CPU quota; assuming none");
            None
        }
    }
}

/// [`quota_cpus`] for a process whose `/proc/self/cgroup` reads
/// `membership`, with cgroups mounted under `root`.
pub fn quota_cpus_in(root: &Path, membership: &str) -> Result<Option<usize>, TopoError> {
    Ok(cpu_quota_in(root, membership)?.map(|quota| quota.whole_cpus()))
}

/// [`cpu_quota`] for a process whose `/proc/self/cgroup` reads
/// `membership`, with cgroups mounted under `root`: v2 at `root` itself or
/// at `root/unified` (hybrid hosts), v1's `cpu` controller at
/// `root/<controllers>` or `root/cpu`. Missing files mean no limit there.
pub fn cpu_quota_in(root: &Path, membership: &str) -> Result<Option<CpuQuota>, TopoError> {
    let mut found: Vec<CpuQuota> = Vec::new();
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            for mount in [root.to_path_buf(), root.join("unified")] {
                found.extend(tightest_up(&mount, path, read_v2)?);
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            for mount in [root.join(controllers), root.join("cpu")] {
                if mount.is_dir() {
                    found.extend(tightest_up(&mount, path, read_v1)?);
                    break;
                }
            }
        }
    }
    Ok(found.into_iter().min_by(|a, b| a.cpus.total_cmp(&b.cpus)))
}

/// The tightest quota `read` finds from the group at `mount/path` up to
/// `mount`. A group path that does not exist under the mount (a container
/// that sees only its own subtree) is read from the mount's root.
fn tightest_up(
    mount: &Path,
    path: &str,
    read: fn(&Path) -> Result<Option<CpuQuota>, TopoError>,
) -> Result<Option<CpuQuota>, TopoError> {
    if !mount.is_dir() {
        return Ok(None);
    }
    let mut dir = mount.join(path.trim().trim_start_matches('/'));
    if !dir.is_dir() {
        dir = mount.to_path_buf();
    }
    let mut tightest: Option<CpuQuota> = None;
    loop {
        if let Some(quota) = read(&dir)? {
            if tightest.as_ref().is_none_or(|t| quota.cpus < t.cpus) {
                tightest = Some(quota);
            }
        }
        if dir == mount || !dir.pop() || !dir.starts_with(mount) {
            break;
        }
    }
    Ok(tightest)
}

/// Reads a file that may be absent (`Ok(None)`).
fn read_optional(file: &Path) -> Result<Option<String>, TopoError> {
    match read_text(file) {
        Ok(text) => Ok(Some(text)),
        Err(err) if err.is_not_found() => Ok(None),
        Err(err) => Err(err),
    }
}

fn read_v2(group: &Path) -> Result<Option<CpuQuota>, TopoError> {
    let file = group.join("cpu.max");
    let Some(text) = read_optional(&file)? else {
        return Ok(None);
    };
    let Some((quota_us, period_us)) = parse_cpu_max_fields(&text).map_err(|e| e.in_file(&file))?
    else {
        return Ok(None);
    };
    Ok(Some(quota(quota_us, period_us, CgroupVersion::V2, group)))
}

fn read_v1(group: &Path) -> Result<Option<CpuQuota>, TopoError> {
    let quota_file = group.join("cpu.cfs_quota_us");
    let Some(quota_text) = read_optional(&quota_file)? else {
        return Ok(None);
    };
    let quota_us: i64 = quota_text
        .trim()
        .parse()
        .map_err(|_| TopoError::parse(&quota_text, "cpu.cfs_quota_us is not an integer"))
        .map_err(|e| e.in_file(&quota_file))?;
    if quota_us < 0 {
        return Ok(None);
    }
    let period_file = group.join("cpu.cfs_period_us");
    let period_us = match read_optional(&period_file)? {
        None => 100_000,
        Some(text) => text
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| TopoError::parse(&text, "cpu.cfs_period_us is not a positive integer"))
            .map_err(|e| e.in_file(&period_file))?,
    };
    Ok(Some(quota(
        quota_us as u64,
        period_us,
        CgroupVersion::V1,
        group,
    )))
}

fn quota(quota_us: u64, period_us: u64, version: CgroupVersion, group: &Path) -> CpuQuota {
    CpuQuota {
        cpus: quota_us as f64 / period_us as f64,
        quota_us,
        period_us,
        version,
        group: group.to_path_buf(),
    }
}

/// `cpu.max` as (quota, period) in µs; `None` for `max`.
fn parse_cpu_max_fields(text: &str) -> Result<Option<(u64, u64)>, TopoError> {
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
    Ok(Some((quota, period)))
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
    Ok(parse_cpu_max_fields(text)?.map(|(quota, period)| quota.div_ceil(period).max(1) as usize))
}

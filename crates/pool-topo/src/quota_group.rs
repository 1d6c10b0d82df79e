//! A temporary cgroup with a CPU quota, for tests and benchmarks that must
//! put a pool in a container-like setting for real (root only): what
//! [`crate::quota_cpus`] reads, made.
//!
//! Tries the cgroup v1 `cpu` controller (`/sys/fs/cgroup/cpu` or
//! `/sys/fs/cgroup/cpu,cpuacct`), then cgroup v2 at `/sys/fs/cgroup` (the
//! `cpu` controller enabled in the root's `cgroup.subtree_control`). The
//! group is removed on drop, after moving its processes back to the parent.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A cgroup this process created, limited to a CPU quota.
#[derive(Debug)]
pub struct CpuQuotaGroup {
    dir: PathBuf,
    parent: PathBuf,
    v2: bool,
}

impl CpuQuotaGroup {
    /// Creates group `name` limited to `cpus` CPUs (quota over a 100 ms
    /// period). An error says why it could not (not root, no writable cpu
    /// controller): callers skip their setting with that reason.
    pub fn create(name: &str, cpus: f64) -> Result<CpuQuotaGroup, String> {
        let period = 100_000u64;
        let quota = (cpus * period as f64).round() as u64;
        let mut reasons = Vec::new();
        for v1 in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
            let parent = Path::new(v1);
            if !parent.join("cpu.cfs_quota_us").exists() {
                continue;
            }
            let dir = parent.join(name);
            let made = fs::create_dir_all(&dir)
                .and_then(|()| fs::write(dir.join("cpu.cfs_period_us"), period.to_string()))
                .and_then(|()| fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()));
            let group = CpuQuotaGroup {
                dir,
                parent: parent.to_path_buf(),
                v2: false,
            };
            match made {
                Ok(()) => return Ok(group),
                Err(err) => reasons.push(format!("cgroup v1 at {v1}: {err}")),
            }
        }
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.subtree_control").exists() {
            let dir = root.join(name);
            let made = fs::write(root.join("cgroup.subtree_control"), "+cpu")
                .and_then(|()| fs::create_dir_all(&dir))
                .and_then(|()| fs::write(dir.join("cpu.max"), format!("{quota} {period}")));
            let group = CpuQuotaGroup {
                dir,
                parent: root.to_path_buf(),
                v2: true,
            };
            match made {
                Ok(()) => return Ok(group),
                Err(err) => reasons.push(format!("cgroup v2 at /sys/fs/cgroup: {err}")),
            }
        }
        if reasons.is_empty() {
            reasons.push("no cgroup cpu controller found under /sys/fs/cgroup".into());
        }
        Err(reasons.join("; "))
    }

    /// "v1" or "v2".
    pub fn version(&self) -> &'static str {
        if self.v2 {
            "v2"
        } else {
            "v1"
        }
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn add_process(&self, pid: u32) -> io::Result<()> {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// Periods in which the group was throttled so far (`cpu.stat`).
    pub fn throttled_periods(&self) -> Option<u64> {
        let stat = fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        stat.lines()
            .find_map(|line| line.strip_prefix("nr_throttled "))
            .and_then(|n| n.trim().parse().ok())
    }
}

impl Drop for CpuQuotaGroup {
    fn drop(&mut self) {
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = fs::write(self.parent.join("cgroup.procs"), pid);
            }
        }
        // A group can be removed once empty; exiting processes may take a
        // moment to leave it.
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!("pool-topo: could not remove cgroup {}", self.dir.display());
    }
}

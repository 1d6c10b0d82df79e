//! How much memory a process may still take: to refuse a model that
//! cannot fit before allocating it, rather than abort half way.

use std::path::Path;

/// Bytes of memory available for new allocations: `MemAvailable` of
/// `/proc/meminfo` (Linux, Android), bounded by the cgroup v2 `memory.max`
/// of this process's group when it sets one. `None` where neither can be
/// read (other systems, a hidden /proc): callers then go ahead unchecked.
pub fn available_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = parse_mem_available(&meminfo)?;
    let limit = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|membership| cgroup_v2_memory_max(Path::new("/sys/fs/cgroup"), &membership));
    Some(limit.map_or(available, |limit| available.min(limit)))
}

/// `MemAvailable` in bytes from the text of `/proc/meminfo`.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// The `memory.max` of this process's cgroup v2 group (`0::/path` in
/// `membership`), if it sets a number.
fn cgroup_v2_memory_max(root: &Path, membership: &str) -> Option<u64> {
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let file = root.join(path.trim_start_matches('/')).join("memory.max");
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:  16384 kB\nMemFree: 1024 kB\nMemAvailable:    8192 kB\n";
        assert_eq!(parse_mem_available(text), Some(8192 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn this_machine_reports_some_memory_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(available_memory_bytes().unwrap_or(0) > 0);
        }
    }
}

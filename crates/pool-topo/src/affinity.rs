//! The process's CPU affinity mask, and pinning threads to CPUs.

use std::io;

use crate::cgroup::quota_cpus;

/// The logical CPUs this process may run on (`sched_getaffinity`),
/// ascending. Falls back to `0..available_parallelism()` (logged) where the
/// call is unavailable or fails.
pub fn process_affinity_cpus() -> Vec<usize> {
    match read_affinity() {
        Ok(cpus) if !cpus.is_empty() => cpus,
        Ok(_) => fallback_cpus("sched_getaffinity returned an empty mask"),
        Err(err) => fallback_cpus(&format!("sched_getaffinity failed: {err}")),
    }
}

fn fallback_cpus(reason: &str) -> Vec<usize> {
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    tracing::warn!(
        reason,
        count,
        "pool-topo: using CPUs 0..available_parallelism() as the affinity mask"
    );
    (0..count).collect()
}

#[cfg(target_os = "linux")]
fn read_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size we pass.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the initialised set for ids below its size.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

#[cfg(not(target_os = "linux"))]
fn read_affinity() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no affinity mask on this system",
    ))
}

/// CPUs this process can use at once: the affinity mask, bounded by the
/// cgroup CPU quota. Never 0.
pub fn usable_cpus() -> usize {
    let allowed = process_affinity_cpus().len();
    quota_cpus()
        .map_or(allowed, |quota| allowed.min(quota))
        .max(1)
}

/// Pins the calling thread to `cpus` (`sched_setaffinity`). An empty list
/// or a CPU id past the mask's size is `InvalidInput`; the OS error is
/// returned as is (e.g. `EINVAL` for CPUs outside the cgroup's cpuset).
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pin_current_thread: empty CPU list",
        ));
    }
    if let Some(&cpu) = cpus.iter().find(|&&cpu| cpu >= max) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pin_current_thread: CPU {cpu} is past the affinity mask's {max} bits"),
        ));
    }
    // SAFETY: cpu_set_t is plain old data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu < max`, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pinning is not supported off Linux; macOS only takes affinity hints.
#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpus: &[usize]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "thread pinning is only implemented on Linux",
    ))
}

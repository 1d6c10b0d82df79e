//! Foreign load: how many CPUs other processes keep busy.
//!
//! A barrier wait far longer than the caller's share catches participants
//! that are not being scheduled, but not the other symptom of a shared
//! machine: the caller's own serial work between jobs starved by spinners
//! that share its CPU with another process. So, at most every 50 ms, a
//! caller samples `/proc/stat` (all CPUs' busy time) and `getrusage` (this
//! process's): their difference over the interval is the CPUs other
//! processes used. When that plus a pool's threads exceeds the CPUs this
//! process may use, the adaptive policy treats the pool as contended.
//! Linux only; elsewhere (and under loom and Miri) it reads as no load.

use crate::sync::process::{AtomicU64, Ordering};

/// How often a sample may be taken, in ns.
const SAMPLE_INTERVAL_NS: f64 = 50e6;

/// `clock::ticks` of the last sample (0: none yet).
static LAST_SAMPLE: AtomicU64 = AtomicU64::new(0);
/// Busy jiffies of all CPUs, and this process's CPU µs, at the last sample.
static LAST_SYSTEM_JIFFIES: AtomicU64 = AtomicU64::new(0);
static LAST_PROCESS_US: AtomicU64 = AtomicU64::new(0);
/// CPUs other processes kept busy over the last interval, as f64 bits.
static FOREIGN_CPUS: AtomicU64 = AtomicU64::new(0);

/// CPUs other processes kept busy over the last sampled interval.
pub fn foreign_cpus() -> f64 {
    f64::from_bits(FOREIGN_CPUS.load(Ordering::Relaxed))
}

/// Samples if the last sample is older than the interval. `now` is
/// `clock::ticks()`, which the caller has at hand; `ns_per_tick` converts.
#[inline]
pub(crate) fn maybe_sample(now: u64, ns_per_tick: f64) {
    let last = LAST_SAMPLE.load(Ordering::Relaxed);
    if (now.wrapping_sub(last) as f64) * ns_per_tick < SAMPLE_INTERVAL_NS {
        return;
    }
    // One caller takes the sample; the others go on.
    if LAST_SAMPLE
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        sample(now.wrapping_sub(last) as f64 * ns_per_tick, last == 0);
    }
}

#[cold]
fn sample(interval_ns: f64, first: bool) {
    let (Some(system), Some(process)) = (system_busy_jiffies(), process_cpu_us()) else {
        return;
    };
    let last_system = LAST_SYSTEM_JIFFIES.swap(system, Ordering::Relaxed);
    let last_process = LAST_PROCESS_US.swap(process, Ordering::Relaxed);
    if first || interval_ns <= 0.0 {
        return;
    }
    // USER_HZ is 100 on every Linux ABI: a jiffy is 10 ms.
    let system_ns = system.saturating_sub(last_system) as f64 * 1e7;
    let process_ns = process.saturating_sub(last_process) as f64 * 1e3;
    let foreign = ((system_ns - process_ns) / interval_ns).max(0.0);
    FOREIGN_CPUS.store(foreign.to_bits(), Ordering::Relaxed);
}

/// Busy jiffies over all CPUs (`/proc/stat` first line, less idle and
/// iowait).
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
fn system_busy_jiffies() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some(total.saturating_sub(idle))
}

#[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
fn system_busy_jiffies() -> Option<u64> {
    None
}

/// This process's CPU time (user + system), in µs.
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
fn process_cpu_us() -> Option<u64> {
    // SAFETY: `usage` is a valid out-pointer; RUSAGE_SELF cannot fail.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return None;
        }
        usage
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some(us(usage.ru_utime) + us(usage.ru_stime))
}

#[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
fn process_cpu_us() -> Option<u64> {
    None
}

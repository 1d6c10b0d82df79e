//! Foreign load: how many CPUs other processes keep busy.
//!
//! A barrier wait far longer than the caller's share catches participants
//! that are not being scheduled, but not the other symptom of a shared
//! machine: the caller's own serial work between jobs starved by spinners
//! that share its CPU with another process. So, at most every 50 ms, a
//! caller samples the per-CPU lines of `/proc/stat` over *this process's
//! CPUs* (`pool_topo::process_affinity_cpus`, refreshed every second) and
//! `getrusage` (this process's own time): their difference over the
//! interval is the CPUs other processes used *where this process runs*. A
//! busy process on CPUs this process may not use is no load for it. When
//! that plus a pool's threads exceeds the CPUs this process may use, the
//! pool is crowded ([`crowded`]): the waiting caller yields early, and a job
//! invites only as many workers as the CPUs other processes leave free
//! ([`fit_to_free_cpus`]; none: the job runs inline, as fast as a serial
//! loop). Linux and Android only; elsewhere (and under loom and Miri) it
//! reads as no load.

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
/// The two samples before the last, unsmoothed, as f64 bits.
static EARLIER_SAMPLES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// The least of the last three samples, unsmoothed, as f64 bits
/// ([`least_recent_foreign_cpus`]).
static LEAST_RECENT: AtomicU64 = AtomicU64::new(0);

/// Refreshes of the process's CPU set by the load sampler (once a second
/// at most).
static CPU_SET_REFRESHES: AtomicU64 = AtomicU64::new(0);

/// CPUs other processes kept busy over the last sampled interval.
pub fn foreign_cpus() -> f64 {
    f64::from_bits(FOREIGN_CPUS.load(Ordering::Relaxed))
}

/// The least foreign load of the last three samples (150 ms or more),
/// each unsmoothed: high only where the load stayed high throughout, as
/// beside processes that never block, and not where it comes and goes,
/// as beside another decoding pool, whose samples on 2 CPUs swing
/// between 1.0 and 1.4 ([`steadily_short_of_a_cpu`]).
pub(crate) fn least_recent_foreign_cpus() -> f64 {
    f64::from_bits(LEAST_RECENT.load(Ordering::Relaxed))
}

/// How many times the load sampler has read the process's CPU set, the
/// one step of a sample that allocates (at most once a second; every
/// other sample allocates nothing). For tests that count a decode's
/// allocations: a token during which this changed may hold that one.
pub fn cpu_set_refreshes() -> u64 {
    CPU_SET_REFRESHES.load(Ordering::Relaxed)
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
    let (Some(system), Some(process)) = (own_cpus_busy_jiffies(), process_cpu_us()) else {
        return;
    };
    let last_system = LAST_SYSTEM_JIFFIES.swap(system, Ordering::Relaxed);
    let last_process = LAST_PROCESS_US.swap(process, Ordering::Relaxed);
    if first || interval_ns <= 0.0 {
        return;
    }
    let sample = foreign_cpus_between(
        system.saturating_sub(last_system),
        process.saturating_sub(last_process),
        interval_ns,
    );
    // Smoothed over about two samples: busy time in /proc/stat is counted
    // in ticks, and over 50 ms its rounding alone is worth ~0.2 CPU.
    let smoothed = 0.5 * foreign_cpus() + 0.5 * sample;
    FOREIGN_CPUS.store(smoothed.to_bits(), Ordering::Relaxed);
    // One sampler at a time (the exchange in `maybe_sample`); the three
    // stores are a hint, read without a lock.
    let earlier = [0, 1].map(|i| f64::from_bits(EARLIER_SAMPLES[i].load(Ordering::Relaxed)));
    let (earlier, least) = shift_in(earlier, sample);
    for (slot, value) in EARLIER_SAMPLES.iter().zip(earlier) {
        slot.store(value.to_bits(), Ordering::Relaxed);
    }
    LEAST_RECENT.store(least.to_bits(), Ordering::Relaxed);
}

/// The two samples before `sample` become `[sample, earlier[0]]`; returns
/// them and the least of the three.
fn shift_in(earlier: [f64; 2], sample: f64) -> ([f64; 2], f64) {
    ([sample, earlier[0]], sample.min(earlier[0]).min(earlier[1]))
}

/// CPUs other processes kept busy over an interval of `interval_ns`, from
/// the busy jiffies of this process's CPUs and this process's own CPU µs
/// over that interval. USER_HZ is 100 on every Linux ABI: a jiffy is 10 ms.
pub(crate) fn foreign_cpus_between(busy_jiffies: u64, own_us: u64, interval_ns: f64) -> f64 {
    let busy_ns = busy_jiffies as f64 * 1e7;
    let own_ns = own_us as f64 * 1e3;
    ((busy_ns - own_ns) / interval_ns).max(0.0)
}

/// Whether a pool of `pool_threads` (workers + caller) is crowded on
/// `usable_cpus` when other processes keep `foreign` CPUs busy: then a
/// spinning caller may hold the very CPU a worker needs. Below half a CPU
/// is measurement noise (jiffies are 10 ms).
#[inline]
pub(crate) fn crowded(foreign: f64, pool_threads: usize, usable_cpus: usize) -> bool {
    foreign > 0.5 && foreign + pool_threads as f64 > usable_cpus as f64
}

/// Whether other processes keep so many of `usable_cpus` busy that the
/// caller itself is short of one: more than a quarter CPU beyond the CPUs
/// besides its own (on 2 CPUs, more than 1.25). Beside one busy process
/// on 2 CPUs the sample reads 0.6-1.05; beside three, 1.4-1.65. The
/// caller then waits for its CPU for whole time slices at a time, and
/// the wake trials score those waits (`trials.rs`); where it stays short
/// ([`steadily_short_of_a_cpu`]), its withdrawable jobs run on it alone.
#[inline]
pub(crate) fn caller_short_of_a_cpu(foreign: f64, usable_cpus: usize) -> bool {
    foreign > 0.5 && foreign > usable_cpus as f64 - 0.75
}

/// Whether the caller has been short of a CPU ([`caller_short_of_a_cpu`])
/// in each of the last three samples and in the smoothed load `foreign`
/// ([`foreign_cpus`], which the caller has read already): other
/// processes hold every CPU and do not let go, as three busy processes
/// on 2 CPUs do. A withdrawable job then runs on the caller alone
/// (`contention.rs`).
#[inline]
pub(crate) fn steadily_short_of_a_cpu(foreign: f64, usable_cpus: usize) -> bool {
    caller_short_of_a_cpu(foreign, usable_cpus)
        && caller_short_of_a_cpu(least_recent_foreign_cpus(), usable_cpus)
}

/// The workers a job may invite when other processes keep `foreign` CPUs
/// busy out of `usable_cpus`: one CPU is the caller's, the rest that other
/// processes leave free are for workers. Below half a CPU of foreign load
/// (jiffy noise) nothing changes.
#[inline]
pub(crate) fn fit_to_free_cpus(invited: usize, usable_cpus: usize) -> usize {
    let foreign = foreign_cpus();
    if foreign <= 0.5 {
        return invited;
    }
    fit(invited, usable_cpus, foreign)
}

/// [`fit_to_free_cpus`] for a given foreign load.
#[inline]
fn fit(invited: usize, usable_cpus: usize, foreign: f64) -> usize {
    let taken = foreign.round() as usize;
    invited.min(usable_cpus.saturating_sub(taken).saturating_sub(1))
}

/// Busy jiffies (all fields but idle, iowait and steal) summed over the per-CPU
/// lines `cpuN` of a `/proc/stat` text for the CPUs in `cpus`.
#[cfg_attr(
    not(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom))),
    allow(dead_code)
)]
pub(crate) fn busy_jiffies_of(stat: &str, cpus: &[usize]) -> Option<u64> {
    let mut total = 0u64;
    let mut found = false;
    for line in stat.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        let Some((id, fields)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(cpu) = id.parse::<usize>() else {
            continue; // the all-CPU line "cpu  ..."
        };
        if !cpus.contains(&cpu) {
            continue;
        }
        // user nice system idle iowait irq softirq steal: busy is all but
        // idle, iowait and steal (time the hypervisor ran another guest
        // slows every thread alike; it is not a process beside ours).
        let (mut all, mut idle, mut seen) = (0u64, 0u64, 0);
        for (i, field) in fields
            .split_whitespace()
            .filter_map(|f| f.parse::<u64>().ok())
            .take(7)
            .enumerate()
        {
            all += field;
            if i == 3 || i == 4 {
                idle += field;
            }
            seen = i + 1;
        }
        if seen < 4 {
            return None; // no idle field: not a line this code knows
        }
        total += all.saturating_sub(idle);
        found = true;
    }
    found.then_some(total)
}

/// Busy jiffies of this process's CPUs. Allocates nothing but once a
/// second, when it refreshes the process's CPU set: the text of
/// `/proc/stat` is read into a buffer kept from the last sample, since a
/// sample runs on a caller between jobs, where an allocation is a chain of
/// cache misses (the decode tests count every allocation of a token).
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom)))]
fn own_cpus_busy_jiffies() -> Option<u64> {
    use std::io::Read;

    use crate::fork_safe::ForkSafeMutex;
    /// The process's CPUs, when they were read (`clock::ticks`), and the
    /// last sample's `/proc/stat` bytes (kept for their capacity).
    struct Sampler {
        cpus: Vec<usize>,
        read_at: u64,
        text: Vec<u8>,
    }
    const fn fresh() -> Sampler {
        Sampler {
            cpus: Vec::new(),
            read_at: 0,
            text: Vec::new(),
        }
    }
    static SAMPLER: ForkSafeMutex<Sampler> = ForkSafeMutex::new(fresh(), fresh);
    let now = crate::clock::ticks();
    let mut sampler = SAMPLER.lock();
    let age_ns = now.wrapping_sub(sampler.read_at) as f64 * crate::clock::ns_per_tick();
    if sampler.cpus.is_empty() || age_ns > 1e9 {
        sampler.cpus = pool_topo::process_affinity_cpus();
        sampler.read_at = now;
        CPU_SET_REFRESHES.fetch_add(1, Ordering::Relaxed);
    }
    let Sampler { cpus, text, .. } = &mut *sampler;
    text.clear();
    // Room for a large host's file at the first sample; `read_to_end`
    // grows the buffer only past it.
    text.reserve(16 << 10);
    std::fs::File::open("/proc/stat")
        .and_then(|mut file| file.read_to_end(text))
        .ok()?;
    busy_jiffies_of(std::str::from_utf8(text).ok()?, cpus)
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom))))]
fn own_cpus_busy_jiffies() -> Option<u64> {
    None
}

/// This process's CPU time (user + system), in µs.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom)))]
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

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom))))]
fn process_cpu_us() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two samples of a 4-CPU host's `/proc/stat`, 1 s apart: CPU 2 went
    /// fully busy (100 jiffies), CPU 0 half busy, CPUs 1 and 3 idle.
    const BEFORE: &str = "cpu  400 0 0 4000 0 0 0 0 0 0
cpu0 100 0 0 1000 0 0 0 0 0 0
cpu1 100 0 0 1000 0 0 0 0 0 0
cpu2 100 0 0 1000 0 0 0 0 0 0
cpu3 100 0 0 1000 0 0 0 0 0 0
intr 1 2 3
";
    const AFTER: &str = "cpu  550 0 0 4250 0 0 0 0 0 0
cpu0 150 0 0 1050 0 0 0 0 0 0
cpu1 100 0 0 1100 0 0 0 0 0 0
cpu2 200 0 0 1000 0 0 0 0 0 0
cpu3 100 0 0 1100 0 0 0 0 0 0
intr 1 2 3
";

    fn foreign_on(cpus: &[usize], own_us: u64) -> f64 {
        let busy = busy_jiffies_of(AFTER, cpus).unwrap() - busy_jiffies_of(BEFORE, cpus).unwrap();
        foreign_cpus_between(busy, own_us, 1e9)
    }

    #[test]
    fn a_busy_process_on_a_cpu_outside_the_mask_is_no_load_for_this_process() {
        // Mask {0, 1}: only CPU 0's half CPU, all of it this process's own.
        assert_eq!(foreign_on(&[0, 1], 500_000), 0.0);
        assert!(!crowded(foreign_on(&[0, 1], 500_000), 2, 2));
    }

    #[test]
    fn a_busy_process_on_a_cpu_inside_the_mask_crowds_a_pool_that_needs_every_cpu() {
        // Mask {1, 2}: CPU 2 fully busy, this process used nothing there.
        let foreign = foreign_on(&[1, 2], 0);
        assert!((foreign - 1.0).abs() < 1e-9, "{foreign}");
        assert!(crowded(foreign, 2, 2), "2 threads on 2 CPUs, one taken");
        assert!(!crowded(foreign, 1, 2), "a caller alone still has a CPU");
    }

    #[test]
    fn this_processs_own_time_is_not_foreign_load() {
        // Mask {0, 2}: 1.5 CPUs busy, 1.5 of them this process's own.
        assert_eq!(foreign_on(&[0, 2], 1_500_000), 0.0);
    }

    #[test]
    fn foreign_load_shrinks_a_job_to_the_cpus_it_leaves_free() {
        // 2 CPUs, a busy process on one: the caller alone (inline).
        assert_eq!(fit(1, 2, 1.0), 0);
        // 16 CPUs, one busy: 14 workers + the caller still fit.
        assert_eq!(fit(15, 16, 1.0), 14);
        // A limited job that already fits is left alone.
        assert_eq!(fit(3, 16, 2.2), 3);
        // Everything taken: inline, never an underflow.
        assert_eq!(fit(7, 8, 9.0), 0);
    }

    #[test]
    fn the_caller_is_short_of_a_cpu_only_beyond_the_cpus_besides_its_own() {
        // 2 CPUs: one busy process leaves the caller its CPU, three do not.
        assert!(!caller_short_of_a_cpu(1.05, 2));
        assert!(caller_short_of_a_cpu(1.4, 2));
        // 16 CPUs: 15 busy leave the caller one.
        assert!(!caller_short_of_a_cpu(15.0, 16));
        assert!(caller_short_of_a_cpu(15.5, 16));
        // 1 CPU: any load beyond the noise.
        assert!(!caller_short_of_a_cpu(0.5, 1));
        assert!(caller_short_of_a_cpu(0.6, 1));
    }

    #[test]
    fn the_least_recent_load_is_the_least_of_the_last_three_samples() {
        // Beside another decoding pool: one high sample among lower ones.
        let (earlier, least) = shift_in([1.05, 1.4], 1.1);
        assert_eq!(earlier, [1.1, 1.05]);
        assert_eq!(least, 1.05);
        assert!(!caller_short_of_a_cpu(least, 2));
        // Beside three busy processes: high throughout.
        let (earlier, least) = shift_in([1.6, 1.45], 1.5);
        assert_eq!(earlier, [1.5, 1.6]);
        assert_eq!(least, 1.45);
        assert!(caller_short_of_a_cpu(least, 2));
        // A low sample counts for three samples, then leaves.
        let (earlier, least) = shift_in([1.5, 0.2], 1.5);
        assert_eq!(least, 0.2);
        let (_, least) = shift_in(earlier, 1.5);
        assert_eq!(least, 1.5);
    }

    #[test]
    fn half_a_cpu_is_noise() {
        assert!(!crowded(0.5, 4, 2));
        assert!(crowded(0.6, 2, 2));
    }

    #[test]
    fn a_stat_without_the_masks_cpus_reads_as_unknown() {
        assert_eq!(busy_jiffies_of(BEFORE, &[7]), None);
        assert_eq!(busy_jiffies_of("garbage\n", &[0]), None);
    }

    #[test]
    fn a_cpu_line_without_an_idle_field_reads_as_unknown() {
        assert_eq!(busy_jiffies_of("cpu0 10 20 30\n", &[0]), None);
        // user 10, nice 20, system 30, idle 40: 60 busy, whatever follows
        // past the first seven fields.
        assert_eq!(busy_jiffies_of("cpu0 10 20 30 40\n", &[0]), Some(60));
        assert_eq!(busy_jiffies_of("cpu0 1 1 1 5 5 1 1 9 9 9\n", &[0]), Some(5));
    }
}

//! Which CPUs the live pools of this process hold, so a second pool is not
//! planned onto the first one's pinned workers.
//!
//! Two pools planned from the same topology used to get the same CPUs:
//! on 2 CPUs, two decode threads each with its own pool pinned both
//! workers to CPU 1 and left CPU 0 to the two callers. The record is a
//! count per CPU: a pool built with pinned threads holds their CPUs until
//! it is dropped ([`CpuHold`]); [`plan_cpu_pool`](crate::plan_cpu_pool)
//! plans around them.
//!
//! Fork-safe without a lock: each count carries the process id that wrote
//! it, and a count written by another process (the parent, before `fork`:
//! its pools' threads do not exist in the child) reads as 0 and is never
//! released by this one.

use std::sync::atomic::{AtomicU64, Ordering};

/// CPUs the record covers (the affinity mask's size on Linux).
const SLOTS: usize = 1024;

/// Per CPU: the writer's process id in the high 32 bits, the count of
/// holds in the low 32.
static HELD: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

fn this_process() -> u64 {
    u64::from(std::process::id())
}

/// The count in `word` if this process wrote it, else 0.
fn count_of(word: u64) -> u64 {
    if word >> 32 == this_process() {
        word & 0xffff_ffff
    } else {
        0
    }
}

/// CPUs held now by this process's live pools (their pinned workers and
/// the CPUs their plans kept for their callers), ascending.
pub fn held_cpus() -> Vec<usize> {
    HELD.iter()
        .enumerate()
        // Relaxed: a snapshot for planning; a pool built meanwhile is
        // planned against the next one.
        .filter(|(_, slot)| count_of(slot.load(Ordering::Relaxed)) > 0)
        .map(|(cpu, _)| cpu)
        .collect()
}

/// A pool's hold on its CPUs, released on drop.
#[derive(Debug)]
pub struct CpuHold {
    cpus: Vec<usize>,
    pid: u64,
}

impl CpuHold {
    /// The CPUs held.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }
}

/// Records `cpus` (duplicates count once) as held until the returned guard
/// drops. CPUs past the record's 1024 are not recorded.
pub fn hold_cpus(cpus: &[usize]) -> CpuHold {
    let mut cpus: Vec<usize> = cpus.iter().copied().filter(|&cpu| cpu < SLOTS).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let pid = this_process();
    for &cpu in &cpus {
        // Relaxed: a count, read only to plan; no data rides on it.
        let _ = HELD[cpu].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            Some(pid << 32 | (count_of(word) + 1))
        });
    }
    CpuHold { cpus, pid }
}

impl Drop for CpuHold {
    fn drop(&mut self) {
        if self.pid != this_process() {
            // Taken by the parent before a fork: not this process's count.
            return;
        }
        for &cpu in &self.cpus {
            let _ = HELD[cpu].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                Some(self.pid << 32 | count_of(word).saturating_sub(1))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_seen_until_it_drops_and_holds_count() {
        // CPUs far above any machine's, so other tests' pools do not meet them.
        let first = hold_cpus(&[1000, 1001, 1001]);
        assert_eq!(first.cpus(), [1000, 1001]);
        let second = hold_cpus(&[1001]);
        assert!(held_cpus().ends_with(&[1000, 1001]));
        drop(first);
        assert!(held_cpus().ends_with(&[1001]) && !held_cpus().contains(&1000));
        drop(second);
        assert!(!held_cpus().contains(&1001));
    }

    #[test]
    fn a_count_written_by_another_process_reads_as_free() {
        HELD[1010].store(u64::from(u32::MAX) << 32 | 3, Ordering::Relaxed);
        assert!(!held_cpus().contains(&1010));
        let hold = hold_cpus(&[1010]);
        assert_eq!(count_of(HELD[1010].load(Ordering::Relaxed)), 1);
        drop(hold);
        assert!(!held_cpus().contains(&1010));
    }
}

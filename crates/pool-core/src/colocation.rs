//! A caller and a worker on one CPU while another CPU stands idle.
//!
//! The scheduler can put an unpinned worker on its caller's CPU (a wake-up
//! placed near the waker, a busy neighbour that briefly took the other
//! CPU). A pure spinner then starves its partner for a time slice, goes
//! cold, and the load balancer moves it. This pool's threads instead hand
//! the CPU back and forth (the caller yields while it waits, an idle
//! worker yields every few thousand spins), so both stay *cache-hot*, and
//! the balancer leaves cache-hot threads where they are: the pair can share
//! one CPU for tens of milliseconds, every job paying a yield round trip.
//! Measured on 2 CPUs after an OpenMP region in the same process: a 4096-
//! row job 390 µs co-located against 110 µs apart.
//!
//! The fix costs nothing on the hot path: an idle worker notes its CPU
//! (and, once, its thread id) when it yields; a caller whose barrier wait
//! had to yield compares its own CPU with its invited workers' and, when
//! one matches, moves *the worker* off it: the worker's affinity without
//! this CPU for one call (the kernel migrates it at once: it is queued
//! behind the caller, not running), then its affinity as it was. Only
//! when the worker cannot move (pinned to that CPU) does the caller step
//! off instead, and not while another caller of this process is busy (the
//! CPU it would land on is that caller's); a caller pinned to one CPU
//! cannot, and does not try.
//!
//! Moving the worker, not the caller, matters once a process has more
//! than one pool. Two pools used in turn by one thread on 2 CPUs: a
//! caller that stepped off its CPU landed on the other pool's worker's, so
//! the next job of that pool found the pair together again, and the
//! caller stepped back: every job co-located, the decode at the serial
//! loop's speed (measured: 24-28 tokens/s against 50-60 apart, 44 moves
//! in 49 dispatches). Moving the worker converges instead: the caller
//! keeps its CPU, the workers share the other, and an idle worker there
//! yields to a working one.

use crate::sync::process::{AtomicUsize, Ordering};

/// No CPU noted yet (or not knowable here).
pub(crate) const NO_CPU: usize = usize::MAX;

/// A worker's CPU as last noted by the worker itself (a hint), and its
/// thread id, for moving it.
pub(crate) struct NotedCpu {
    cpu: AtomicUsize,
    /// The worker's kernel thread id (0: not noted yet).
    tid: AtomicUsize,
}

impl Default for NotedCpu {
    fn default() -> Self {
        NotedCpu {
            cpu: AtomicUsize::new(NO_CPU),
            tid: AtomicUsize::new(0),
        }
    }
}

impl NotedCpu {
    /// Notes the calling thread's CPU (Relaxed: a hint; the caller acts on
    /// a stale value at worst once), and its thread id the first time.
    #[inline]
    pub(crate) fn note(&self) {
        if let Some(cpu) = current_cpu() {
            self.cpu.store(cpu, Ordering::Relaxed);
        }
        if self.tid.load(Ordering::Relaxed) == 0 {
            self.tid.store(current_tid(), Ordering::Relaxed);
        }
    }

    /// The CPU last noted.
    #[inline]
    pub(crate) fn get(&self) -> usize {
        self.cpu.load(Ordering::Relaxed)
    }

    /// Moves the worker off `cpu` (its noted CPU, shared with the calling
    /// caller). Returns whether it moved; the note is cleared either way,
    /// so a stale one does not trigger again before the worker notes anew.
    #[cold]
    pub(crate) fn move_off(&self, cpu: usize) -> bool {
        let _ = self
            .cpu
            .compare_exchange(cpu, NO_CPU, Ordering::Relaxed, Ordering::Relaxed);
        match self.tid.load(Ordering::Relaxed) {
            0 => false,
            tid => move_thread_off(tid, cpu),
        }
    }
}

/// The calling thread's kernel thread id (Linux, Android), else 0.
fn current_tid() -> usize {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom)))]
    {
        // SAFETY: gettid takes no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        usize::try_from(tid).unwrap_or(0)
    }
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom))))]
    {
        0
    }
}

/// The CPU the calling thread runs on now (Linux, Android), else `None`.
#[inline]
pub(crate) fn current_cpu() -> Option<usize> {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom)))]
    {
        // SAFETY: `sched_getcpu` takes no arguments and has no
        // preconditions; it returns -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom))))]
    {
        None
    }
}

/// Moves the calling thread off `cpu` when its affinity allows another
/// CPU, and leaves its affinity as it was. Returns whether it moved.
#[cold]
pub(crate) fn step_off(cpu: usize) -> bool {
    move_thread_off(0, cpu)
}

/// Moves thread `tid` (0: the calling thread) off `cpu` when its affinity
/// allows another CPU, and leaves its affinity as it was. Returns whether
/// it moved.
#[cold]
fn move_thread_off(tid: usize, cpu: usize) -> bool {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom)))]
    {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: an all-zero `cpu_set_t` is a valid empty set.
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let Ok(tid) = libc::pid_t::try_from(tid) else {
            return false;
        };
        // SAFETY: `mask` is a valid out-buffer of `size` bytes; `tid` is 0
        // (the calling thread) or a worker's thread id (an exited worker's
        // id only makes the call fail).
        if unsafe { libc::sched_getaffinity(tid, size, &mut mask) } != 0 {
            return false;
        }
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        // SAFETY: `mask` is initialised and `cpu` is below CPU_SETSIZE.
        let (allowed, count) = unsafe { (libc::CPU_ISSET(cpu, &mask), libc::CPU_COUNT(&mask)) };
        if !allowed || count < 2 {
            return false;
        }
        let mut elsewhere = mask;
        // SAFETY: as above.
        unsafe { libc::CPU_CLR(cpu, &mut elsewhere) };
        // SAFETY: valid masks of `size` bytes for thread `tid`; the first
        // call migrates it off `cpu` (at once, running or queued), the
        // second restores its mask (the kernel then leaves it where it is).
        unsafe {
            let moved = libc::sched_setaffinity(tid, size, &elsewhere) == 0;
            libc::sched_setaffinity(tid, size, &mask);
            moved
        }
    }
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri), not(loom))))]
    {
        let _ = (tid, cpu);
        false
    }
}

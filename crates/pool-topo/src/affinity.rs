//! The process's CPU set, a thread's own affinity mask, and pinning.
//!
//! `sched_getaffinity(0)` answers for the calling thread only. Engines pin
//! their decode thread, and pools pin their workers, so a decision about
//! the *process* (how many CPUs, is a pool oversubscribed, how many threads
//! may spin) must not be read off whichever thread happens to ask. The
//! process's set is therefore ([`process_affinity_cpus`]):
//!
//! 1. the mask the process started with, captured by a load-time
//!    constructor (`.init_array`) before `main` or any engine code could
//!    pin a thread; `taskset -c 0-3 engine` is honoured this way;
//! 2. united with the masks of every thread alive now (`/proc/self/task`),
//!    so a process that widened its threads later, or whose start mask could
//!    not be captured, is not under-counted.
//!
//! A thread's own mask is [`thread_affinity_cpus`].

use std::io;

use crate::cgroup::quota_cpus;

/// The logical CPUs this process may run on, ascending: the mask it started
/// with united with every live thread's mask (see the module docs), never
/// shrunk by a pinned thread. Falls back to the calling thread's mask, then
/// to `0..available_parallelism()` (logged), where those reads fail.
pub fn process_affinity_cpus() -> Vec<usize> {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
    {
        let mut cpus = thread_affinity_cpus();
        cpus.extend(start_mask::cpus());
        cpus.extend(linux::all_thread_cpus());
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
    #[cfg(windows)]
    {
        match windows::process_mask() {
            Ok(mask) => windows::cpus_of(mask),
            Err(err) => fallback_cpus(&format!("GetProcessAffinityMask failed: {err}")),
        }
    }
    #[cfg(not(any(
        all(any(target_os = "linux", target_os = "android"), not(miri)),
        windows
    )))]
    thread_affinity_cpus()
}

/// The calling thread's own affinity mask (`sched_getaffinity(0)`; on
/// Windows `SetThreadAffinityMask`'s answer, the mask left as it was),
/// ascending. Falls back to `0..available_parallelism()` (logged) where the
/// call is unavailable or fails.
pub fn thread_affinity_cpus() -> Vec<usize> {
    match read_thread_affinity(0) {
        Ok(cpus) if !cpus.is_empty() => cpus,
        Ok(_) => fallback_cpus("sched_getaffinity returned an empty mask"),
        Err(err) => fallback_cpus(&format!("sched_getaffinity failed: {err}")),
    }
}

fn fallback_cpus(reason: &str) -> Vec<usize> {
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    tracing::debug!(
        reason,
        count,
        "pool-topo: using CPUs 0..available_parallelism() as the affinity mask"
    );
    (0..count).collect()
}

/// Bits in the fixed-size `cpu_set_t` the calls below use (1024 on glibc).
#[cfg(any(target_os = "linux", target_os = "android"))]
const MASK_BITS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

/// The affinity mask of thread `tid` (0: the calling thread).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_thread_affinity(tid: libc::pid_t) -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size we pass.
    let rc =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the set is initialised.
    let count = usize::try_from(unsafe { libc::CPU_COUNT(&set) }).unwrap_or(0);
    // Stops at the last CPU set rather than testing all 1024 bits (Miri
    // took a third of a second per read for them).
    // SAFETY: CPU_ISSET reads the initialised set for ids below its size.
    Ok((0..MASK_BITS)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .take(count)
        .collect())
}

#[cfg(windows)]
fn read_thread_affinity(_tid: i32) -> io::Result<Vec<usize>> {
    windows::thread_mask().map(windows::cpus_of)
}

#[cfg(not(any(target_os = "linux", target_os = "android", windows)))]
fn read_thread_affinity(_tid: i32) -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no affinity mask on this system",
    ))
}

/// Windows affinity, within the process's processor group (the first 64
/// logical CPUs a process starts in; more groups are not used).
#[cfg(windows)]
mod windows {
    use std::ffi::c_void;
    use std::io;

    type Handle = *mut c_void;

    #[link(name = "kernel32")]
    extern "system" {
        fn GetCurrentThread() -> Handle;
        fn GetCurrentProcess() -> Handle;
        fn SetThreadAffinityMask(thread: Handle, mask: usize) -> usize;
        fn GetProcessAffinityMask(
            process: Handle,
            process_mask: *mut usize,
            system_mask: *mut usize,
        ) -> i32;
    }

    /// The process's affinity mask.
    pub(super) fn process_mask() -> io::Result<usize> {
        let (mut process, mut system) = (0usize, 0usize);
        // SAFETY: the pseudo-handle of this process is always valid; both
        // out-pointers are live locals.
        let ok = unsafe { GetProcessAffinityMask(GetCurrentProcess(), &mut process, &mut system) };
        if ok == 0 || process == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(process)
    }

    /// The calling thread's mask. Windows has no call that only reads it:
    /// set it to itself by way of the process's mask (each call returns
    /// the mask before it), which leaves it as it was.
    pub(super) fn thread_mask() -> io::Result<usize> {
        let process = process_mask()?;
        // SAFETY: the pseudo-handle of the calling thread is always valid.
        let previous = unsafe { SetThreadAffinityMask(GetCurrentThread(), process) };
        if previous == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above; `previous` was this thread's own mask.
        if unsafe { SetThreadAffinityMask(GetCurrentThread(), previous) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(previous)
    }

    /// Sets the calling thread's mask; CPUs are bit positions (< 64).
    pub(super) fn set_thread_mask(cpus: &[usize]) -> io::Result<()> {
        let bits = usize::BITS as usize;
        if let Some(&cpu) = cpus.iter().find(|&&cpu| cpu >= bits) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pin_current_thread: CPU {cpu} is outside the process's processor group \
                     (CPUs 0..{bits} on Windows)"
                ),
            ));
        }
        let mask = cpus.iter().fold(0usize, |mask, &cpu| mask | 1 << cpu);
        // SAFETY: the pseudo-handle of the calling thread is always valid.
        if unsafe { SetThreadAffinityMask(GetCurrentThread(), mask) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The CPUs of a mask, ascending.
    pub(super) fn cpus_of(mask: usize) -> Vec<usize> {
        (0..usize::BITS as usize)
            .filter(|&cpu| mask & (1 << cpu) != 0)
            .collect()
    }
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
mod linux {
    /// The union of every live thread's mask. Threads that exit between the
    /// directory read and the call are skipped.
    pub(super) fn all_thread_cpus() -> Vec<usize> {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return Vec::new();
        };
        let mut cpus = Vec::new();
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Ok(mask) = super::read_thread_affinity(tid) {
                cpus.extend(mask);
            }
        }
        cpus
    }
}

/// The affinity mask at load time, before `main` could pin anything.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
mod start_mask {
    use std::sync::atomic::{AtomicU64, Ordering};

    const WORDS: usize = super::MASK_BITS / 64;

    /// The mask as bits; all zero when the constructor did not run.
    static MASK: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

    /// Runs once when the binary (or the shared object holding this crate)
    /// is loaded: the ELF loader calls every `.init_array` entry before
    /// `main`, or at `dlopen`. Only one thread exists then in an executable.
    extern "C" fn capture() {
        if let Ok(cpus) = super::read_thread_affinity(0) {
            for cpu in cpus {
                // Relaxed: the loader runs constructors before any thread
                // that could read them exists (or, for dlopen, before
                // `dlopen` returns, which synchronises with its caller).
                MASK[cpu / 64].fetch_or(1 << (cpu % 64), Ordering::Relaxed);
            }
        }
    }

    #[used]
    #[link_section = ".init_array"]
    static CONSTRUCTOR: extern "C" fn() = capture;

    /// The captured CPUs (empty if the constructor did not run).
    pub(super) fn cpus() -> Vec<usize> {
        // Naming the constructor keeps it in the same object as this reader,
        // so the linker cannot drop it while the reader is linked.
        std::hint::black_box(&CONSTRUCTOR);
        (0..super::MASK_BITS)
            .filter(|&cpu| MASK[cpu / 64].load(Ordering::Relaxed) & (1 << (cpu % 64)) != 0)
            .collect()
    }
}

/// CPUs this process can use at once: [`process_affinity_cpus`], bounded by
/// the cgroup CPU quota (v1 or v2, rounded up). Never 0, and never shrunk by
/// a pinned calling thread.
pub fn usable_cpus() -> usize {
    let allowed = process_affinity_cpus().len();
    quota_cpus()
        .map_or(allowed, |quota| allowed.min(quota))
        .max(1)
}

/// Pins the calling thread to `cpus` (`sched_setaffinity`). An empty list
/// or a CPU id past the mask's size is `InvalidInput`; the OS error is
/// returned as is (e.g. `EINVAL` for CPUs outside the cgroup's cpuset).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    set_affinity(0, cpus, "pin_current_thread")
}

/// Pins thread `tid` to `cpus`: a kernel thread id (`gettid`), or a process
/// id, which names that process's main thread only (so a single-threaded
/// neighbour process moves whole). Errors as [`pin_current_thread`]'s, and
/// `ESRCH` when no such thread exists.
///
/// ```no_run
/// // Confine a busy child process to CPU 1.
/// let child = std::process::Command::new("sh")
///     .args(["-c", "while :; do :; done"])
///     .spawn()?;
/// pool_topo::pin_thread(child.id(), &[1])?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn pin_thread(tid: u32, cpus: &[usize]) -> io::Result<()> {
    let tid = libc::pid_t::try_from(tid).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pin_thread: thread id {tid} does not fit a pid_t"),
        )
    })?;
    if tid == 0 {
        // 0 would name the calling thread: a caller's mistake, not a wish.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pin_thread: thread id 0 (use pin_current_thread)",
        ));
    }
    set_affinity(tid, cpus, "pin_thread")
}

/// `sched_setaffinity(tid, cpus)`, `tid` 0 being the calling thread.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_affinity(tid: libc::pid_t, cpus: &[usize], what: &str) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: empty CPU list"),
        ));
    }
    if let Some(&cpu) = cpus.iter().find(|&&cpu| cpu >= MASK_BITS) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: CPU {cpu} is past the affinity mask's {MASK_BITS} bits"),
        ));
    }
    // SAFETY: cpu_set_t is plain old data; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu < MASK_BITS`, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; `tid` is a
    // thread id or 0 (this thread): a wrong one is an error, not UB.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread to `cpus` (`SetThreadAffinityMask`, inside the
/// process's processor group: CPUs 0..64). An empty list or a CPU past the
/// group is `InvalidInput`; the OS error is returned as is.
#[cfg(windows)]
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pin_current_thread: empty CPU list",
        ));
    }
    windows::set_thread_mask(cpus)
}

/// Pinning is not supported on this system (macOS only takes affinity
/// hints): an `Unsupported` error saying so.
#[cfg(not(any(target_os = "linux", target_os = "android", windows)))]
pub fn pin_current_thread(_cpus: &[usize]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "thread pinning is implemented on Linux, Android and Windows",
    ))
}

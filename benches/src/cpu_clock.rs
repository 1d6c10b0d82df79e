//! Per-thread CPU time, exact to the nanosecond even for a thread running
//! on another CPU at the moment of the reading.
//!
//! The process-wide figures (`getrusage`, `CLOCK_PROCESS_CPUTIME_ID`) sum
//! each thread's runtime as the scheduler last accounted it: a thread
//! running on another CPU is accounted at its last tick or switch, so the
//! sum lags by up to a scheduler tick (4 ms at `HZ=250`) per running
//! thread. Taken just after a decode, such a reading puts the worker's
//! last few milliseconds of rows into the window after the last token:
//! that was the 4.2 ms `pool bench` once printed against a 2 ms linger.
//! A thread's own CPU-time clock brings its runtime up to date first.

/// CPU time the threads `tids` of this process have run, in ms, from
/// each thread's CPU-time clock. A thread that has exited reads 0.
pub fn threads_cpu_ms(tids: &[i32]) -> f64 {
    tids.iter().map(|&tid| thread_cpu_ms(tid)).sum()
}

/// One thread's CPU time in ms (0 for a thread that has exited).
pub fn thread_cpu_ms(tid: i32) -> f64 {
    // Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED).
    let clock = ((!tid) << 3) | 6;
    // SAFETY: timespec is plain old data; all-zero is valid.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `now` is a valid out-pointer; an invalid clock id (a thread
    // that exited) is reported as an error, read as 0.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return 0.0;
    }
    now.tv_sec as f64 * 1e3 + now.tv_nsec as f64 / 1e6
}

/// The kernel tids of this process's threads other than the calling one
/// (empty where `/proc/self/task` cannot be read).
pub fn other_threads() -> Vec<i32> {
    // SAFETY: gettid takes no arguments and cannot fail.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid != me)
        .collect()
}

//! How much CPU other processes used while something was measured: a
//! figure taken while they ran is not a result, and the tools that measure
//! say so next to it.

use std::time::Instant;

/// Busy and own CPU time at the start of a measurement.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    start: Instant,
    busy_s: f64,
    own_s: f64,
    /// Whether child processes this one waited for count as its own.
    children: bool,
}

/// What other processes used over a measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForeignCpu {
    /// CPUs other processes kept busy on average (CPU seconds per second).
    pub cpus: f64,
    /// That as a share of the CPUs this process may use.
    pub share: f64,
}

/// Above this share of the usable CPUs, a measurement is contaminated.
pub const CONTAMINATION_SHARE: f64 = 0.05;

impl ForeignCpu {
    /// Whether other processes used more than [`CONTAMINATION_SHARE`] of
    /// the usable CPUs: the figures measured meanwhile are not results.
    pub fn contaminated(&self) -> bool {
        self.share > CONTAMINATION_SHARE
    }
}

impl CpuMeter {
    /// Starts measuring (`None` where `/proc/stat` or this process's CPU
    /// time cannot be read: other systems, a hidden /proc).
    pub fn start() -> Option<CpuMeter> {
        Some(CpuMeter {
            start: Instant::now(),
            busy_s: machine_busy_seconds()?,
            own_s: own_cpu_seconds(false)?,
            children: false,
        })
    }

    /// [`CpuMeter::start`] for a measurement made by child processes
    /// (a benchmark running programs side by side): the CPU time of the
    /// children it has waited for counts as its own, so what is left is
    /// other processes' and the hypervisor's (`steal`). A child still
    /// running when [`CpuMeter::foreign`] reads counts as foreign.
    pub fn start_counting_children() -> Option<CpuMeter> {
        Some(CpuMeter {
            start: Instant::now(),
            busy_s: machine_busy_seconds()?,
            own_s: own_cpu_seconds(true)?,
            children: true,
        })
    }

    /// Other processes' CPU use since [`CpuMeter::start`]: the machine's
    /// busy time (`/proc/stat`: user, nice, system, irq, softirq, steal)
    /// less this process's own (`/proc/self/stat`), per second of wall
    /// time. `None` if the counters cannot be read again.
    pub fn foreign(&self) -> Option<ForeignCpu> {
        let wall = self.start.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return None;
        }
        let busy = machine_busy_seconds()? - self.busy_s;
        let own = own_cpu_seconds(self.children)? - self.own_s;
        let cpus = ((busy - own) / wall).max(0.0);
        Some(ForeignCpu {
            cpus,
            share: cpus / crate::usable_cpus() as f64,
        })
    }
}

/// Clock ticks per second of `/proc`'s counters.
fn ticks_per_second() -> f64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if ticks > 0 {
            return ticks as f64;
        }
    }
    100.0
}

/// Seconds every CPU of the machine spent busy since boot.
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_busy_ticks(&stat).map(|ticks| ticks as f64 / ticks_per_second())
}

/// Busy ticks from the `cpu` line of `/proc/stat`: user, nice, system,
/// irq, softirq and steal (not idle or iowait).
pub fn parse_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

/// This process's user and system CPU seconds (`/proc/self/stat`), with
/// those of the children it waited for if `children`.
fn own_cpu_seconds(children: bool) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the `(comm)`, which may hold spaces: utime is field 14,
    // stime 15, counted from 1 with pid first.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // cutime and cstime, fields 16 and 17.
    let waited_for: u64 = if children {
        fields.get(13)?.parse::<u64>().ok()? + fields.get(14)?.parse::<u64>().ok()?
    } else {
        0
    };
    Some((utime + stime + waited_for) as f64 / ticks_per_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ticks_leave_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 9000 40 3 2 1 0 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\n";
        assert_eq!(parse_busy_ticks(stat), Some(100 + 5 + 50 + 3 + 2 + 1));
        assert_eq!(parse_busy_ticks("intr 1 2 3\n"), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn our_own_work_is_never_counted_as_foreign_load_however_busy_the_machine() {
        // Spin on every usable CPU for 0.2 s. Whatever else runs (an idle
        // machine, or busy processes taking half of every CPU), the
        // machine's busy time is ours plus theirs, so foreign + own can
        // never exceed the machine's CPUs; had our own time not been
        // subtracted, foreign alone would be the machine's whole busy
        // time, and foreign + own about twice ours.
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let machine_cpus = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
            .count() as f64;
        let meter = CpuMeter::start().expect("/proc is readable here");
        let own_before = own_cpu_seconds(false).unwrap();
        let started = Instant::now();
        let until = started + std::time::Duration::from_millis(200);
        std::thread::scope(|s| {
            for _ in 0..crate::usable_cpus() {
                s.spawn(|| {
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                });
            }
        });
        let foreign = meter.foreign().unwrap();
        let own = (own_cpu_seconds(false).unwrap() - own_before) / started.elapsed().as_secs_f64();
        assert!(own > 0.1, "we spun, yet own time reads {own:.2} CPUs");
        assert!(
            foreign.cpus + own <= machine_cpus + 0.3,
            "foreign {:.2} + own {own:.2} CPUs on a {machine_cpus}-CPU machine: our own time \
             counted as foreign",
            foreign.cpus
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_waited_for_childs_work_is_not_foreign_when_children_count() {
        let children = || own_cpu_seconds(true).unwrap() - own_cpu_seconds(false).unwrap();
        let plain = CpuMeter::start().expect("/proc is readable here");
        let counting = CpuMeter::start_counting_children().unwrap();
        let (before, started) = (children(), Instant::now());
        // A shell counting for a few tenths of a second, waited for.
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"])
            .status()
            .expect("sh runs");
        assert!(status.success());
        let child = (children() - before) / started.elapsed().as_secs_f64();
        let (p, c) = (plain.foreign().unwrap(), counting.foreign().unwrap());
        assert!(child > 0.1, "the child kept a CPU busy: {child:.2}");
        assert!(
            p.cpus >= child - 0.1,
            "without counting children, the child is foreign: {:.2} CPUs, child {child:.2}",
            p.cpus
        );
        assert!(
            c.cpus <= p.cpus - child + 0.1,
            "counting children, the child is ours: {:.2} CPUs foreign against {:.2} - {child:.2}",
            c.cpus,
            p.cpus
        );
    }
}

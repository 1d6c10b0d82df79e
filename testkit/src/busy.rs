//! Busy processes beside a test: the machine a CI runner or a laptop is.

use std::process::{Child, Command, Stdio};

/// A shell loop that spins on the CPU while the process that started it
/// lives: every 100,000 iterations (0.1-0.4 s) it checks its parent with
/// `kill -0` (a shell builtin: no process started) and exits once the
/// parent is gone. `Drop` kills the loops, but a test process killed by a
/// signal or a watchdog runs no destructor, and its loops would spin on,
/// orphaned, under every later test and benchmark (seen: two of them for
/// 40 minutes under a CI run after its first attempt was killed). The
/// parent is read when the loop starts: a loop whose starter has already
/// exited by then sees the reaper as its parent and spins on.
pub const BUSY_LOOP_WHILE_PARENT_LIVES: &str = "parent=$PPID; i=0; while :; do \
     i=$((i + 1)); if [ \"$i\" -ge 100000 ]; then kill -0 \"$parent\" 2>/dev/null || exit 0; i=0; fi; \
     done";

/// `count` processes spinning on the CPU (`sh -c` with
/// [`BUSY_LOOP_WHILE_PARENT_LIVES`];
/// on Windows `cmd /C "for /L %i in (0,0,1) do rem"`), killed and reaped
/// on drop. Processes, not threads: the pool's
/// foreign-load sampling must see load it does not own.
pub struct BusyProcesses {
    children: Vec<Child>,
}

impl BusyProcesses {
    /// Starts them; `Err` names why (no `sh` on this system).
    pub fn start(count: usize) -> Result<BusyProcesses, String> {
        let mut busy = BusyProcesses {
            children: Vec::with_capacity(count),
        };
        for _ in 0..count {
            let mut command = if cfg!(windows) {
                let mut cmd = Command::new("cmd");
                cmd.args(["/C", "for /L %i in (0,0,1) do rem"]);
                cmd
            } else {
                let mut sh = Command::new("sh");
                sh.args(["-c", BUSY_LOOP_WHILE_PARENT_LIVES]);
                sh
            };
            let child = command
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting a busy loop ({command:?}): {e}"))?;
            busy.children.push(child);
        }
        Ok(busy)
    }

    /// Their process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for BusyProcesses {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::BUSY_LOOP_WHILE_PARENT_LIVES;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// Whether `pid` is still running (not gone, not a zombie).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                // The state follows the command in parentheses.
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z') && !state.starts_with('X')
            })
            .unwrap_or(false)
    }

    #[test]
    #[cfg_attr(not(target_os = "linux"), ignore = "reads /proc")]
    fn a_busy_loop_whose_parent_is_gone_stops_spinning() {
        // A shell that starts the loop and exits a second later: the loop
        // is orphaned, as when a test process is killed. (Not at once: a
        // loop whose shell has not read its parent's pid before the parent
        // exits sees the reaper as its parent.)
        let out = Command::new("sh")
            .args(["-c", "sh -c \"$LOOP\" >/dev/null 2>&1 & echo $!; sleep 1"])
            .env("LOOP", BUSY_LOOP_WHILE_PARENT_LIVES)
            .output()
            .expect("sh");
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the loop's pid");
        let start = Instant::now();
        while running(pid) {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = Command::new("kill").arg(pid.to_string()).status();
                panic!("the orphaned busy loop {pid} still spins after 20 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn a_busy_loop_spins_while_its_parent_lives() {
        let busy = super::BusyProcesses::start(1).expect("a busy loop");
        std::thread::sleep(Duration::from_millis(1500));
        let pid = busy.pids()[0];
        if cfg!(target_os = "linux") {
            assert!(
                running(pid),
                "the loop {pid} stopped while its parent lives"
            );
        }
    }
}

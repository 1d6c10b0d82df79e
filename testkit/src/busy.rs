//! Busy processes beside a test: the machine a CI runner or a laptop is.

use std::process::{Child, Command, Stdio};

/// `count` processes spinning on the CPU (`sh -c 'while :; do :; done'`;
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
                sh.args(["-c", "while :; do :; done"]);
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

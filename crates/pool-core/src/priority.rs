//! Worker priority: QoS classes on macOS, nice values and scheduling
//! policies on Linux and Android. Applied by each worker to itself at start,
//! after pinning; a refusal is an error of `PoolBuilder::build`.
//!
//! On macOS a new thread inherits the QoS of the thread that spawned it: a
//! pool first touched from a demoted thread would put every worker on the
//! efficiency cores. So workers set their class explicitly, by default
//! [`QosClass::UserInteractive`], and placement never depends on who built
//! the pool.

use std::io;

/// A macOS quality-of-service class (`pthread_set_qos_class_self_np`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    /// Work the user is waiting on right now (decode): performance cores.
    UserInteractive,
    /// Work the user started and waits for.
    UserInitiated,
    /// The system default.
    Default,
    /// Long-running work the user knows of.
    Utility,
    /// Work the user does not see: efficiency cores.
    Background,
}

impl QosClass {
    /// The class's name, as `current_qos_name` prints it.
    pub fn name(self) -> &'static str {
        match self {
            QosClass::UserInteractive => "user-interactive",
            QosClass::UserInitiated => "user-initiated",
            QosClass::Default => "default",
            QosClass::Utility => "utility",
            QosClass::Background => "background",
        }
    }
}

/// A Linux/Android scheduling policy for workers (`sched_setscheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedPolicy {
    /// `SCHED_OTHER`, the normal time-sharing policy.
    Other,
    /// `SCHED_BATCH`: CPU-bound, fewer wake-up preemptions.
    Batch,
    /// `SCHED_IDLE`: only when nothing else wants the CPU.
    Idle,
    /// `SCHED_FIFO` at this real-time priority (needs privilege).
    Fifo(i32),
    /// `SCHED_RR` at this real-time priority (needs privilege).
    RoundRobin(i32),
}

/// What a builder asks of its workers' priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WorkerPriority {
    pub(crate) qos: Option<QosClass>,
    pub(crate) nice: Option<i32>,
    pub(crate) policy: Option<SchedPolicy>,
}

impl WorkerPriority {
    /// The default: on macOS the user-interactive class, elsewhere nothing.
    pub(crate) fn platform_default() -> Self {
        WorkerPriority {
            qos: cfg!(target_vendor = "apple").then_some(QosClass::UserInteractive),
            nice: None,
            policy: None,
        }
    }

    /// Applies the request to the calling (worker) thread.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn apply(&self) -> io::Result<()> {
        if let Some(class) = self.qos {
            imp::set_qos(class)?;
        }
        if let Some(policy) = self.policy {
            imp::set_policy(policy)?;
        }
        if let Some(nice) = self.nice {
            imp::set_nice(nice)?;
        }
        Ok(())
    }
}

/// The calling thread's QoS class on macOS (for diagnostics, `pool topo`);
/// elsewhere `"n/a"`.
pub fn current_qos_name() -> &'static str {
    imp::current_qos_name()
}

/// Whether the calling thread runs below normal priority (a positive nice
/// value, or `SCHED_IDLE`; Linux and Android only, elsewhere `false`).
/// Beside a normal-priority process such a thread gets a small share of a
/// CPU (nice 10: about a tenth), so the adaptive policy does not wake a
/// parked worker for a long job then (`contention.rs`).
#[inline]
pub(crate) fn below_normal_priority() -> bool {
    if cfg!(any(miri, loom)) {
        return false;
    }
    imp::below_normal_priority()
}

#[cfg_attr(
    not(any(target_vendor = "apple", target_os = "linux", target_os = "android")),
    allow(dead_code)
)]
fn os_result(rc: i32, what: &str) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        let err = io::Error::last_os_error();
        Err(io::Error::new(err.kind(), format!("{what}: {err}")))
    }
}

#[cfg(target_vendor = "apple")]
mod imp {
    use super::{os_result, QosClass, SchedPolicy};
    use std::io;

    fn raw(class: QosClass) -> libc::qos_class_t {
        use libc::qos_class_t::*;
        match class {
            QosClass::UserInteractive => QOS_CLASS_USER_INTERACTIVE,
            QosClass::UserInitiated => QOS_CLASS_USER_INITIATED,
            QosClass::Default => QOS_CLASS_DEFAULT,
            QosClass::Utility => QOS_CLASS_UTILITY,
            QosClass::Background => QOS_CLASS_BACKGROUND,
        }
    }

    pub(super) fn set_qos(class: QosClass) -> io::Result<()> {
        // SAFETY: sets the calling thread's class; no pointers.
        let rc = unsafe { libc::pthread_set_qos_class_self_np(raw(class), 0) };
        os_result(rc, "pthread_set_qos_class_self_np")
    }

    pub(super) fn set_policy(_policy: SchedPolicy) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "scheduling policies are Linux/Android only; use a QoS class on macOS",
        ))
    }

    pub(super) fn set_nice(_nice: i32) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "per-thread nice values are Linux/Android only; use a QoS class on macOS",
        ))
    }

    pub(super) fn below_normal_priority() -> bool {
        false
    }

    pub(super) fn current_qos_name() -> &'static str {
        let mut class = libc::qos_class_t::QOS_CLASS_UNSPECIFIED;
        let mut priority = 0;
        // SAFETY: valid out-pointers; `pthread_self` is always valid.
        let rc = unsafe {
            libc::pthread_get_qos_class_np(libc::pthread_self(), &mut class, &mut priority)
        };
        if rc != 0 {
            return "unknown";
        }
        use libc::qos_class_t::*;
        match class {
            QOS_CLASS_USER_INTERACTIVE => "user-interactive",
            QOS_CLASS_USER_INITIATED => "user-initiated",
            QOS_CLASS_DEFAULT => "default",
            QOS_CLASS_UTILITY => "utility",
            QOS_CLASS_BACKGROUND => "background",
            _ => "unspecified",
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use super::{os_result, QosClass, SchedPolicy};
    use std::io;

    /// QoS classes do not exist here: the request is ignored (documented on
    /// `PoolBuilder::qos`).
    pub(super) fn set_qos(_class: QosClass) -> io::Result<()> {
        Ok(())
    }

    pub(super) fn set_policy(policy: SchedPolicy) -> io::Result<()> {
        let (raw, priority) = match policy {
            // SCHED_OTHER is SCHED_NORMAL (0): Android's libc names only
            // the latter.
            SchedPolicy::Other => (libc::SCHED_NORMAL, 0),
            SchedPolicy::Batch => (libc::SCHED_BATCH, 0),
            SchedPolicy::Idle => (libc::SCHED_IDLE, 0),
            SchedPolicy::Fifo(p) => (libc::SCHED_FIFO, p),
            SchedPolicy::RoundRobin(p) => (libc::SCHED_RR, p),
        };
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // SAFETY: pid 0 is the calling thread; `param` is a valid pointer.
        let rc = unsafe { libc::sched_setscheduler(0, raw, &param) };
        os_result(rc, &format!("sched_setscheduler({policy:?})"))
    }

    /// The calling thread's id, which `PRIO_PROCESS` takes for a thread.
    fn this_thread() -> libc::id_t {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
    }

    pub(super) fn set_nice(nice: i32) -> io::Result<()> {
        // SAFETY: PRIO_PROCESS with a thread id sets that thread's nice
        // value on Linux; no pointers.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS as _, this_thread(), nice) };
        os_result(rc, &format!("setpriority(nice {nice})"))
    }

    pub(super) fn current_qos_name() -> &'static str {
        "n/a (no QoS classes on Linux)"
    }

    pub(super) fn below_normal_priority() -> bool {
        // SAFETY: no arguments; pid 0 is the calling thread.
        if unsafe { libc::sched_getscheduler(0) } == libc::SCHED_IDLE {
            return true;
        }
        // SAFETY: PRIO_PROCESS with a thread id reads that thread's nice
        // value on Linux; no pointers. An error reads as -1: not below.
        unsafe { libc::getpriority(libc::PRIO_PROCESS as _, this_thread()) > 0 }
    }
}

#[cfg(not(any(target_vendor = "apple", target_os = "linux", target_os = "android")))]
mod imp {
    use super::{QosClass, SchedPolicy};
    use std::io;

    pub(super) fn set_qos(_class: QosClass) -> io::Result<()> {
        Ok(())
    }

    pub(super) fn set_policy(_policy: SchedPolicy) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "scheduling policies are Linux/Android only",
        ))
    }

    pub(super) fn set_nice(_nice: i32) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "per-thread nice values are Linux/Android only",
        ))
    }

    pub(super) fn current_qos_name() -> &'static str {
        "n/a (no QoS classes on this system)"
    }

    pub(super) fn below_normal_priority() -> bool {
        false
    }
}

//! Bad environment values, never silent.
//!
//! A variable that does not parse is ignored for a documented fallback, and
//! the program is told: a `tracing` warning every time it is read (a
//! subscriber, or a `log` logger through tracing's bridge, shows it), and,
//! when the process installed neither, one line on stderr the first time.
//! Every variable's first warning is also kept for [`env_warnings`] (and the
//! C ABI's `pool_env_warnings`), so a program can show them its own way.
//!
//! The record is a push-only list of leaked nodes behind one atomic
//! pointer: no lock a `fork()` could leave held, no allocation after the
//! first warning of a variable.

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The first warning about one environment variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvWarning {
    /// The variable, e.g. `FERROX_CPU_THREADS`.
    pub variable: &'static str,
    /// Its value, exactly as found.
    pub value: String,
    /// What was wrong and what is used instead.
    pub message: String,
}

impl fmt::Display for EnvWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

struct Node {
    warning: EnvWarning,
    next: *const Node,
}

/// The newest first; nodes are leaked, so a pointer read once stays valid.
static HEAD: AtomicPtr<Node> = AtomicPtr::new(ptr::null_mut());

/// Every variable this process has warned about, first warning each, in
/// the order they were first seen.
///
/// ```
/// // A program with no logger can still show what it ignored:
/// for warning in pool_topo::env_warnings() {
///     eprintln!("config: {warning}");
/// }
/// ```
pub fn env_warnings() -> Vec<EnvWarning> {
    let mut out = Vec::new();
    // Acquire: pairs with the Release CAS in `record`, so each node's
    // contents are visible before its pointer is.
    let mut node = HEAD.load(Ordering::Acquire).cast_const();
    while !node.is_null() {
        // SAFETY: nodes are leaked boxes, never freed or changed after
        // publication (see `record`).
        let current = unsafe { &*node };
        out.push(current.warning.clone());
        node = current.next;
    }
    out.reverse();
    out
}

/// Reports a bad value of `variable`: a `tracing` warning every call, and
/// the first time for this variable, a record for [`env_warnings`] and, if
/// no tracing subscriber or `log` logger is installed, one line on stderr.
///
/// For the crates of this workspace, each reading its own variables; the
/// `message` says what was wrong and what is used instead.
pub fn warn_env(variable: &'static str, value: &str, message: impl fmt::Display) {
    let message = message.to_string();
    tracing::warn!(variable, value, "{message}");
    let first = record(EnvWarning {
        variable,
        value: value.to_owned(),
        message: message.clone(),
    });
    if first && !logging_installed() {
        eprintln!("warning: {message}");
    }
}

/// Pushes `warning` unless its variable is already listed; true if pushed.
fn record(warning: EnvWarning) -> bool {
    let node = Box::into_raw(Box::new(Node {
        warning,
        next: ptr::null(),
    }));
    // Acquire: pairs with the Release CAS below, for the scan.
    let mut head = HEAD.load(Ordering::Acquire);
    loop {
        // SAFETY: `node` is ours until published.
        let variable = unsafe { (*node).warning.variable };
        if listed(head, variable) {
            // SAFETY: never published; we still own it.
            drop(unsafe { Box::from_raw(node) });
            return false;
        }
        // SAFETY: `node` is ours until published.
        unsafe { (*node).next = head };
        // Release: publishes the node's contents with its pointer (pairs
        // with the Acquire loads here and in `env_warnings`). A failed CAS
        // means another variable or the same one was pushed first: rescan.
        match HEAD.compare_exchange_weak(head, node, Ordering::Release, Ordering::Acquire) {
            Ok(_) => return true,
            Err(newer) => head = newer,
        }
    }
}

fn listed(mut node: *const Node, variable: &str) -> bool {
    while !node.is_null() {
        // SAFETY: published nodes are leaked and never changed.
        let current = unsafe { &*node };
        if current.warning.variable == variable {
            return true;
        }
        node = current.next;
    }
    false
}

/// Whether a warning reaches anyone without our help: a tracing
/// subscriber (global or this thread's) or a `log` logger taking warnings.
fn logging_installed() -> bool {
    let subscriber = tracing::dispatcher::get_default(|dispatch| {
        !dispatch.is::<tracing::subscriber::NoSubscriber>()
    });
    subscriber || log::max_level() >= log::LevelFilter::Warn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variable_is_recorded_once_with_its_first_value() {
        warn_env("POOL_TOPO_TEST_A", "x", "first");
        warn_env("POOL_TOPO_TEST_A", "y", "second");
        warn_env("POOL_TOPO_TEST_B", "z", "other");
        let ours: Vec<_> = env_warnings()
            .into_iter()
            .filter(|w| w.variable.starts_with("POOL_TOPO_TEST_"))
            .collect();
        assert_eq!(ours.len(), 2);
        assert_eq!(
            (ours[0].value.as_str(), ours[0].message.as_str()),
            ("x", "first")
        );
        assert_eq!(ours[1].variable, "POOL_TOPO_TEST_B");
    }

    #[test]
    fn racing_first_warnings_of_one_variable_record_it_once() {
        std::thread::scope(|s| {
            for i in 0..8 {
                s.spawn(move || warn_env("POOL_TOPO_TEST_RACE", &i.to_string(), "race"));
            }
        });
        let count = env_warnings()
            .iter()
            .filter(|w| w.variable == "POOL_TOPO_TEST_RACE")
            .count();
        assert_eq!(count, 1);
    }
}

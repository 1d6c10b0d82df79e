//! Test support for the pool crates (package `pool-testkit`, library name
//! `testkit`; not published, a path-only dev-dependency).
//!
//! - [`watchdog`]: every test that waits on threads runs its body under one,
//!   so a hang becomes a failure naming the stage it stopped at;
//! - [`capture_warnings`]: collects `tracing` output of a closure, for tests
//!   that pin down what is logged;
//! - [`BusyProcesses`]: CPU-bound processes beside a test, as on a CI
//!   runner or a laptop (a CPU-quota cgroup is `pool_topo::CpuQuotaGroup`);
//! - [`gguf`]: a GGUF writer, for model files of any type and shape
//!   (broken ones included).

mod busy;
pub mod gguf;

pub use busy::{BusyProcesses, BUSY_LOOP_WHILE_PARENT_LIVES};

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a watched test body has got to; shown if the watchdog fires.
#[derive(Clone, Default)]
pub struct Stage(Arc<Mutex<String>>);

impl Stage {
    /// Records the current stage (cheap enough for per-iteration use in
    /// moderation: it takes a lock).
    pub fn set(&self, stage: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = stage.into();
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Default limit: generous for a loaded 2-core CI machine and debug builds;
/// under Miri, which interprets every test of a binary in one process, far
/// more.
pub const DEFAULT_LIMIT: Duration = if cfg!(miri) {
    Duration::from_secs(1800)
} else {
    Duration::from_secs(120)
};

/// Runs `body` on its own thread; if it has not finished within `limit`,
/// fails the test with `name` and the last [`Stage`] it recorded. A panic
/// in `body` is re-raised as is.
pub fn watchdog<T: Send + 'static>(
    name: &str,
    limit: Duration,
    body: impl FnOnce(&Stage) -> T + Send + 'static,
) -> T {
    let stage = Stage::default();
    let (done_tx, done_rx) = mpsc::channel();
    let body_stage = stage.clone();
    let handle = std::thread::Builder::new()
        .name(format!("watched-{name}"))
        .spawn(move || {
            let result = body(&body_stage);
            let _ = done_tx.send(());
            result
        })
        .expect("spawn the watched test body");
    match done_rx.recv_timeout(limit) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(value) => value,
            Err(payload) => std::panic::resume_unwind(payload),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "watchdog: test `{name}` did not finish within {limit:?}; last stage: {}",
            stage.get()
        ),
    }
}

/// Like [`watchdog`] with [`DEFAULT_LIMIT`].
pub fn watched<T: Send + 'static>(
    name: &str,
    body: impl FnOnce(&Stage) -> T + Send + 'static,
) -> T {
    watchdog(name, DEFAULT_LIMIT, body)
}

/// The text of a panic payload (`&str` or `String`), for tests that check
/// which panic reached them.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "<non-string payload>".to_owned()
    }
}

/// Runs `f` with a `tracing` subscriber (WARN and above) that records the
/// formatted events; returns `f`'s value and the captured text.
pub fn capture_warnings<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink(Arc::default());
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let value = tracing::subscriber::with_default(subscriber, f);
    let text =
        String::from_utf8_lossy(&sink.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    (value, text)
}

//! Engines that log with `log`, not `tracing`, still see the crates'
//! warnings: with no tracing subscriber installed (this test binary has
//! none), `tracing`'s `log` feature turns each event into a `log` record.

use std::sync::Mutex;

struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{} {}", record.level(), record.args()));
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

#[test]
fn a_warning_reaches_a_log_logger_when_no_tracing_subscriber_is_set() {
    log::set_logger(&CAPTURE).expect("the only logger of this binary");
    log::set_max_level(log::LevelFilter::Trace);
    let width = pool_topo::resolve_cpu_threads_with(
        None,
        |name| (name == pool_topo::FERROX_THREADS_ENV).then(|| "lots".to_string()),
        || 3,
    );
    assert_eq!(width.threads, 3, "a value that does not parse is skipped");
    let lines = CAPTURE.0.lock().unwrap();
    assert!(
        lines.iter().any(|l| l.starts_with("WARN")
            && l.contains("FERROX_CPU_THREADS")
            && l.contains("lots")),
        "{lines:?}"
    );
}

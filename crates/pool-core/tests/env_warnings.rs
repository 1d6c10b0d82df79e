//! A bad environment value is never silent: with no tracing subscriber or
//! `log` logger, one stderr line per variable; with one, it goes there; and
//! the program can always read it back.
//!
//! Each case runs in a child process of this test binary, so the
//! environment and the process-wide record start clean.

#![cfg(not(miri))] // child processes

use std::process::Command;

use pool_core::Pool;
use testkit::watched;

/// Runs the ignored test `child` of this binary with `env`; its stderr.
fn run_child(child: &str, env: &[(&str, &str)]) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success() && stdout.contains("CHILD-OK"),
        "child {child}:\n{stdout}\n{stderr}"
    );
    stderr
}

fn warning_lines(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.starts_with("warning:") && l.contains("FERROX_CPU_THREADS"))
        .count()
}

#[test]
fn with_no_logger_a_bad_value_is_one_stderr_line_however_often_it_is_read() {
    watched("no logger", |_| {
        let stderr = run_child("child_reads_a_bad_width_three_times", &[]);
        assert_eq!(warning_lines(&stderr), 1, "{stderr}");
        assert!(stderr.contains("\"eight\""), "names the value: {stderr}");
    });
}

#[test]
fn with_a_subscriber_the_warning_goes_to_it_and_not_to_stderr() {
    watched("subscriber", |_| {
        let stderr = run_child("child_reads_a_bad_width_under_a_subscriber", &[]);
        assert_eq!(warning_lines(&stderr), 0, "{stderr}");
    });
}

#[test]
#[ignore = "run by with_no_logger_a_bad_value_is_one_stderr_line_however_often_it_is_read"]
fn child_reads_a_bad_width_three_times() {
    std::env::set_var("FERROX_CPU_THREADS", "eight");
    for _ in 0..3 {
        let pool = Pool::for_this_machine();
        assert!(pool.participants() >= 1);
    }
    let warnings = pool_core::env_warnings();
    let width: Vec<_> = warnings
        .iter()
        .filter(|w| w.variable == "FERROX_CPU_THREADS")
        .collect();
    assert_eq!(width.len(), 1, "{warnings:?}");
    assert_eq!(width[0].value, "eight");
    println!("CHILD-OK");
}

#[test]
#[ignore = "run by with_a_subscriber_the_warning_goes_to_it_and_not_to_stderr"]
fn child_reads_a_bad_width_under_a_subscriber() {
    std::env::set_var("FERROX_CPU_THREADS", "eight");
    let ((), seen) = testkit::capture_warnings(|| drop(Pool::for_this_machine()));
    assert!(seen.contains("FERROX_CPU_THREADS"), "{seen}");
    // Still recorded for the program to read.
    assert!(pool_core::env_warnings()
        .iter()
        .any(|w| w.variable == "FERROX_CPU_THREADS"));
    println!("CHILD-OK");
}

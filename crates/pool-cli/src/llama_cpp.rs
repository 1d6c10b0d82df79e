//! `pool bench --llama-cpp`: `pool decode` against llama.cpp's
//! `llama-bench` on the same GGUF files and thread counts, each a separate
//! process, interleaved round by round (so a slow minute of the host hits
//! both), medians compared. The tools and files come from
//! `scripts/llama-cpp.sh models` (`target/llama.cpp/`); without them the
//! bench says how to make them and goes on.
//!
//! The f32 llama2.c checkpoints are measured the same way against
//! llama2.c's forward pass built as its own program (`llama2c-run`, made
//! by the same script from `benches/c/llama2_omp.c` with `-Ofast
//! -march=native -fopenmp`, as llama2.c's Makefile builds `run`).
//!
//! Rates: `pool decode` reports tokens per second after the first token;
//! `llama-bench -p 0 -n N` reports N tokens over their time after its own
//! warm-up run. Both decode from an empty context, greedily.
//!
//! Each comparison measures the CPU time neither program used (other
//! processes, and the hypervisor's `steal`), counting the children it
//! waited for as its own; above 5 % of the CPUs its line says the figures
//! are not results (a host that took 17 % of the CPUs' time made every
//! 2-thread decode, both programs', slower than its 1-thread one).

use std::path::{Path, PathBuf};
use std::process::Command;

use pool_benches::Stats;
use serde::Serialize;

use crate::measure::{Contamination, Summary};

/// The files compared, in `target/llama.cpp/models/`.
const GGUF: [&str; 5] = [
    "stories15M-Q8_0",
    "stories15M-Q4_0",
    "stories110M-Q8_0",
    "stories110M-Q4_0",
    "stories110M-Q4_K_M",
];

/// The llama2.c checkpoints, against the C program.
const CHECKPOINTS: [&str; 2] = ["stories15M", "stories110M"];

/// One file at one thread count.
#[derive(Serialize)]
pub(crate) struct Comparison {
    model: String,
    threads: usize,
    steps: usize,
    pool_tokens_per_s: Summary,
    peer: &'static str,
    peer_tokens_per_s: Summary,
    pool_vs_peer: f64,
    /// `pool decode`'s share of its bandwidth bound (median over rounds).
    pool_share_of_bound: f64,
    /// The peer's tokens/s over the same bound (the pool's median rate
    /// over its median share): how close the peer comes to the memory's
    /// limit, and so the most any program can lead it by.
    peer_share_of_bound: f64,
    /// Shares above 100 %: a bound measured low or a disturbed run, not
    /// a result (empty when none).
    measurement_problems: Vec<String>,
    /// CPU time neither program used during the rounds (null where /proc
    /// cannot be read); `contaminated`: the figures are not results.
    contamination: Option<Contamination>,
}

/// The JSON object of `pool bench --llama-cpp --json`.
#[derive(Serialize)]
pub(crate) struct Report {
    llama_cpp: String,
    rounds: usize,
    comparisons: Vec<Comparison>,
    /// Why a part was skipped (tools or files missing).
    skipped: Vec<String>,
}

/// Where the tools and models are: `$POOL_LLAMA_CPP_DIR`, else
/// `target/llama.cpp` beside this binary's `target/<profile>/`.
fn llama_cpp_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("POOL_LLAMA_CPP_DIR") {
        return PathBuf::from(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("llama.cpp")))
        .unwrap_or_else(|| PathBuf::from("target/llama.cpp"))
}

/// A JSON number at `key` of `value` (or of its first element).
fn number(value: &serde_json::Value, key: &str) -> Option<f64> {
    value
        .get(key)
        .or_else(|| value.get(0)?.get(key))
        .and_then(serde_json::Value::as_f64)
}

/// Runs `command`, returning its stdout as JSON.
fn json_of(command: &mut Command) -> Result<serde_json::Value, String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("{command:?}: not JSON: {e}"))
}

/// `pool decode` of `model` in a process of its own: (tokens/s, share of
/// the bound).
fn pool_round(model: &Path, threads: usize, steps: usize) -> Result<(f64, f64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let report = json_of(Command::new(exe).args([
        "decode".as_ref(),
        model.as_os_str(),
        "--steps".as_ref(),
        steps.to_string().as_ref(),
        "--threads".as_ref(),
        threads.to_string().as_ref(),
        "--json".as_ref(),
    ]))?;
    Ok((
        number(&report, "tokens_per_s").ok_or("no tokens_per_s")?,
        number(&report, "share_of_bound").unwrap_or(0.0),
    ))
}

/// One `llama-bench` round.
fn llama_round(tool: &Path, model: &Path, threads: usize, steps: usize) -> Result<f64, String> {
    let report = json_of(Command::new(tool).args([
        "-m".as_ref(),
        model.as_os_str(),
        "-p".as_ref(),
        "0".as_ref(),
        "-n".as_ref(),
        steps.to_string().as_ref(),
        "-t".as_ref(),
        threads.to_string().as_ref(),
        "-r".as_ref(),
        "1".as_ref(),
        "-o".as_ref(),
        "json".as_ref(),
    ]))?;
    number(&report, "avg_ts").ok_or_else(|| "llama-bench gave no avg_ts".to_owned())
}

/// One `llama2c-run` round (it prints `{"tokens_per_s": ...}`).
fn run_round(tool: &Path, model: &Path, threads: usize, steps: usize) -> Result<f64, String> {
    let report = json_of(Command::new(tool).arg(model).args([
        "-n",
        &steps.to_string(),
        "-t",
        &threads.to_string(),
    ]))?;
    number(&report, "tokens_per_s").ok_or_else(|| "llama2c-run gave no tokens_per_s".to_owned())
}

/// Interleaved rounds of pool and a peer on one file.
fn compare(
    model: &Path,
    threads: usize,
    steps: usize,
    rounds: usize,
    peer: &'static str,
    peer_round: &dyn Fn() -> Result<f64, String>,
) -> Result<Comparison, String> {
    let (mut pool, mut other, mut shares) = (Vec::new(), Vec::new(), Vec::new());
    let meter = pool_topo::CpuMeter::start_counting_children();
    for _ in 0..rounds {
        let (rate, share) = pool_round(model, threads, steps)?;
        pool.push(rate);
        shares.push(share);
        other.push(peer_round()?);
    }
    let (pool, other, share) = (Stats::of(pool), Stats::of(other), Stats::of(shares));
    let contamination = meter.and_then(|m| m.foreign()).map(|f| Contamination {
        foreign_cpus: f.cpus,
        share_of_cpus: f.share,
        contaminated: f.contaminated(),
    });
    let (peer_share_of_bound, measurement_problems) =
        shares_of_the_bound(pool.median, share.median, other.median, peer);
    Ok(Comparison {
        contamination,
        peer_share_of_bound,
        measurement_problems,
        model: model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        threads,
        steps,
        pool_vs_peer: pool.median / other.median,
        pool_share_of_bound: share.median,
        pool_tokens_per_s: pool.into(),
        peer,
        peer_tokens_per_s: other.into(),
    })
}

/// The peer's share of the pool's bound (the pool's tokens/s over its
/// share of it), and each share above 100 % as a measurement problem.
fn shares_of_the_bound(
    pool_rate: f64,
    pool_share: f64,
    peer_rate: f64,
    peer: &str,
) -> (f64, Vec<String>) {
    let bound = pool_rate / pool_share;
    let peer_share = if bound.is_finite() && bound > 0.0 {
        peer_rate / bound
    } else {
        0.0
    };
    let problems = [
        crate::measure::impossible_share("pool decode", pool_share),
        crate::measure::impossible_share(peer, peer_share),
    ]
    .into_iter()
    .flatten()
    .collect();
    (peer_share, problems)
}

pub(crate) fn run(quick: bool, json: bool) -> Result<(), String> {
    let dir = llama_cpp_dir();
    let (models, bin) = (dir.join("models"), dir.join("bin"));
    // Nine rounds: on a shared host each program's tokens/s moves by
    // +-20 % within a minute, and with five rounds stories110M f32 read
    // 0.91-1.17x llama2.c's binary over five runs of the same code.
    let (rounds, steps) = if quick { (3, 32) } else { (9, 64) };
    let mut report = Report {
        llama_cpp: dir.display().to_string(),
        rounds,
        comparisons: Vec::new(),
        skipped: Vec::new(),
    };
    let bench = bin.join("llama-bench");
    let runner = bin.join("llama2c-run");
    let threads = [1, 2];
    if !json {
        println!(
            "pool decode vs llama.cpp's llama-bench (and llama2.c's forward pass in C), \
             separate processes, {rounds} interleaved rounds, {steps} tokens, medians"
        );
    }
    let mut work: Vec<(PathBuf, &'static str)> = Vec::new();
    if bench.is_file() {
        work.extend(
            GGUF.iter()
                .map(|m| (models.join(format!("{m}.gguf")), "llama.cpp")),
        );
    } else {
        report.skipped.push(format!(
            "llama.cpp is not built ({} missing): run scripts/llama-cpp.sh models",
            bench.display()
        ));
    }
    if runner.is_file() {
        work.extend(
            CHECKPOINTS
                .iter()
                .map(|m| (models.join(format!("{m}.bin")), "llama2.c")),
        );
    } else {
        report.skipped.push(format!(
            "llama2c-run is not built ({} missing): run scripts/llama-cpp.sh models",
            runner.display()
        ));
    }
    for (model, peer) in work {
        if !model.is_file() {
            report.skipped.push(format!(
                "{} is missing: run scripts/llama-cpp.sh models",
                model.display()
            ));
            continue;
        }
        for &t in &threads {
            let peer_round = || match peer {
                "llama.cpp" => llama_round(&bench, &model, t, steps),
                _ => run_round(&runner, &model, t, steps),
            };
            match compare(&model, t, steps, rounds, peer, &peer_round) {
                Ok(c) => {
                    if !json {
                        let disturbed = match c.contamination {
                            Some(d) if d.contaminated => format!(
                                "  NOT A RESULT: {:.2} CPUs went to other processes or the \
                                 hypervisor",
                                d.foreign_cpus
                            ),
                            _ => String::new(),
                        };
                        let shares = if c.measurement_problems.is_empty() {
                            format!(
                                "(bound reached: pool {:.0} %, {peer} {:.0} %)",
                                100.0 * c.pool_share_of_bound,
                                100.0 * c.peer_share_of_bound
                            )
                        } else {
                            format!(
                                "(bound: pool {:.0} %, {peer} {:.0} %: ABOVE THE BOUND, a \
                                 measurement problem)",
                                100.0 * c.pool_share_of_bound,
                                100.0 * c.peer_share_of_bound
                            )
                        };
                        println!(
                            "  {:<28} {t} thread{} pool {:>8.1} tokens/s  {peer} {:>8.1}  pool/{peer} {:.2}x  {shares}{disturbed}",
                            c.model,
                            if t == 1 { " " } else { "s" },
                            c.pool_tokens_per_s.median,
                            c.peer_tokens_per_s.median,
                            c.pool_vs_peer,
                        );
                    }
                    report.comparisons.push(c);
                }
                Err(err) => report
                    .skipped
                    .push(format!("{} at {t} threads: {err}", model.display())),
            }
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        for reason in &report.skipped {
            println!("  skipped: {reason}");
        }
        let disturbed = report
            .comparisons
            .iter()
            .filter(|c| c.contamination.is_some_and(|d| d.contaminated))
            .count();
        if disturbed > 0 {
            eprintln!(
                "pool bench --llama-cpp: warning: {disturbed} of {} comparisons ran while other \
                 processes or the hypervisor took over 5 % of the CPUs: those figures are not \
                 results; measure again on a quiet machine",
                report.comparisons.len()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shares_of_the_bound;

    #[test]
    fn a_peer_above_the_pools_bound_is_a_measurement_problem_not_a_result() {
        // The pool at 100 tokens/s is half its bound (200): a peer at 150
        // is at 75 %, one at 250 above what the memory allows.
        let (share, problems) = shares_of_the_bound(100.0, 0.5, 150.0, "llama.cpp");
        assert!((share - 0.75).abs() < 1e-9 && problems.is_empty());
        let (share, problems) = shares_of_the_bound(100.0, 0.5, 250.0, "llama.cpp");
        assert!((share - 1.25).abs() < 1e-9);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("llama.cpp reached 125 %"),
            "{problems:?}"
        );
        let (_, problems) = shares_of_the_bound(100.0, 1.17, 90.0, "llama.cpp");
        assert!(
            problems[0].starts_with("pool decode reached 117 %"),
            "{problems:?}"
        );
    }

    #[test]
    fn no_bound_gives_no_peer_share() {
        assert_eq!(shares_of_the_bound(100.0, 0.0, 90.0, "llama.cpp").0, 0.0);
    }
}

//! `pool bench --peers`: the EPCC-style suite (pool-benches `peers`) at
//! 2, 3 and 4 threads, one child process per thread count (candle's pool is
//! sized once per process), with the suite's goals checked (lowest
//! overhead of every peer, within 1.25x of a minimal spin pool).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use pool_benches::peers::{self, Construct, PeerKind, SuiteConfig, Work};

/// Thread counts the suite measures.
const THREADS: [usize; 3] = [2, 3, 4];

/// One cell: a peer on a construct at a thread count.
#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct Cell {
    threads: usize,
    oversubscribed: bool,
    construct: String,
    peer: String,
    /// Time per repetition (per barrier for the barrier construct), ns.
    time_ns_median: f64,
    /// Overhead over the serial reference, ns: median, min, max of rounds.
    overhead_ns_median: f64,
    overhead_ns_min: f64,
    overhead_ns_max: f64,
}

/// A peer that sat out a thread count.
#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct SatOut {
    threads: usize,
    peer: String,
    reason: String,
}

/// One child's output.
#[derive(Serialize, Deserialize)]
struct ChildReport {
    cells: Vec<Cell>,
    sat_out: Vec<SatOut>,
}

/// A goal and whether this run met it.
#[derive(Serialize)]
pub(crate) struct Verdict {
    goal: String,
    met: bool,
    detail: String,
}

/// `pool bench --peers --json`.
#[derive(Serialize)]
pub(crate) struct PeersReport {
    usable_cpus: usize,
    simd_tier: &'static str,
    rounds: usize,
    cells: Vec<Cell>,
    sat_out: Vec<SatOut>,
    verdicts: Vec<Verdict>,
}

/// The child: one thread count, JSON on stdout.
pub(crate) fn run_child(threads: usize, quick: bool) -> Result<(), String> {
    if threads < 2 {
        return Err("--peers-at needs 2 or more threads".into());
    }
    let config = if quick {
        SuiteConfig::QUICK
    } else {
        SuiteConfig::FULL
    };
    let work = Work::new();
    let (rows, skipped) = peers::run_at(threads, config, &work);
    let report = ChildReport {
        cells: rows
            .iter()
            .map(|r| Cell {
                threads: r.threads,
                oversubscribed: r.oversubscribed,
                construct: r.construct.name().into(),
                peer: r.peer.name().into(),
                time_ns_median: r.time_ns.median,
                overhead_ns_median: r.overhead_ns.median,
                overhead_ns_min: r.overhead_ns.min,
                overhead_ns_max: r.overhead_ns.max,
            })
            .collect(),
        sat_out: skipped
            .into_iter()
            .map(|s| SatOut {
                threads,
                peer: s.peer.name().into(),
                reason: s.reason,
            })
            .collect(),
    };
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// The parent: a child per thread count, then the table, goals and plot.
pub(crate) fn run(quick: bool, json: bool, svg: Option<&Path>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let mut cells = Vec::new();
    let mut sat_out = Vec::new();
    for threads in THREADS {
        if !json {
            eprintln!("measuring {threads} threads ...");
        }
        let mut command = Command::new(&exe);
        command
            .args(["bench", "--peers-at", &threads.to_string()])
            .env("CANDLE_NUM_THREADS", threads.to_string());
        if quick {
            command.arg("--quick");
        }
        let output = command
            .output()
            .map_err(|e| format!("start the {threads}-thread child: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "the {threads}-thread child failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let report: ChildReport = serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("the {threads}-thread child's report: {e}"))?;
        cells.extend(report.cells);
        sat_out.extend(report.sat_out);
    }
    let verdicts = verdicts(&cells);
    if let Some(path) = svg {
        draw(path, &cells).map_err(|e| format!("--svg {}: {e}", path.display()))?;
    }
    let report = PeersReport {
        usable_cpus: pool_topo::usable_cpus(),
        simd_tier: pool_matvec::simd_tier().name(),
        rounds: if quick {
            SuiteConfig::QUICK.rounds
        } else {
            SuiteConfig::FULL.rounds
        },
        cells,
        sat_out,
        verdicts,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print_table(&report);
    }
    Ok(())
}

fn find(cells: &[Cell], threads: usize, construct: Construct, peer: PeerKind) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.threads == threads && c.construct == construct.name() && c.peer == peer.name())
}

/// Peers proper: not this pool, not the floors.
fn is_peer(kind: PeerKind) -> bool {
    !matches!(
        kind,
        PeerKind::Pool | PeerKind::PoolAlt | PeerKind::SpinPool | PeerKind::PingPong
    )
}

/// The pool's overhead on `construct`: its better variant for the decode
/// token (a fork-join per matvec, or the token as one job).
fn pool_overhead(
    cells: &[Cell],
    threads: usize,
    construct: Construct,
) -> Option<(f64, &'static str)> {
    let main = find(cells, threads, construct, PeerKind::Pool).map(|c| c.overhead_ns_median);
    let alt = (construct == Construct::Decode)
        .then(|| find(cells, threads, construct, PeerKind::PoolAlt))
        .flatten()
        .map(|c| c.overhead_ns_median);
    match (main, alt) {
        (Some(m), Some(a)) if a < m => Some((a, "token as one job")),
        (Some(m), _) => Some((m, "")),
        _ => None,
    }
}

fn verdicts(cells: &[Cell]) -> Vec<Verdict> {
    let mut out = Vec::new();
    let cpus = pool_topo::usable_cpus();
    for threads in THREADS {
        let oversubscribed = threads > cpus;
        let limit = if oversubscribed { 1.5 } else { 1.0 };
        let mut misses = Vec::new();
        let mut checked = 0;
        for construct in Construct::ALL {
            let Some((pool, _)) = pool_overhead(cells, threads, construct) else {
                continue;
            };
            let best = PeerKind::ALL
                .into_iter()
                .filter(|&k| is_peer(k))
                .filter_map(|k| {
                    find(cells, threads, construct, k).map(|c| (k, c.overhead_ns_median))
                })
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((best_kind, best)) = best else {
                continue;
            };
            checked += 1;
            // A peer at or below zero overhead: the pool must be too (within 50 ns).
            let ok = if best <= 0.0 {
                pool <= best + 50.0
            } else {
                pool <= best * limit
            };
            if !ok {
                misses.push(format!(
                    "{}: pool {:.0} ns vs {} {:.0} ns",
                    construct.name(),
                    pool,
                    best_kind.name(),
                    best
                ));
            }
        }
        out.push(Verdict {
            goal: if oversubscribed {
                format!("{threads} threads (oversubscribed): pool within 1.5x of the best peer on every construct")
            } else {
                format!("{threads} threads: pool has the lowest overhead of every peer on every construct")
            },
            met: misses.is_empty() && checked > 0,
            detail: if misses.is_empty() {
                format!("{checked} constructs checked")
            } else {
                misses.join("; ")
            },
        });
        if !oversubscribed {
            let mut misses = Vec::new();
            for construct in Construct::ALL {
                let (Some((pool, _)), Some(spin)) = (
                    pool_overhead(cells, threads, construct),
                    find(cells, threads, construct, PeerKind::SpinPool),
                ) else {
                    continue;
                };
                let spin = spin.overhead_ns_median;
                if pool > spin.max(1.0) * 1.25 && pool - spin > 50.0 {
                    misses.push(format!(
                        "{}: pool {:.0} ns vs spin pool {:.0} ns",
                        construct.name(),
                        pool,
                        spin
                    ));
                }
            }
            out.push(Verdict {
                goal: format!("{threads} threads: pool within 1.25x of the minimal spin pool"),
                met: misses.is_empty(),
                detail: misses.join("; "),
            });
        }
    }
    out
}

fn print_table(report: &PeersReport) {
    let threads: Vec<usize> = THREADS.to_vec();
    let cpus = report.usable_cpus;
    println!(
        "peers suite: overhead over the serial reference (ns, median of {} rounds; spread = (max-min)/median); {} usable CPUs",
        report.rounds, cpus
    );
    let mut by_construct: BTreeMap<usize, Vec<&Cell>> = BTreeMap::new();
    for cell in &report.cells {
        let i = Construct::ALL
            .iter()
            .position(|c| c.name() == cell.construct)
            .unwrap_or(usize::MAX);
        by_construct.entry(i).or_default().push(cell);
    }
    for (i, construct) in Construct::ALL.iter().enumerate() {
        let Some(cells) = by_construct.get(&i) else {
            continue;
        };
        println!();
        print!("{:<46}", construct.name());
        for t in &threads {
            let mark = if *t > cpus { "*" } else { "" };
            print!("{:>22}", format!("{t} threads{mark}"));
        }
        println!();
        for kind in PeerKind::ALL {
            let row: Vec<Option<&&Cell>> = threads
                .iter()
                .map(|&t| {
                    cells
                        .iter()
                        .find(|c| c.threads == t && c.peer == kind.name())
                })
                .collect();
            if row.iter().all(Option::is_none) {
                continue;
            }
            print!("  {:<44}", kind.name());
            for (cell, &t) in row.iter().zip(&threads) {
                match cell {
                    None => print!("{:>22}", "-"),
                    Some(c) => {
                        let pool = pool_overhead(&report.cells, t, *construct).map(|p| p.0);
                        let ratio = match pool {
                            Some(p) if p > 0.0 && kind != PeerKind::Pool => {
                                format!(" {:.1}x", c.overhead_ns_median / p)
                            }
                            _ => String::new(),
                        };
                        let spread = if c.overhead_ns_median.abs() > 1.0 {
                            (c.overhead_ns_max - c.overhead_ns_min) / c.overhead_ns_median.abs()
                        } else {
                            0.0
                        };
                        print!(
                            "{:>22}",
                            format!("{:.0} ±{:.0}%{ratio}", c.overhead_ns_median, spread * 50.0)
                        );
                    }
                }
            }
            println!();
        }
    }
    println!("\n* oversubscribed: more threads than usable CPUs. Nx: overhead over the pool's.");
    for s in &report.sat_out {
        println!("sat out at {} threads: {}: {}", s.threads, s.peer, s.reason);
    }
    println!();
    for v in &report.verdicts {
        println!(
            "{} {}{}",
            if v.met { "met:   " } else { "missed:" },
            v.goal,
            if v.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.detail)
            }
        );
    }
}

/// Overhead against threads, one panel per construct, one line per peer
/// (log scale; values at or below 1 ns drawn at 1 ns).
fn draw(path: &Path, cells: &[Cell]) -> Result<(), String> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1500, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 3));
    for (panel, construct) in panels.iter().zip(Construct::ALL) {
        let mine: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.construct == construct.name())
            .collect();
        let top = mine
            .iter()
            .map(|c| c.overhead_ns_median)
            .fold(10.0, f64::max)
            * 2.0;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{} (overhead, ns)", construct.name()),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(2usize..4usize, (1.0..top).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .x_labels(3)
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, kind) in PeerKind::ALL.into_iter().enumerate() {
            let series: Vec<(usize, f64)> = THREADS
                .iter()
                .filter_map(|&t| {
                    mine.iter()
                        .find(|c| c.threads == t && c.peer == kind.name())
                        .map(|c| (t, c.overhead_ns_median.max(1.0)))
                })
                .collect();
            if series.is_empty() {
                continue;
            }
            let color = Palette99::pick(i).to_rgba();
            let width = if kind == PeerKind::Pool { 4 } else { 2 };
            chart
                .draw_series(LineSeries::new(series, color.stroke_width(width)))
                .map_err(|e| e.to_string())?
                .label(kind.name())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 10))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

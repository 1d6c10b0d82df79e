//! `pool tune`: participants x spin budgets over the decode workload.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use pool_core::{Pool, SpinPolicy};
use pool_matvec::decode::{DecodeConfig, DecodeExecutor, DecodeModel, Serial, WeightFormat};
use serde::Serialize;

pub(crate) struct Options {
    /// The model shape (`None`: the default or, with `quick`, a small one).
    pub(crate) shape: Option<DecodeConfig>,
    pub(crate) format: WeightFormat,
    pub(crate) spins: Vec<usize>,
    pub(crate) max_threads: Option<usize>,
    pub(crate) tokens: usize,
    pub(crate) quick: bool,
    pub(crate) svg: Option<PathBuf>,
    pub(crate) json: bool,
}

/// One point of the sweep.
#[derive(Serialize, Clone, Copy)]
struct Point {
    participants: usize,
    spin: usize,
    tokens_per_s: f64,
}

/// The JSON object of `pool tune --json` (docs/cli.md).
/// A pool with the adaptive policy (the default), or the one `from_env`
/// builds.
#[derive(Serialize, Clone, Copy)]
struct PolicyPoint {
    participants: usize,
    tokens_per_s: f64,
}

#[derive(Serialize)]
struct TuneReport {
    model: [usize; 4],
    /// `f32`, `q8_0` or `q4_0`.
    format: &'static str,
    /// The adaptive policy (what `Pool::new` and `from_env` use) at each
    /// width, beside the fixed budgets of `points`.
    adaptive_points: Vec<PolicyPoint>,
    /// The pool `PoolBuilder::from_env()` builds here (pinned per the
    /// plan, sized by performance cores), measured the same way.
    from_env: PolicyPoint,
    /// The kernels' SIMD tier in this run.
    simd_tier: &'static str,
    /// The quantized kernels' path under that tier
    /// (`pool_matvec::quantized_kernel_name`).
    quantized_kernel: &'static str,
    tokens_per_point: usize,
    points: Vec<Point>,
    best: Point,
    /// What to set, or, after a contaminated sweep, why nothing is
    /// recommended and what to do.
    recommendation: String,
    /// Whether a setting is recommended (false after a contaminated sweep).
    recommended: bool,
    /// Other processes' CPU use during the sweep (null where /proc cannot
    /// be read).
    contamination: Option<crate::measure::Contamination>,
}

fn median_tokens_per_s(model: &DecodeModel, exec: &dyn DecodeExecutor, tokens: usize) -> f64 {
    crate::measure::tokens_per_s(model, exec, tokens).median
}

pub(crate) fn run(o: Options) -> Result<(), String> {
    if o.spins.is_empty() {
        return Err("--spins needs at least one budget".into());
    }
    let max = o.max_threads.unwrap_or_else(pool_topo::usable_cpus).max(1);
    let config = o.shape.unwrap_or(if o.quick {
        DecodeConfig {
            dim: 256,
            hidden: 512,
            layers: 2,
            vocab: 2000,
        }
    } else {
        DecodeConfig::default()
    });
    if o.format != WeightFormat::F32
        && (!config.dim.is_multiple_of(32) || !config.hidden.is_multiple_of(32))
    {
        return Err(format!(
            "--format {}: dim and hidden must be multiples of 32 (got {} and {})",
            o.format.name(),
            config.dim,
            config.hidden
        ));
    }
    check_fits_in_memory(&config, o.format, pool_topo::available_memory_bytes())?;
    let model = DecodeModel::random(config, o.format, 42);
    let total = max * (o.spins.len() + 1) + 1;
    let bar = if o.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").map_err(|e| e.to_string())?,
    );
    let meter = pool_topo::CpuMeter::start();
    let mut points = Vec::with_capacity(total);
    let mut adaptive_points = Vec::with_capacity(max);
    for participants in 1..=max {
        for &spin in &o.spins {
            bar.set_message(format!("{participants} participants, spin {spin}"));
            let tokens_per_s = if participants == 1 {
                median_tokens_per_s(&model, &Serial, o.tokens)
            } else {
                let pool = Pool::with_spin(participants - 1, spin);
                median_tokens_per_s(&model, &pool, o.tokens)
            };
            points.push(Point {
                participants,
                spin,
                tokens_per_s,
            });
            bar.inc(1);
        }
        bar.set_message(format!("{participants} participants, adaptive"));
        let tokens_per_s = if participants == 1 {
            median_tokens_per_s(&model, &Serial, o.tokens)
        } else {
            let pool = Pool::builder()
                .workers(participants - 1)
                .spin_policy(SpinPolicy::adaptive())
                .build()
                .map_err(|e| format!("cannot start the workers: {e}"))?;
            median_tokens_per_s(&model, &pool, o.tokens)
        };
        adaptive_points.push(PolicyPoint {
            participants,
            tokens_per_s,
        });
        bar.inc(1);
    }
    bar.set_message("the from_env pool");
    let from_env = {
        let builder = pool_core::PoolBuilder::from_env();
        let participants = builder.worker_count() + 1;
        let pool = builder
            .build()
            .or_else(|_| pool_core::PoolBuilder::from_env().unpinned().build())
            .map_err(|e| format!("cannot start the from_env pool: {e}"))?;
        PolicyPoint {
            participants,
            tokens_per_s: median_tokens_per_s(&model, &pool, o.tokens),
        }
    };
    bar.finish_and_clear();
    let contamination = meter
        .and_then(|m| m.foreign())
        .map(|f| crate::measure::Contamination {
            foreign_cpus: f.cpus,
            share_of_cpus: f.share,
            contaminated: f.contaminated(),
        });
    let best = *points
        .iter()
        .max_by(|a, b| a.tokens_per_s.total_cmp(&b.tokens_per_s))
        .expect("at least one point");
    // The adaptive policy is the default: recommend a fixed budget only
    // when it beats the adaptive policy at its best width by over 3 %.
    let best_adaptive = *adaptive_points
        .iter()
        .max_by(|a, b| a.tokens_per_s.total_cmp(&b.tokens_per_s))
        .expect("at least one width");
    let contaminated = contamination.is_some_and(|c| c.contaminated);
    let recommendation = if let Some(c) = contamination.filter(|c| c.contaminated) {
        format!(
            "none: other processes used {:.2} CPUs ({:.0} % of the usable ones) during the sweep, \
             so its figures say nothing about this machine; run it again on a quiet machine, or \
             keep the defaults (FERROX_CPU_THREADS unset, the adaptive policy)",
            c.foreign_cpus,
            100.0 * c.share_of_cpus
        )
    } else if best_adaptive.tokens_per_s * 1.03 >= best.tokens_per_s {
        format!(
            "FERROX_CPU_THREADS={} (CMF_POOL_SPIN unset: the adaptive policy, {:.1} tokens/s, is ahead of or within 3 % of the best fixed budget's {:.1})",
            best_adaptive.participants, best_adaptive.tokens_per_s, best.tokens_per_s
        )
    } else {
        format!(
            "FERROX_CPU_THREADS={} CMF_POOL_SPIN={}",
            best.participants, best.spin
        )
    };
    if let Some(path) = &o.svg {
        draw(path, &points, &o.spins, max).map_err(|e| format!("--svg {}: {e}", path.display()))?;
    }
    let report = TuneReport {
        model: [config.dim, config.hidden, config.layers, config.vocab],
        format: o.format.name(),
        adaptive_points,
        from_env,
        simd_tier: pool_matvec::simd_tier().name(),
        quantized_kernel: pool_matvec::quantized_kernel_name(pool_matvec::simd_tier()),
        tokens_per_point: o.tokens,
        points,
        best,
        recommendation,
        recommended: !contaminated,
        contamination,
    };
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    print!("{:>12}", "participants");
    for spin in &o.spins {
        print!("{:>12}", format!("spin {spin}"));
    }
    print!("{:>12}", "adaptive");
    println!(
        "   (tokens/s, median of {}; {}x{}x{} {}, {} kernels{})",
        o.tokens,
        config.dim,
        config.hidden,
        config.layers,
        report.format,
        report.simd_tier,
        if report.format == "f32" {
            String::new()
        } else {
            format!(", quantized: {}", report.quantized_kernel)
        }
    );
    for participants in 1..=max {
        print!("{participants:>12}");
        for p in report
            .points
            .iter()
            .filter(|p| p.participants == participants)
        {
            print!("{:>12.1}", p.tokens_per_s);
        }
        print!(
            "{:>12.1}",
            report.adaptive_points[participants - 1].tokens_per_s
        );
        println!();
    }
    println!(
        "the from_env pool ({} participants, pinned per the plan, adaptive): {:.1} tokens/s",
        report.from_env.participants, report.from_env.tokens_per_s
    );
    println!("recommended: {}", report.recommendation);
    Ok(())
}

fn draw(
    path: &std::path::Path,
    points: &[Point],
    spins: &[usize],
    max: usize,
) -> Result<(), String> {
    use plotters::prelude::*;
    let top = points.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption("decode tokens/s vs participants", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1usize..max.max(2), 0.0..top.max(1.0))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("participants")
        .y_desc("tokens/s")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, &spin) in spins.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series: Vec<(usize, f64)> = points
            .iter()
            .filter(|p| p.spin == spin)
            .map(|p| (p.participants, p.tokens_per_s))
            .collect();
        chart
            .draw_series(LineSeries::new(series, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!("spin {spin}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Refuses a shape whose weights (plus the activations, a few rows) cannot
/// fit in `available` bytes, before allocating them: a 40 GB model on a
/// 16 GB machine is an error that says so, not an abort.
pub(crate) fn check_fits_in_memory(
    config: &DecodeConfig,
    format: WeightFormat,
    available: Option<u64>,
) -> Result<(), String> {
    let shape = format!(
        "--model {},{},{},{}",
        config.dim, config.hidden, config.layers, config.vocab
    );
    let Some(bytes) = config.checked_weight_bytes(format) else {
        return Err(format!(
            "{shape}: the weights' size does not fit in 64 bits"
        ));
    };
    match available {
        Some(available) if bytes as u64 > available / 10 * 9 => Err(format!(
            "{shape} in {}: {:.1} GB of weights, and this machine has {:.1} GB of memory              available; pick a smaller shape",
            format.name(),
            bytes as f64 / 1e9,
            available as f64 / 1e9
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(dim: usize, hidden: usize, layers: usize, vocab: usize) -> DecodeConfig {
        DecodeConfig {
            dim,
            hidden,
            layers,
            vocab,
        }
    }

    #[test]
    fn a_model_larger_than_memory_is_refused_before_allocating() {
        let huge = shape(100_000, 100_000, 10, 100_000);
        let err = check_fits_in_memory(&huge, WeightFormat::F32, Some(16 << 30)).unwrap_err();
        assert!(
            err.contains("GB of weights") && err.contains("17.2 GB"),
            "{err}"
        );
        let small = shape(256, 512, 2, 2000);
        assert_eq!(
            check_fits_in_memory(&small, WeightFormat::F32, Some(16 << 30)),
            Ok(())
        );
        // Unknown memory: go ahead.
        assert_eq!(check_fits_in_memory(&huge, WeightFormat::F32, None), Ok(()));
    }

    #[test]
    fn a_shape_whose_size_overflows_is_refused() {
        let absurd = shape(usize::MAX / 2, 4, 4, 4);
        let err = check_fits_in_memory(&absurd, WeightFormat::F32, None).unwrap_err();
        assert!(err.contains("64 bits"), "{err}");
    }
}

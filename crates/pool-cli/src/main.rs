//! `pool`: see the machine, measure against rayon, tune the environment.
//!
//! With no arguments: the topology, the plan, and a quick benchmark (under
//! 30 seconds). See `pool --help` and docs/cli.md for the JSON schemas.

mod bench;
mod llama;
mod llama_cpp;
mod markdown;
mod measure;
mod peers;
mod scenarios;
mod topo;
mod tune;
mod waiting;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pool_matvec::decode::{DecodeConfig, WeightFormat};

/// See this machine's topology, measure the pool against rayon and serial,
/// and find the width and spin budget that pay here.
#[derive(Parser, Debug)]
#[command(
    name = "pool",
    version,
    about,
    long_about = None,
    after_help = "With no command, `pool` runs `pool topo` and then `pool bench --quick` \
                  (under 30 seconds)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Spin on one CPU for a while: the competing process `pool bench`
    /// starts (internal).
    #[command(hide = true)]
    Burn {
        /// The CPU to pin to.
        #[arg(long)]
        cpu: usize,
        /// How long, at most.
        #[arg(long)]
        seconds: u64,
    },
    /// Logical CPUs, affinity, physical cores and siblings, perf/efficiency
    /// classes, cgroup quota, NUMA nodes, the resolved width (and where it
    /// came from) and the pinned plan.
    Topo {
        /// A captured copy of a machine's `/sys/devices/system` to plan for
        /// instead of this host (its `cpu/` and `node/` are read).
        #[arg(long, value_name = "DIR")]
        sysfs: Option<PathBuf>,
        /// Reserve a core for a coordinator thread in the plan (the
        /// workers shrink by one to make room).
        #[arg(long)]
        coordinator: bool,
        /// With --sysfs: apply this host's FERROX_CPU_THREADS /
        /// RAYON_NUM_THREADS to the captured machine's plan too.
        #[arg(long, requires = "sysfs")]
        env: bool,
        /// Plan N pools built in turn by one process (two decode threads
        /// with a pool each, say): each is placed around the CPUs the ones
        /// before it hold, and left unpinned, saying why, when none are
        /// free.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        pools: u32,
        /// One JSON object instead of text (schema: docs/cli.md).
        #[arg(long)]
        json: bool,
    },
    /// Side by side in one run: cache-line ping-pong, empty fork-join of the
    /// pool vs a minimal spin pool, rayon and spawn-per-job (hot and after
    /// an idle gap), read bandwidth vs f32 and Q8_0 matvec, and the decode
    /// workload's tokens/s for serial, rayon and the pool.
    Bench {
        /// Smaller sizes and fewer repetitions (seconds, not a minute).
        #[arg(long)]
        quick: bool,
        /// Instead: the decode workload inside each deployment setting
        /// (pinned caller, from_env, two pools, two callers, a busy or
        /// decoding neighbour, a 1-CPU cgroup quota, oversubscription, idle
        /// gaps), pool vs rayon vs serial side by side.
        #[arg(long, conflicts_with = "peers")]
        scenarios: bool,
        /// With --scenarios: decode this model (GGUF or llama2.c, e.g. a
        /// Q4_0 GGUF file) in every setting instead of the synthetic f32
        /// layer stack.
        #[arg(long, value_name = "FILE", requires = "scenarios")]
        model: Option<PathBuf>,
        /// With --scenarios: only these settings (numbers as printed,
        /// e.g. `--settings 7,9`).
        #[arg(
            long,
            value_name = "N,N",
            value_delimiter = ',',
            requires = "scenarios"
        )]
        settings: Vec<u32>,
        /// Instead: the peers suite, EPCC-style, at 2, 3 and 4 threads:
        /// fork-join, a barrier inside a region, a reduction, a row job
        /// and a tiny decode token on this pool, rayon (four ways),
        /// candle's BarrierPool, fork_union, chili (those three with
        /// `--features peers`), OpenMP, a minimal spin pool and a
        /// ping-pong; the goals checked.
        #[arg(long)]
        peers: bool,
        /// Instead: `pool decode` against llama.cpp's `llama-bench` on the
        /// same GGUF files (stories15M and stories110M in Q8_0, Q4_0,
        /// Q4_K_M) and against llama2.c's C forward pass on the f32
        /// checkpoints, separate processes, interleaved rounds, at 1 and 2
        /// threads. Needs `scripts/llama-cpp.sh models` (says so if not).
        #[arg(long = "llama-cpp", conflicts_with_all = ["peers", "scenarios"])]
        llama_cpp: bool,
        /// With --peers: draw overhead against threads, one line per peer,
        /// to FILE.
        #[arg(long, value_name = "FILE", requires = "peers")]
        svg: Option<PathBuf>,
        /// Internal: the --peers child measuring one thread count.
        #[arg(long, hide = true, value_name = "THREADS")]
        peers_at: Option<usize>,
        /// One JSON object instead of text (schema: docs/cli.md).
        #[arg(long)]
        json: bool,
        /// The run as the Markdown table of docs/benchmarks.md's default run
        /// (machine, commit, command, contamination, then the figures).
        #[arg(long, conflicts_with_all = ["json", "peers", "scenarios", "llama_cpp"])]
        markdown: bool,
    },
    /// Greedy decoding of a GGUF model (F32, F16, Q8_0, Q4_0, Q4_K_M) or a
    /// llama2.c checkpoint on the pool: the tokens (text with the GGUF
    /// vocabulary or --tokenizer), the tensor types and kernels used,
    /// tokens/s after the first token, and the share of the bandwidth
    /// bound reached.
    Decode {
        /// The checkpoint.
        model: PathBuf,
        /// A llama2.c tokenizer file, to print text instead of token ids.
        #[arg(long, value_name = "FILE")]
        tokenizer: Option<PathBuf>,
        /// Text to run before generating (encoded with the GGUF file's
        /// vocabulary, or --tokenizer's).
        #[arg(long, value_name = "TEXT")]
        prompt: Option<String>,
        /// Tokens to generate (at most the model's seq_len).
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
        steps: u32,
        /// Participants, the caller included (default: FERROX_CPU_THREADS,
        /// else the topology's width).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
        threads: Option<u32>,
        /// Which executor runs the row jobs, to compare on the same model
        /// (`openmp`: llama2.c's C forward pass with OpenMP instead).
        #[arg(long, value_enum, default_value_t = llama::Executor::Pool)]
        executor: llama::Executor,
        /// Read the weights in place through a shared mapping of the file
        /// instead of a copy in transparent huge pages (the default): no
        /// copy and no load time, but slower from DRAM, and the file must
        /// not change while decoding (a truncation kills the process with
        /// SIGBUS).
        #[arg(long)]
        mmap: bool,
        /// The default now (kept so older command lines still parse).
        #[arg(long, hide = true, conflicts_with = "mmap")]
        huge_pages: bool,
        /// One JSON object instead of text (schema: docs/cli.md).
        #[arg(long)]
        json: bool,
    },
    /// Write a llama2.c checkpoint with random weights in a known shape,
    /// to try `pool decode` without downloading a model.
    RandomCheckpoint {
        /// stories15M or stories110M.
        #[arg(long, value_enum)]
        shape: llama::Shape,
        /// Where to write it.
        out: PathBuf,
        /// The random seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Also write a made-up llama2.c tokenizer of the same vocabulary
        /// here (what llama.cpp's converter needs to make a GGUF file).
        #[arg(long, value_name = "FILE")]
        tokenizer: Option<PathBuf>,
        /// One JSON object instead of text (schema: docs/cli.md).
        #[arg(long)]
        json: bool,
    },
    /// Sweep participants and spin budgets over the decode workload; print
    /// the table and the recommended FERROX_CPU_THREADS / CMF_POOL_SPIN.
    Tune {
        /// Spin budgets to try, comma separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![0usize, 500, 4000, 20000, 200000])]
        spins: Vec<usize>,
        /// Largest participant count to try (default: the usable CPUs).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
        max_threads: Option<u32>,
        /// Tokens decoded per point (after one warm-up token).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
        tokens: u32,
        /// A small model, for a sweep in seconds.
        #[arg(long)]
        quick: bool,
        /// Your model's shape: DIM,HIDDEN,LAYERS,VOCAB (default
        /// 768,2048,12,32000, or a small one with --quick).
        #[arg(long, value_name = "DIM,HIDDEN,LAYERS,VOCAB", value_parser = parse_shape)]
        model: Option<DecodeConfig>,
        /// Your model's weight format.
        #[arg(long, value_enum, default_value_t = FormatArg::F32)]
        format: FormatArg,
        /// Draw tokens/s vs participants, one line per spin budget, to FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// One JSON object instead of text (schema: docs/cli.md).
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    // A copy of this binary started as a decoding neighbour (setting 8 of
    // `bench --scenarios`) does only that.
    pool_benches::scenarios::neighbour_main_if_requested();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("POOL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // No colour codes when stderr is a pipe or a file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    if let Some(Command::Bench { .. } | Command::Tune { .. }) = &cli.command {
        // Their from_env pools take this width.
        let width = pool_topo::resolve_cpu_threads(None);
        if width.source != pool_topo::WidthSource::Topology {
            warn_if_wider_than_the_machine(
                &format!("pool ({} = {})", width.source, width.threads),
                width.threads,
            );
        }
    }
    if let Some(Command::Tune {
        max_threads: Some(max),
        ..
    }) = &cli.command
    {
        warn_if_wider_than_the_machine("pool tune --max-threads", *max as usize);
    }
    let result = match cli.command {
        None => overview(),
        Some(Command::Topo {
            sysfs,
            coordinator,
            env,
            pools,
            json,
        }) => topo::run(sysfs.as_deref(), coordinator, env, pools as usize, json),
        Some(Command::Bench {
            quick,
            peers_at: Some(threads),
            ..
        }) => peers::run_child(threads, quick),
        Some(Command::Bench {
            quick,
            peers: true,
            svg,
            json,
            ..
        }) => peers::run(quick, json, svg.as_deref()),
        Some(Command::Bench {
            quick,
            scenarios: true,
            model,
            settings,
            json,
            ..
        }) => scenarios::run(quick, json, model.as_deref(), &settings),
        Some(Command::Bench {
            quick,
            llama_cpp: true,
            json,
            ..
        }) => llama_cpp::run(quick, json),
        Some(Command::Bench {
            quick,
            markdown,
            json,
            ..
        }) => bench::run(quick, json, markdown),
        Some(Command::Decode {
            model,
            tokenizer,
            steps,
            threads,
            executor,
            mmap,
            huge_pages: _,
            prompt,
            json,
        }) => llama::run_decode(llama::DecodeOptions {
            model,
            tokenizer,
            steps: steps as usize,
            threads: threads.map(|n| n as usize),
            executor,
            mmap,
            prompt,
            json,
        }),
        Some(Command::RandomCheckpoint {
            shape,
            out,
            seed,
            tokenizer,
            json,
        }) => llama::write_random(shape, &out, seed, tokenizer.as_deref(), json),
        Some(Command::Burn { cpu, seconds }) => {
            waiting::burn(cpu, seconds.min(120));
            Ok(())
        }
        Some(Command::Tune {
            spins,
            max_threads,
            tokens,
            quick,
            model,
            format,
            svg,
            json,
        }) => tune::run(tune::Options {
            shape: model,
            format: format.into(),
            spins,
            max_threads: max_threads.map(|n| n as usize),
            tokens: tokens as usize,
            quick,
            svg,
            json,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pool: error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `pool tune --format`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FormatArg {
    /// f32 weights.
    F32,
    /// GGUF Q8_0.
    #[value(name = "q8_0")]
    Q8_0,
    /// GGUF Q4_0.
    #[value(name = "q4_0")]
    Q4_0,
}

impl From<FormatArg> for WeightFormat {
    fn from(f: FormatArg) -> WeightFormat {
        match f {
            FormatArg::F32 => WeightFormat::F32,
            FormatArg::Q8_0 => WeightFormat::Q8_0,
            FormatArg::Q4_0 => WeightFormat::Q4_0,
        }
    }
}

/// `DIM,HIDDEN,LAYERS,VOCAB`, each at least 1.
fn parse_shape(text: &str) -> Result<DecodeConfig, String> {
    let values: Vec<usize> = text
        .split(',')
        .map(|v| v.trim().parse::<usize>().map_err(|e| format!("{v:?}: {e}")))
        .collect::<Result<_, _>>()?;
    match values[..] {
        [dim, hidden, layers, vocab] if values.iter().all(|&v| v > 0) => Ok(DecodeConfig {
            dim,
            hidden,
            layers,
            vocab,
        }),
        _ => Err(format!(
            "{text:?}: four positive numbers DIM,HIDDEN,LAYERS,VOCAB"
        )),
    }
}

/// Warns on stderr when `threads` participants are more than the CPUs this
/// process may use: every thread past them shares a CPU, and spinning
/// threads that share one slow each other down (`pool topo` says the same).
pub(crate) fn warn_if_wider_than_the_machine(what: &str, threads: usize) {
    let cpus = pool_topo::usable_cpus();
    if threads > cpus {
        eprintln!(
            "{what}: warning: {} on {cpus} usable CPUs: the pool is oversubscribed \
             ({} share CPUs)",
            threads_phrase(threads),
            threads_phrase(threads - cpus)
        );
    }
}

/// "1 thread", "2 threads".
pub(crate) fn threads_phrase(threads: usize) -> String {
    if threads == 1 {
        "1 thread".to_owned()
    } else {
        format!("{threads} threads")
    }
}

/// The main job: topology, plan, quick benchmark.
fn overview() -> Result<(), String> {
    topo::run(None, false, false, 1, false)?;
    println!();
    bench::run(true, false, false)
}

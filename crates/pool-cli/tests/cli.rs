//! The `pool` binary end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// One `pool` process at a time: two benchmarking processes side by side
/// would each see the other as foreign load (and shrink their jobs to the
/// caller), so the figures and counters these tests check would depend on
/// which tests the harness happened to overlap.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held for writing by the test that starts busy processes, so that no
/// other test's `pool` runs beside them.
static QUIET: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn pool(args: &[&str]) -> Output {
    let _quiet = QUIET.read().unwrap_or_else(|e| e.into_inner());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    run_pool(args)
}

/// `pool` with no lock taken (the caller holds what it needs).
fn run_pool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pool"))
        .args(args)
        .env_remove("FERROX_CPU_THREADS")
        .env_remove("RAYON_NUM_THREADS")
        .output()
        .expect("run the pool binary")
}

fn json(args: &[&str]) -> Value {
    let out = pool(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn fixture(host: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../pool-topo/tests/fixtures")
        .join(host)
        .join("devices/system")
        .display()
        .to_string()
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect()
}

#[test]
fn topo_reads_a_captured_smt_server_and_plans_on_physical_cores() {
    let r = json(&["topo", "--sysfs", &fixture("smt-16c32t"), "--json"]);
    assert_eq!(r["logical_cpus"].as_array().unwrap().len(), 32);
    assert_eq!(r["physical_cores"], 16);
    assert_eq!(numbers(&r["cores"][3]["cpus"]), vec![3, 19]);
    assert_eq!(r["width"]["threads"], 16);
    assert_eq!(r["width"]["source"], "topology");
    assert_eq!(r["plan"]["workers"], 15);
    assert_eq!(
        numbers(&r["plan"]["worker_cpus"]),
        (1..16).collect::<Vec<u64>>()
    );
    assert_eq!(r["numa_nodes"].as_array().unwrap().len(), 1);
}

#[test]
fn topo_reports_hybrid_classes_and_a_coordinator_core() {
    let r = json(&[
        "topo",
        "--sysfs",
        &fixture("intel-hybrid"),
        "--coordinator",
        "--json",
    ]);
    assert_eq!(r["class_source"], "intel-hybrid");
    assert_eq!(r["perf_cores"], 6);
    assert_eq!(r["cores"][13]["class"], "efficiency");
    assert_eq!(r["plan"]["coordinator_cpu"], 2);
    let r = json(&["topo", "--sysfs", &fixture("numa-2socket"), "--json"]);
    assert_eq!(r["numa_nodes"].as_array().unwrap().len(), 2);
    assert_eq!(r["physical_cores"], 32);
    let r = json(&["topo", "--sysfs", &fixture("broken-garbage"), "--json"]);
    assert!(r["degraded"].as_str().unwrap().contains("zero-one"));
}

#[test]
fn topo_on_this_host_names_where_the_width_came_from() {
    let r = json(&["topo", "--json"]);
    assert_eq!(r["source"], "host");
    assert!(r["physical_cores"].as_u64().unwrap() >= 1);
    let out = Command::new(env!("CARGO_BIN_EXE_pool"))
        .args(["topo", "--json"])
        .env("FERROX_CPU_THREADS", "3")
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["width"]["threads"], 3);
    assert_eq!(r["width"]["source"], "FERROX_CPU_THREADS");
}

#[test]
fn an_unreadable_sysfs_is_an_error_naming_the_path() {
    let out = pool(&["topo", "--sysfs", "/nonexistent/system"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/system"), "{err}");
}

#[test]
fn bad_flags_and_values_are_refused_with_a_message() {
    for args in [
        &["topo", "--bogus"][..],
        &["tune", "--spins", "abc"],
        &["tune", "--max-threads", "0"],
        &["tune", "--tokens", "-3"],
        &["frobnicate"],
    ] {
        let out = pool(args);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(!out.stderr.is_empty(), "{args:?} must say why");
    }
}

#[test]
fn every_subcommand_explains_itself() {
    for sub in ["topo", "bench", "tune", "decode", "random-checkpoint"] {
        let out = pool(&[sub, "--help"]);
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("--json"),
            "{sub}"
        );
    }
}

#[test]
fn bench_quick_json_has_every_field_with_sane_values() {
    let r = json(&["bench", "--quick", "--json"]);
    let positive = |path: &[&str]| {
        let mut v = &r;
        for key in path {
            v = match key.parse::<usize>() {
                Ok(i) if v.is_array() => &v[i],
                _ => &v[*key],
            };
        }
        let x = v
            .as_f64()
            .unwrap_or_else(|| panic!("{path:?} missing: {r}"));
        assert!(x > 0.0 && x.is_finite(), "{path:?} = {x}");
    };
    for f in [
        "ping_pong",
        "spin_reference",
        "pool_hot",
        "pool_oversubscribed",
        "rayon_broadcast_inside",
        "rayon_broadcast_outside",
        "spawn_per_job",
        "pool_after_idle_gap",
        "rayon_after_idle_gap",
    ] {
        positive(&["fork_join_ns", f, "median"]);
    }
    for f in [
        "pool_vs_ping_pong",
        "pool_vs_spin_reference",
        "rayon_inside_vs_pool",
        "rayon_outside_vs_pool",
    ] {
        positive(&["ratios", f]);
    }
    for f in [
        "read_ceiling_gbs",
        "f32_pool_gbs",
        "f32_rayon_gbs",
        "f32_serial_gbs",
        "q8_0_pool_gbs",
        "q8_0_rayon_gbs",
        "q8_0_serial_gbs",
        "q4_0_pool_gbs",
        "q4_0_rayon_gbs",
        "q4_0_serial_gbs",
    ] {
        positive(&["bandwidth", f, "median"]);
    }
    let k_quants: Vec<&str> = r["bandwidth"]["k_quants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["format"].as_str().unwrap())
        .collect();
    assert_eq!(k_quants, ["Q4_K", "Q6_K"]);
    for i in ["0", "1"] {
        for f in ["read_ceiling_gbs", "pool_gbs", "rayon_gbs", "serial_gbs"] {
            positive(&["bandwidth", "k_quants", i, f, "median"]);
        }
        positive(&["bandwidth", "k_quants", i, "pool_pct_of_ceiling"]);
    }
    let formats: Vec<&str> = r["decode_formats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["format"].as_str().unwrap())
        .collect();
    assert_eq!(formats, ["f32", "q8_0", "q4_0"]);
    for i in ["0", "1", "2"] {
        for f in [
            "serial_tokens_per_s",
            "rayon_tokens_per_s",
            "pool_tokens_per_s",
        ] {
            positive(&["decode_formats", i, f, "median"]);
        }
    }
    assert!(["portable", "neon", "avx2", "avx512"].contains(&r["simd_tier"].as_str().unwrap()));
    for f in [
        "serial_tokens_per_s",
        "rayon_tokens_per_s",
        "pool_tokens_per_s",
    ] {
        positive(&["decode", f, "median"]);
    }
    positive(&["decode", "pool_vs_rayon"]);
    let unparks = r["decode"]["unparks_per_dispatch"].as_f64().unwrap();
    assert!(
        (0.0..=1.0).contains(&unparks),
        "at most one unpark per invited worker: {unparks}"
    );
    positive(&["waiting", "adaptive_vs_best_fixed"]);
    positive(&["waiting", "oversubscribed_vs_fitting"]);
    assert_eq!(
        r["waiting"]["policies"].as_array().unwrap().len(),
        6,
        "5 fixed budgets + adaptive"
    );
    assert_eq!(
        r["waiting"]["cpu_ms_after_last_token"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        r["waiting"]["competing"].as_array().unwrap().len(),
        4,
        "adaptive + 3 fixed budgets beside a busy process"
    );
    positive(&["waiting", "competing_adaptive_vs_best_fixed"]);
    let llama2 = &r["llama2"][0];
    assert_eq!(llama2["name"], "stories15M", "{r}");
    assert_eq!(llama2["same_tokens"], true, "serial, rayon and pool agree");
    for f in [
        "serial_tokens_per_s",
        "rayon_tokens_per_s",
        "pool_tokens_per_s",
    ] {
        positive(&["llama2", "0", f, "median"]);
    }
    let share = r["decode"]["caller_wait_share"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&share), "{share}");
    // Zero when a busy neighbour made the adaptive pool run every matvec
    // inline (load.rs); otherwise a few per matvec at most.
    let dispatches = r["decode"]["dispatches_per_token"].as_f64().unwrap();
    assert!((0.0..1e4).contains(&dispatches), "{dispatches}");
}

#[test]
fn tune_sweeps_a_tiny_grid_and_recommends_a_setting() {
    let svg = std::env::temp_dir().join(format!("pool-tune-{}.svg", std::process::id()));
    let r = json(&[
        "tune",
        "--quick",
        "--spins",
        "0,4000",
        "--max-threads",
        "2",
        "--tokens",
        "2",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(r["points"].as_array().unwrap().len(), 4);
    assert_eq!(
        r["adaptive_points"].as_array().unwrap().len(),
        2,
        "the default policy beside them"
    );
    let from_env = r["from_env"]["tokens_per_s"].as_f64().unwrap();
    assert!(from_env > 0.0 && from_env.is_finite());
    assert_eq!(r["format"], "f32");
    assert_eq!(
        r["quantized_kernel"],
        pool_matvec::quantized_kernel_name(pool_matvec::simd_tier())
    );
    let rec = r["recommendation"].as_str().unwrap();
    // A machine that is never idle (CI) may contaminate the sweep: then
    // nothing is recommended, and the report says why.
    if r["recommended"] == true {
        assert!(
            rec.starts_with("FERROX_CPU_THREADS=") && rec.contains("CMF_POOL_SPIN"),
            "{rec}"
        );
    } else {
        assert_eq!(r["contamination"]["contaminated"], true, "{r}");
        assert!(
            rec.starts_with("none") && rec.contains("quiet machine"),
            "{rec}"
        );
    }
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("spin 4000"));
    let _ = std::fs::remove_file(svg);
}

#[test]
fn tune_takes_the_users_model_shape_and_format() {
    let r = json(&[
        "tune",
        "--model",
        "64,96,1,100",
        "--format",
        "q4_0",
        "--spins",
        "0",
        "--max-threads",
        "1",
        "--tokens",
        "1",
        "--json",
    ]);
    assert_eq!(numbers(&r["model"]), [64, 96, 1, 100]);
    assert_eq!(r["format"], "q4_0");
    for bad in [
        &["tune", "--model", "64,0,1,100"][..],
        &["tune", "--model", "65,96,1,100", "--format", "q8_0"],
    ] {
        let out = pool(bad);
        assert!(!out.status.success(), "{bad:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn bench_scenarios_quick_json_reports_every_setting() {
    let r = json(&["bench", "--scenarios", "--quick", "--json"]);
    let settings = r["settings"].as_array().unwrap();
    assert_eq!(
        settings.len(),
        pool_benches::scenarios::SETTINGS.len(),
        "every setting"
    );
    for s in settings {
        let number = s["number"].as_u64().unwrap();
        if let Some(reason) = s["skipped"].as_str() {
            assert!(
                !reason.is_empty(),
                "setting {number} skipped without a reason"
            );
            continue;
        }
        let execs = s["executors"].as_array().unwrap();
        let names: Vec<&str> = execs
            .iter()
            .map(|e| e["executor"].as_str().unwrap())
            .collect();
        // Every setting measures the 4000-spin budget; setting 7 (a busy
        // process on one CPU) the longer fixed budgets too.
        let mut expected = vec![
            "pool_default",
            "pool_fixed_4000",
            "rayon_inside_install",
            "rayon_per_matvec",
            "serial",
        ];
        if number == u64::from(pool_benches::scenarios::BUDGETS_SETTING) {
            expected.extend(["pool_fixed_20000", "pool_fixed_100000"]);
        }
        assert_eq!(names, expected, "setting {number}");
        for e in execs {
            let tps = e["tokens_per_s_median"].as_f64().unwrap();
            assert!(tps.is_finite() && tps > 0.0, "setting {number}: {e}");
        }
        for key in [
            "pool_vs_best_baseline",
            "adaptive_vs_best_fixed",
            "hot_run_ns",
            "linger_allowance_ms",
        ] {
            let v = s[key].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "setting {number}: {key} = {v}");
        }
        assert!(s["misses"].is_array());
        assert!(s["caveats"].is_array());
    }
}

/// A file under the temp dir, removed when dropped.
/// A random stories15M-shaped llama2.c checkpoint (~60 MB) in a temp file.
fn random_stories15m(name: &str) -> TempFile {
    let model = TempFile::new(name);
    let out = pool(&["random-checkpoint", "--shape", "stories15M", model.path()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    model
}

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("pool-cli-{}-{name}", std::process::id())))
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A llama2.c tokenizer whose token `i` is the piece `<i>`.
fn numbered_tokenizer(vocab: usize) -> Vec<u8> {
    let mut bytes = 16i32.to_le_bytes().to_vec();
    for i in 0..vocab {
        let piece = format!("<{i}>");
        bytes.extend_from_slice(&0f32.to_le_bytes());
        bytes.extend_from_slice(&(piece.len() as i32).to_le_bytes());
        bytes.extend_from_slice(piece.as_bytes());
    }
    bytes
}

#[test]
fn bench_scenarios_decodes_a_model_file_in_the_settings_asked_for() {
    let model = TempFile::new("tiny-scenarios.bin");
    let config = pool_llama::Config {
        dim: 64,
        hidden_dim: 128,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        vocab_size: 512,
        seq_len: 32,
        shared_classifier: false,
    };
    pool_llama::write_random_checkpoint(&model.0, &config, 5).unwrap();
    let r = json(&[
        "bench",
        "--scenarios",
        "--quick",
        "--model",
        model.path(),
        "--settings",
        "1,4,6",
        "--json",
    ]);
    let described = r["model"].as_str().unwrap();
    assert!(
        described.contains("tiny-scenarios.bin") && described.contains("2 layers"),
        "{described}"
    );
    let numbers: Vec<u64> = r["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 4, 6]);
    for s in r["settings"].as_array().unwrap() {
        for e in s["executors"].as_array().unwrap() {
            let tps = e["tokens_per_s_median"].as_f64().unwrap();
            assert!(tps.is_finite() && tps > 0.0, "{s}");
        }
    }
    let unknown = pool(&["bench", "--scenarios", "--settings", "19"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no setting 19"));
    let missing = pool(&["bench", "--scenarios", "--model", "/nonexistent.gguf"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent.gguf"));
}

#[test]
fn decode_gives_the_same_tokens_on_every_executor_and_reports_the_bound() {
    let model = random_stories15m("s15.bin");
    let run = |executor: &str| {
        json(&[
            "decode",
            model.path(),
            "--steps",
            "3",
            "--threads",
            "2",
            "--executor",
            executor,
            "--json",
        ])
    };
    let pooled = run("pool");
    assert_eq!(pooled["config"]["dim"], 288);
    assert_eq!(pooled["mapped"], false, "read into memory by default");
    assert_eq!(pooled["tokens"].as_array().unwrap().len(), 3);
    for field in [
        "tokens_per_s",
        "read_ceiling_gbs",
        "bound_tokens_per_s",
        "share_of_bound",
    ] {
        let v = pooled[field].as_f64().unwrap();
        assert!(v > 0.0 && v.is_finite(), "{field} = {v}");
    }
    // Weights: 4 bytes x (6 layers x (4 x 288^2 + 3 x 768 x 288 + 2 x 288
    // RMS) + the 32000 x 288 classifier + 2 x 288 (embedding row, final
    // RMS)) = 60,768,000. KV cache: the timed tokens are at positions 1
    // and 2 (the first is not timed), reading 2 and 3 positions of keys
    // and values: 6 layers x 2 x 288 x 4 bytes x (2 + 3) / 2 = 34,560.
    assert_eq!(pooled["kv_cache_bytes_per_token"], 34_560);
    assert_eq!(pooled["bytes_per_token"], 60_768_000 + 34_560);
    for executor in ["rayon", "serial"] {
        assert_eq!(run(executor)["tokens"], pooled["tokens"], "{executor}");
    }
    let mapped = json(&["decode", model.path(), "--steps", "3", "--mmap", "--json"]);
    assert_eq!(mapped["mapped"], true, "--mmap reads the file in place");
    assert_eq!(mapped["tokens"], pooled["tokens"]);
    let tokenizer = TempFile::new("tok.bin");
    std::fs::write(&tokenizer.0, numbered_tokenizer(32000)).unwrap();
    let text = pool(&[
        "decode",
        model.path(),
        "--steps",
        "3",
        "--tokenizer",
        tokenizer.path(),
    ]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    let ids = numbers(&pooled["tokens"]);
    let expected: String = ids.iter().map(|i| format!("<{i}>")).collect();
    assert!(stdout.contains(&expected), "{expected} in:\n{stdout}");
}

#[test]
fn decode_of_a_bad_file_says_what_is_wrong() {
    let model = TempFile::new("bad.bin");
    let missing = pool(&["decode", model.path()]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
    let mut header: Vec<u8> = [288i32, 768, 6, 6, 6, 32000, 256]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    header.extend_from_slice(&[0; 1000]);
    std::fs::write(&model.0, &header).unwrap();
    let truncated = pool(&["decode", model.path()]);
    assert!(!truncated.status.success());
    let stderr = String::from_utf8_lossy(&truncated.stderr);
    assert!(
        stderr.contains("truncated") && stderr.contains("1028"),
        "{stderr}"
    );
    let good = random_stories15m("good.bin");
    let tokenizer = TempFile::new("short-tok.bin");
    std::fs::write(&tokenizer.0, numbered_tokenizer(100)).unwrap();
    let mismatch = pool(&["decode", good.path(), "--tokenizer", tokenizer.path()]);
    assert!(!mismatch.status.success());
    assert!(String::from_utf8_lossy(&mismatch.stderr).contains("tokenizer"));
}

#[test]
fn topo_plans_a_captured_machine_with_its_cgroup_and_without_this_hosts_variables() {
    let quota = fixture("cgroup-quota-3");
    let r = json(&["topo", "--sysfs", &quota, "--json"]);
    assert_eq!(
        r["cgroup_quota_cpus"], 3,
        "the captured cgroup is read: {r}"
    );
    assert_eq!(r["width"]["threads"], 3);
    assert!(r["width"]["explanation"]
        .as_str()
        .unwrap()
        .contains("quota of 3"));
    // This host's variable stays out of a captured tree's plan unless asked.
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let run = |extra: &[&str]| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_pool"))
            .args(["topo", "--sysfs", &fixture("smt-16c32t"), "--json"])
            .args(extra)
            .env("FERROX_CPU_THREADS", "5")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let captured = run(&[]);
    assert_eq!(captured["width"]["threads"], 16);
    assert_eq!(captured["env_applied"], false);
    let asked = run(&["--env"]);
    assert_eq!(asked["width"]["threads"], 5);
    assert_eq!(asked["width"]["source"], "FERROX_CPU_THREADS");
}

#[test]
fn a_coordinator_takes_a_place_instead_of_sharing_the_callers_cpu() {
    let r = json(&[
        "topo",
        "--sysfs",
        &fixture("vm-2cpu"),
        "--coordinator",
        "--json",
    ]);
    assert_eq!(r["plan"]["workers"], 0, "{r}");
    assert_eq!(r["plan"]["caller_cpu"], 0);
    assert_eq!(r["plan"]["coordinator_cpu"], 1);
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{r}");
    let r = json(&[
        "topo",
        "--sysfs",
        &fixture("arm-big-little"),
        "--coordinator",
        "--json",
    ]);
    let big: Vec<u64> = r["cores"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["class"] == "performance")
        .flat_map(|c| numbers(&c["cpus"]))
        .collect();
    for cpu in numbers(&r["plan"]["worker_cpus"]) {
        assert!(big.contains(&cpu), "worker on little core {cpu}: {r}");
    }
}

#[test]
fn topo_text_states_the_rule_the_policy_and_warnings_in_plain_lists() {
    let out = pool(&["topo", "--sysfs", &fixture("numa-2socket")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("performance cores of"), "{text}");
    assert!(text.contains("spin policy"), "{text}");
    assert!(
        text.contains("warning: the plan spans 2 NUMA nodes"),
        "{text}"
    );
    assert!(
        !text.contains("Some(") && !text.contains('['),
        "no debug output: {text}"
    );
    assert!(!text.contains('\u{1b}'), "no colour codes when piped");
}

/// The rough edges a new user met, each pinned down.
#[test]
fn pool_help_says_what_pool_alone_does() {
    let out = pool(&["--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("With no command"), "{text}");
    assert!(text.contains("pool bench --quick"), "{text}");
}

#[test]
fn decode_help_finishes_its_sentences() {
    let out = pool(&["decode", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("how C engines parallelise decode"), "{text}");
    assert!(!text.contains("engines are\n"), "{text}");
}

#[test]
fn random_checkpoint_json_names_the_shape_as_the_flag_does_and_warns_of_random_tokens() {
    let model = TempFile::new("rc.bin");
    let r = json(&[
        "random-checkpoint",
        "--shape",
        "stories15M",
        model.path(),
        "--json",
    ]);
    assert_eq!(r["shape"], "stories15M");
    assert!(r["megabytes"].as_f64().unwrap() > 50.0);
    let text = pool(&["random-checkpoint", "--shape", "stories15M", model.path()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("meaningless tokens"));
}

#[test]
fn decode_warns_when_wider_than_the_machine_and_counts_threads_in_good_english() {
    let model = random_stories15m("wide.bin");
    let cpus = pool_topo::usable_cpus();
    let wide = (cpus + 2).to_string();
    let out = pool(&["decode", model.path(), "--steps", "2", "--threads", &wide]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("oversubscribed") && stderr.contains(&format!("{wide} threads")),
        "{stderr}"
    );
    let one = pool(&["decode", model.path(), "--steps", "2", "--threads", "1"]);
    let stdout = String::from_utf8_lossy(&one.stdout);
    assert!(
        stdout.contains("1 thread") && !stdout.contains("1 threads"),
        "{stdout}"
    );
    assert!(stdout.contains("pool executor"), "{stdout}");
    assert!(stdout.contains("meaningless tokens"), "{stdout}");
}

#[test]
fn a_width_from_the_environment_wider_than_the_machine_is_warned_about() {
    let _quiet = QUIET.read().unwrap_or_else(|e| e.into_inner());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let wide = (pool_topo::usable_cpus() + 1).to_string();
    // `tune` with a tiny grid: the warning comes before any measuring.
    let out = Command::new(env!("CARGO_BIN_EXE_pool"))
        .args([
            "tune",
            "--quick",
            "--spins",
            "0",
            "--max-threads",
            "1",
            "--tokens",
            "1",
            "--json",
        ])
        .env("FERROX_CPU_THREADS", &wide)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("FERROX_CPU_THREADS") && stderr.contains("oversubscribed"),
        "{stderr}"
    );
}

#[test]
fn tune_refuses_a_model_larger_than_memory_before_allocating_it() {
    let out = pool(&["tune", "--model", "100000,100000,10,100000", "--json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("GB of weights") && stderr.contains("smaller"),
        "{stderr}"
    );
}

#[test]
fn a_directory_or_a_short_tokenizer_is_named_as_such() {
    let dir = std::env::temp_dir();
    let out = pool(&["decode", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    let model = random_stories15m("tok-model.bin");
    let tokenizer = TempFile::new("tok-short.bin");
    std::fs::write(&tokenizer.0, numbered_tokenizer(100)).unwrap();
    let out = pool(&["decode", model.path(), "--tokenizer", tokenizer.path()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the tokenizer has 100 tokens, the model 32000"),
        "{stderr}"
    );
}

#[test]
fn every_field_of_the_decode_json_is_documented() {
    let model = random_stories15m("doc-fields.bin");
    let r = json(&["decode", model.path(), "--steps", "2", "--json"]);
    let docs = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md"),
    )
    .unwrap();
    let section = docs
        .split("## `pool decode")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/cli.md has a decode section");
    for field in r.as_object().unwrap().keys() {
        assert!(
            section.contains(&format!("`{field}`")),
            "decode's JSON field `{field}` is not in docs/cli.md"
        );
    }
    for field in r["config"].as_object().unwrap().keys() {
        assert!(section.contains(&format!("`{field}`")), "config.{field}");
    }
}

#[test]
fn topo_plans_three_pools_built_in_turn_on_disjoint_cpus_then_unpinned() {
    let r = json(&[
        "topo",
        "--sysfs",
        &fixture("smt-16c32t"),
        "--pools",
        "3",
        "--json",
    ]);
    let pools = r["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 3);
    assert_eq!(pools[0], r["plan"]);
    assert_eq!(
        numbers(&pools[0]["worker_cpus"]),
        (1..16).collect::<Vec<_>>()
    );
    assert_eq!(
        numbers(&pools[1]["worker_cpus"]),
        (17..32).collect::<Vec<_>>()
    );
    assert_eq!(pools[1]["caller_cpu"], 16);
    assert!(pools[2]["worker_cpus"].as_array().unwrap().is_empty());
    let reason = pools[2]["unpinned_because"].as_str().unwrap();
    assert!(
        reason.contains("held by this process's other pools"),
        "{reason}"
    );
    let text = pool(&["topo", "--sysfs", &fixture("smt-16c32t"), "--pools", "3"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("pool 3 of 3") && text.contains("unpinned"),
        "{text}"
    );
}

/// `pool decode`, `pool tune` and `pool bench` measure what other
/// processes used meanwhile, and flag the run beside two busy processes.
#[test]
fn runs_beside_busy_processes_are_flagged_as_contaminated() {
    let model = random_stories15m("busy.bin");
    let _alone = QUIET.write().unwrap_or_else(|e| e.into_inner());
    let json = |args: &[&str]| -> Value {
        let out = run_pool(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let busy = testkit::BusyProcesses::start(2).expect("busy processes");
    let decode = json(&["decode", model.path(), "--steps", "8", "--json"]);
    assert_eq!(decode["contamination"]["contaminated"], true, "{decode}");
    assert!(decode["contamination"]["foreign_cpus"].as_f64().unwrap() > 0.1);
    let tune = json(&[
        "tune",
        "--quick",
        "--spins",
        "0",
        "--max-threads",
        "2",
        "--tokens",
        "2",
        "--json",
    ]);
    assert_eq!(tune["contamination"]["contaminated"], true, "{tune}");
    assert_eq!(tune["recommended"], false);
    assert!(
        tune["recommendation"].as_str().unwrap().starts_with("none"),
        "{}",
        tune["recommendation"]
    );
    // The Markdown table docs/benchmarks.md opens with, flagged too.
    let out = run_pool(&["bench", "--quick", "--markdown"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not results"), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("**Contaminated:**"), "{table}");
    for row in [
        "| measured (medians) | pool | rayon | serial |",
        "| empty fork-join, ns |",
        "| Q8_0 matvec from DRAM, GB/s |",
        "| synthetic decode q4_0, tokens/s |",
        "Command: `pool bench --quick --markdown`",
    ] {
        assert!(table.contains(row), "{row} in:\n{table}");
    }
    drop(busy);
}

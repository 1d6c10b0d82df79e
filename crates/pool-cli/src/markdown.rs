//! `pool bench --markdown`: the run as the table `docs/benchmarks.md` opens
//! with, headed by the machine, the commit, the command and whether other
//! processes spoiled it. Read from the JSON report, so it shows exactly the
//! figures `--json` gives.

use serde_json::Value;

/// Prints `report` (the JSON of `pool bench`) as Markdown.
pub(crate) fn print(report: &Value, command: &str) {
    let r = report;
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let med = |v: &Value| num(&v["median"]);
    println!(
        "Machine: {}; {} participants; SIMD tier {} ({} quantized kernels).",
        cpu_model(),
        r["participants"],
        str_of(&r["simd_tier"]),
        str_of(&r["quantized_kernel"])
    );
    println!(
        "Commit: {}. Command: `{command}`. Date: {}.",
        commit(),
        today()
    );
    match r["contamination"].as_object() {
        Some(c) if c["contaminated"] == true => println!(
            "**Contaminated:** other processes used {:.2} CPUs during the run; these figures are not results.",
            num(&c["foreign_cpus"])
        ),
        Some(c) => println!(
            "Other processes used {:.2} CPUs during the run (under 5 %: a clean run).",
            num(&c["foreign_cpus"])
        ),
        None => println!("Other processes' CPU use could not be read."),
    }
    for problem in r["measurement_problems"].as_array().into_iter().flatten() {
        println!("**Measurement problem:** {}", str_of(problem));
    }
    println!();
    println!(
        "| measured (medians) | pool | rayon | serial | pool/rayon | pool/serial | the limit |"
    );
    println!("|---|---|---|---|---|---|---|");
    let f = &r["fork_join_ns"];
    println!(
        "| empty fork-join, ns | {:.0} | {:.0} (broadcast from outside) | - | {:.1}x faster | - | ping-pong {:.0}, minimal spin pool {:.0} |",
        med(&f["pool_hot"]),
        med(&f["rayon_broadcast_outside"]),
        med(&f["rayon_broadcast_outside"]) / med(&f["pool_hot"]),
        med(&f["ping_pong"]),
        med(&f["spin_reference"]),
    );
    let b = &r["bandwidth"];
    for (name, key, ceiling) in [
        ("f32", "f32", "read_ceiling_gbs"),
        ("Q8_0", "q8_0", "q8_0_read_ceiling_gbs"),
        ("Q4_0", "q4_0", "q4_0_read_ceiling_gbs"),
    ] {
        let pool = med(&b[format!("{key}_pool_gbs")]);
        let rayon = med(&b[format!("{key}_rayon_gbs")]);
        let serial = med(&b[format!("{key}_serial_gbs")]);
        println!(
            "| {name} matvec from DRAM, GB/s | {pool:.1} | {rayon:.1} | {serial:.1} | {:.2}x | {:.2}x | read ceiling {:.1} ({:.0} % reached) |",
            pool / rayon,
            pool / serial,
            med(&b[ceiling]),
            num(&b[format!("{key}_pool_pct_of_ceiling")]),
        );
    }
    for (name, key) in [("Q8_0", "q8_0"), ("Q4_0", "q4_0")] {
        let i = &b[format!("{key}_interleaved")];
        if i.is_null() {
            continue;
        }
        println!(
            "| {name} matvec from DRAM, rows interleaved by sixteen (what decode runs here), GB/s | {:.1} | - | - | - | - | read ceiling {:.1} ({:.0} % reached) |",
            med(&i["pool_gbs"]),
            med(&i["read_ceiling_gbs"]),
            num(&i["pool_pct_of_ceiling"]),
        );
    }
    for k in b["k_quants"].as_array().into_iter().flatten() {
        let (pool, rayon, serial) = (
            med(&k["pool_gbs"]),
            med(&k["rayon_gbs"]),
            med(&k["serial_gbs"]),
        );
        println!(
            "| {} matvec from DRAM, GB/s | {pool:.1} | {rayon:.1} | {serial:.1} | {:.2}x | {:.2}x | read ceiling {:.1} ({:.0} % reached) |",
            str_of(&k["format"]),
            pool / rayon,
            pool / serial,
            med(&k["read_ceiling_gbs"]),
            num(&k["pool_pct_of_ceiling"]),
        );
        let i = &k["interleaved"];
        if !i.is_null() {
            println!(
                "| {} matvec from DRAM, rows interleaved by sixteen (what decode runs here), GB/s | {:.1} | - | - | - | - | read ceiling {:.1} ({:.0} % reached) |",
                str_of(&k["format"]),
                med(&i["pool_gbs"]),
                med(&i["read_ceiling_gbs"]),
                num(&i["pool_pct_of_ceiling"]),
            );
        }
    }
    for d in r["decode_formats"].as_array().into_iter().flatten() {
        println!(
            "| synthetic decode {}, tokens/s | {:.1} | {:.1} | {:.1} | {:.2}x | {:.2}x | {:.0} dispatches per token |",
            str_of(&d["format"]),
            med(&d["pool_tokens_per_s"]),
            med(&d["rayon_tokens_per_s"]),
            med(&d["serial_tokens_per_s"]),
            num(&d["pool_vs_rayon"]),
            num(&d["pool_vs_serial"]),
            num(&d["dispatches_per_token"]),
        );
    }
    for c in r["llama2"].as_array().into_iter().flatten() {
        let openmp = c["openmp_tokens_per_s"]
            .as_object()
            .map(|o| format!(", C + OpenMP {:.1}", num(&o["median"])))
            .unwrap_or_default();
        println!(
            "| llama2 {} (f32, random weights), tokens/s | {:.1} | {:.1} | {:.1} | {:.2}x | {:.2}x | bound {:.1} ({:.0} % reached){openmp} |",
            str_of(&c["name"]),
            med(&c["pool_tokens_per_s"]),
            med(&c["rayon_tokens_per_s"]),
            med(&c["serial_tokens_per_s"]),
            num(&c["pool_vs_rayon"]),
            num(&c["pool_vs_serial"]),
            num(&c["bound_tokens_per_s"]),
            100.0 * num(&c["pool_share_of_bound"]),
        );
    }
    let w = &r["waiting"];
    println!(
        "| adaptive policy vs the best fixed budget | {:.2}x | | | | | beside a busy process: {:.2}x |",
        num(&w["adaptive_vs_best_fixed"]),
        num(&w["competing_adaptive_vs_best_fixed"]),
    );
    let burns: Vec<String> = w["cpu_ms_after_last_token"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| format!("{} {:.1}", str_of(&b["executor"]), num(&b["cpu_ms"])))
        .collect();
    println!(
        "| CPU ms burned in the {:.0} ms after the last token | {} | | | | | |",
        num(&w["idle_window_ms"]),
        burns.join(", ")
    );
}

fn str_of(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// The CPU's model name (`/proc/cpuinfo`), or "unknown CPU".
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

/// `git rev-parse --short HEAD` where the binary runs in a checkout.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown (not run in a checkout)".to_owned())
}

/// Today's date, UTC (`date -u +%F` where available).
fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%F"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

//! Builds `c/llama2_omp.c` (llama2.c's forward pass, the OpenMP peer) and
//! `c/epcc_omp.c` (the OpenMP constructs of the peers suite) with
//! `$CC` (default `cc`) `-Ofast -march=native -fopenmp`, as llama2.c's own
//! Makefile does for its OpenMP build. When there is no compiler, no
//! OpenMP, or the build is a cross build, the peer is left out: the crate
//! then has `cfg(not(pool_openmp))` and `openmp::status()` says why.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// llama2.c's forward pass, and the EPCC-style constructs of the peers suite.
const SOURCES: [&str; 2] = ["c/llama2_omp.c", "c/epcc_omp.c"];

fn main() {
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
    }
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rustc-check-cfg=cfg(pool_openmp)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    match build(&out) {
        Ok(()) => {
            println!("cargo:rustc-link-search=native={}", out.display());
            println!("cargo:rustc-link-lib=static=pool_omp");
            println!("cargo:rustc-link-lib=dylib=gomp");
            println!("cargo:rustc-cfg=pool_openmp");
            println!("cargo:rustc-env=POOL_OPENMP_STATUS=built");
        }
        Err(reason) => {
            println!("cargo:warning=OpenMP peer left out: {reason}");
            println!("cargo:rustc-env=POOL_OPENMP_STATUS={reason}");
        }
    }
}

fn build(out: &Path) -> Result<(), String> {
    let (target, host) = (
        env::var("TARGET").unwrap_or_default(),
        env::var("HOST").unwrap_or_default(),
    );
    if target != host {
        return Err(format!("a cross build ({host} -> {target})"));
    }
    if !target.contains("linux") {
        return Err(format!(
            "libgomp is only looked for on Linux (target {target})"
        ));
    }
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut objects = Vec::new();
    for source in SOURCES {
        let stem = Path::new(source).file_stem().expect("a file name");
        let object = out.join(stem).with_extension("o");
        run(Command::new(&cc)
            .args([
                "-Ofast",
                "-march=native",
                "-fopenmp",
                "-fPIC",
                "-c",
                source,
                "-o",
            ])
            .arg(&object))
        .map_err(|e| format!("`{cc} -fopenmp` failed on {source}: {e}"))?;
        objects.push(object);
    }
    // Links libgomp now, so a missing library is found here, not at link.
    let probe = out.join("probe");
    run(Command::new(&cc)
        .args(["-fopenmp", "-shared", "-o"])
        .arg(&probe)
        .args(&objects))
    .map_err(|e| format!("linking with libgomp failed: {e}"))?;
    let library = out.join("libpool_omp.a");
    let _ = std::fs::remove_file(&library);
    run(Command::new(env::var("AR").unwrap_or_else(|_| "ar".into()))
        .arg("crs")
        .arg(&library)
        .args(&objects))
    .map_err(|e| format!("ar failed: {e}"))
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(stderr.lines().next().unwrap_or("no message").to_string())
    }
}

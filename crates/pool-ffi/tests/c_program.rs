//! Builds `tests/c/pool_test.c` against the static library and the
//! generated header with the system C compiler, runs it, and checks every
//! call it exercises.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn target_dir() -> PathBuf {
    // tests run from target/<profile>/deps/<name>-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Builds the static library afresh (a test run builds only the rlib, so a
/// `libpool_ffi.a` lying in target/ may be stale or missing), in a target
/// directory of its own so this nested cargo never waits on the outer one.
fn build_static_library() -> PathBuf {
    let target = target_dir().join("ffi-c-test");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "pool-ffi",
            "--lib",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap_or_else(|e| panic!("running `{cargo} build -p pool-ffi`: {e}"));
    assert!(status.success(), "`cargo build -p pool-ffi` failed");
    target.join("debug/libpool_ffi.a")
}

#[test]
fn the_c_test_program_exercises_every_call() {
    testkit::watchdog("c_program", Duration::from_secs(600), |stage| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        stage.set("building libpool_ffi.a");
        let lib = build_static_library();
        assert!(
            lib.exists(),
            "{} not built (crate-type staticlib)",
            lib.display()
        );
        let exe = target_dir().join("pool_ffi_c_test");
        stage.set("compiling the C program");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let status = Command::new(&cc)
            .arg("-std=c11")
            .arg("-Wall")
            .arg("-Werror")
            .arg("-I")
            .arg(crate_dir.join("include"))
            .arg(crate_dir.join("tests/c/pool_test.c"))
            .arg(&lib)
            .args(["-lpthread", "-ldl", "-lm", "-o"])
            .arg(&exe)
            .status()
            .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e}"));
        assert!(status.success(), "the C program did not compile");
        stage.set("running the C program");
        let out = Command::new(&exe)
            .env("CMF_POOL_SPIN", "fast")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "C test failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("all passed"), "{stdout}");
        // A C program installs no tracing subscriber or log logger: the bad
        // value is one stderr line, however many pools read it.
        let lines = stderr
            .lines()
            .filter(|l| l.contains("CMF_POOL_SPIN"))
            .count();
        assert_eq!(lines, 1, "one stderr line per bad variable:\n{stderr}");
    });
}

/// The shared library, linked as the README says (`-L`, `-lpool_ffi` and
/// an rpath), runs without `LD_LIBRARY_PATH`.
#[test]
#[cfg(target_os = "linux")]
fn the_c_program_links_against_the_shared_library_with_an_rpath() {
    testkit::watchdog("c_program_shared", Duration::from_secs(600), |stage| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        stage.set("building libpool_ffi.so");
        let lib_dir = build_static_library()
            .parent()
            .expect("the library's directory")
            .to_path_buf();
        assert!(lib_dir.join("libpool_ffi.so").exists(), "crate-type cdylib");
        let exe = target_dir().join("pool_ffi_c_test_shared");
        stage.set("compiling the C program against the shared library");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let status = Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Werror", "-I"])
            .arg(crate_dir.join("include"))
            .arg(crate_dir.join("tests/c/pool_test.c"))
            .arg(format!("-L{}", lib_dir.display()))
            .arg("-lpool_ffi")
            .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
            .arg("-o")
            .arg(&exe)
            .status()
            .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e}"));
        assert!(
            status.success(),
            "the C program did not link against the .so"
        );
        stage.set("running it");
        let out = Command::new(&exe)
            .env_remove("LD_LIBRARY_PATH")
            .env("CMF_POOL_SPIN", "fast")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("all passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

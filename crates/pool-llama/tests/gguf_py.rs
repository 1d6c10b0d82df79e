//! Files written by llama.cpp's own Python package (`gguf`, gguf-py): the
//! same models the other tests write with testkit's writer, laid out by
//! gguf-py instead, decode to the independent reference's tokens; and
//! Q8_0 tensors quantized by gguf-py itself decode to the reference over
//! gguf-py's dequantized values. Runs where `python3` can import `gguf`
//! and `numpy` (`pip install gguf`), and says so where it cannot.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{reference_generate, temp_path, Spec, TestModel};
use pool_llama::Model;
use pool_matvec::{Serial, WeightType};
use serde_json::{json, Value};
use testkit::gguf::Meta;

const STEPS: usize = 5;

/// `None` when gguf-py can be run here, else why not.
fn gguf_py_missing() -> Option<String> {
    match Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "python3 cannot import gguf and numpy ({}); `pip install gguf` to run this test",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Err(err) => Some(format!("no python3 ({err})")),
    }
}

/// Dumps `test`'s metadata and tensors for the script, runs it, and
/// returns the GGUF file gguf-py wrote. `quantize`: tensors gguf-py
/// quantizes to Q8_0 itself (given as F32).
fn written_by_gguf_py(test: &TestModel, name: &str, quantize: &[String]) -> PathBuf {
    let dir = temp_path(&format!("gguf-py-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let writer = test.writer();
    let metadata: Vec<Value> = writer
        .metadata
        .iter()
        .map(|(key, meta)| {
            let (kind, value) = match meta {
                Meta::U8(v) => ("u8", json!(v)),
                Meta::U32(v) => ("u32", json!(v)),
                Meta::I32(v) => ("i32", json!(v)),
                Meta::F32(v) => ("f32", json!(v)),
                Meta::Bool(v) => ("bool", json!(v)),
                Meta::Str(v) => ("str", json!(v)),
                Meta::U64(v) => ("u64", json!(v)),
                Meta::Strings(v) => ("strs", json!(v)),
                Meta::F32s(v) => ("f32s", json!(v)),
                Meta::I32s(v) => ("i32s", json!(v)),
            };
            json!({"key": key, "type": kind, "value": value})
        })
        .collect();
    let tensors: Vec<Value> = writer
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let file = format!("t{i}.bin");
            std::fs::write(dir.join(&file), &t.data).unwrap();
            json!({"name": t.name, "dims": t.dims, "ggml_type": t.ggml_type, "file": file})
        })
        .collect();
    let manifest = dir.join("manifest.json");
    let body = json!({"metadata": metadata, "tensors": tensors, "quantize": quantize});
    std::fs::write(&manifest, body.to_string()).unwrap();
    let out = dir.join("model.gguf");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/write_gguf.py");
    let run = Command::new("python3")
        .arg(&script)
        .arg(&manifest)
        .arg(&out)
        .output()
        .expect("run python3");
    assert!(
        run.status.success(),
        "gguf-py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

#[test]
fn files_laid_out_by_gguf_py_decode_to_the_reference_tokens() {
    if let Some(reason) = gguf_py_missing() {
        eprintln!("skipped: {reason}");
        return;
    }
    use WeightType::*;
    let mut q4_k_m = Spec::all(Q4_K);
    q4_k_m.down = Q6_K;
    q4_k_m.output = Some(Q6_K);
    let specs = [
        ("f32", Spec::all(F32)),
        ("f16", Spec::all(F16)),
        ("q8_0", Spec::all(Q8_0)),
        ("q4_0", Spec::all(Q4_0)),
        ("q4_k_m", q4_k_m),
        ("q6_k", Spec::all(Q6_K)),
    ];
    for (name, spec) in specs {
        let test = TestModel::random(&spec, 41);
        let path = written_by_gguf_py(&test, name, &[]);
        let model = Model::open(&path).unwrap_or_else(|err| panic!("{name}: {err}"));
        let (expected, _) = reference_generate(&test, STEPS);
        assert_eq!(
            model.generate(&Serial, STEPS, |_, _| {}),
            expected,
            "{name}"
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}

#[test]
fn q8_0_quantized_by_gguf_py_decodes_to_the_reference_over_its_values() {
    if let Some(reason) = gguf_py_missing() {
        eprintln!("skipped: {reason}");
        return;
    }
    let mut test = TestModel::random(&Spec::all(WeightType::F32), 43);
    let writer = test.writer();
    let matrices: Vec<String> = writer
        .tensors
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| t.name.clone())
        .collect();
    let path = written_by_gguf_py(&test, "quantized", &matrices);
    // The reference over gguf-py's own dequantized values, read as Q8_0.
    let back = |name: &str| -> Vec<f32> {
        let file = format!("{}.{name}.dequantized.f32", path.display());
        std::fs::read(&file)
            .unwrap_or_else(|err| panic!("{file}: {err}"))
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let requantize = |m: &mut common::Matrix, name: &str| {
        m.ty = WeightType::Q8_0;
        m.values = back(name);
    };
    requantize(&mut test.embedding, "token_embd.weight");
    for (i, l) in test.layers.iter_mut().enumerate() {
        for (m, part) in [
            (&mut l.q, "attn_q"),
            (&mut l.k, "attn_k"),
            (&mut l.v, "attn_v"),
            (&mut l.o, "attn_output"),
            (&mut l.gate, "ffn_gate"),
            (&mut l.up, "ffn_up"),
            (&mut l.down, "ffn_down"),
        ] {
            requantize(m, &format!("blk.{i}.{part}.weight"));
        }
    }
    if let Some(out) = test.output.as_mut() {
        requantize(out, "output.weight");
    }
    let model = Model::open(&path).unwrap();
    let types = model.tensor_types();
    assert!(
        types
            .iter()
            .any(|(ty, n)| *ty == WeightType::Q8_0 && *n > 0),
        "{types:?}"
    );
    let (expected, _) = reference_generate(&test, STEPS);
    assert_eq!(model.generate(&Serial, STEPS, |_, _| {}), expected);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// The files llama.cpp's own tools made (`scripts/llama-cpp.sh models`:
/// llama2.c's stories checkpoints converted by
/// `llama-convert-llama2c-to-ggml`, then `llama-quantize`d to Q8_0, Q4_0
/// and Q4_K_M): each loads, names its tensor types, and decodes the same
/// text on every executor. Runs where those files exist
/// (`POOL_LLAMA_CPP_DIR`, else `target/llama.cpp`), and says so where not.
#[test]
fn files_made_by_llama_cpps_tools_load_and_decode_alike_on_every_executor() {
    let dir = std::env::var_os("POOL_LLAMA_CPP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/llama.cpp"))
        .join("models");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == "gguf")
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("stories15M"))
                })
                .collect()
        })
        .unwrap_or_default();
    if files.is_empty() {
        eprintln!(
            "skipped: no llama.cpp-made GGUF files in {} (scripts/llama-cpp.sh models makes them)",
            dir.display()
        );
        return;
    }
    let pool = pool_core::Pool::new(1);
    let mut decoded = 0;
    for file in files {
        let model = match Model::open(&file) {
            Ok(model) => model,
            // llama-quantize falls back to other types (Q5_0, Q5_1, ...)
            // for rows a k-quant block does not divide (stories15M's 288):
            // an error naming the type, never a wrong decode.
            Err(err) if err.to_string().contains("which has no kernel here") => {
                eprintln!("{}: {err}", file.display());
                continue;
            }
            Err(err) => panic!("{}: {err}", file.display()),
        };
        decoded += 1;
        assert!(!model.tensor_types().is_empty(), "{}", file.display());
        let serial = model.generate(&Serial, 8, |_, _| {});
        assert_eq!(serial.len(), 8);
        assert_eq!(
            model.generate(&pool, 8, |_, _| {}),
            serial,
            "{}",
            file.display()
        );
    }
    assert!(decoded > 0, "no llama.cpp-made file decoded");
}

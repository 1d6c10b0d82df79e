"""Writes a GGUF file with the `gguf` Python package (llama.cpp's gguf-py)
from a manifest the Rust test dumps: metadata as typed JSON values, each
tensor's bytes in its own file, already in its ggml type's layout.

Usage: python3 write_gguf.py MANIFEST.json OUT.gguf [--quantize-q8_0]

With --quantize-q8_0, tensors given as F32 whose name says `q8_0` in the
manifest's `quantize` list are quantized by gguf-py itself
(gguf.quants.quantize) instead, and their dequantized values are written
beside OUT.gguf as NAME.dequantized.f32 for the reference decoder.
"""
import json
import os
import sys

import numpy as np
import gguf


def main() -> None:
    manifest_path, out_path = sys.argv[1], sys.argv[2]
    with open(manifest_path) as f:
        manifest = json.load(f)
    base = os.path.dirname(manifest_path)
    meta = manifest["metadata"]
    arch = next(m["value"] for m in meta if m["key"] == "general.architecture")
    writer = gguf.GGUFWriter(out_path, arch)
    for m in meta:
        key, kind, value = m["key"], m["type"], m["value"]
        if key == "general.architecture":
            continue  # GGUFWriter writes it
        if kind == "u8":
            writer.add_uint8(key, value)
        elif kind == "u32":
            writer.add_uint32(key, value)
        elif kind == "i32":
            writer.add_int32(key, value)
        elif kind == "u64":
            writer.add_uint64(key, value)
        elif kind == "f32":
            writer.add_float32(key, value)
        elif kind == "bool":
            writer.add_bool(key, value)
        elif kind == "str":
            writer.add_string(key, value)
        elif kind == "strs":
            writer.add_array(key, value)
        elif kind == "f32s":
            writer.add_array(key, [float(v) for v in value])
        elif kind == "i32s":
            writer.add_array(key, [int(v) for v in value])
        else:
            raise SystemExit(f"unknown metadata type {kind} for {key}")
    quantize = set(manifest.get("quantize", []))
    for t in manifest["tensors"]:
        data = open(os.path.join(base, t["file"]), "rb").read()
        dims = t["dims"]  # GGUF order: row length first
        shape = list(reversed(dims))  # numpy order
        qtype = gguf.GGMLQuantizationType(t["ggml_type"])
        if t["name"] in quantize:
            values = np.frombuffer(data, dtype=np.float32).reshape(shape)
            quantized = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(t["name"], quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            back = gguf.quants.dequantize(quantized, gguf.GGMLQuantizationType.Q8_0)
            back.astype(np.float32).tofile(out_path + "." + t["name"] + ".dequantized.f32")
        elif qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(t["name"], np.frombuffer(data, dtype=np.float32).reshape(shape))
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(t["name"], np.frombuffer(data, dtype=np.float16).reshape(shape))
        else:
            rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            raw = np.frombuffer(data, dtype=np.uint8).reshape(rows, -1) if len(shape) > 1 else np.frombuffer(data, dtype=np.uint8)
            writer.add_tensor(t["name"], raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()

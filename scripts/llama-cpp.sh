#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench`, `llama-quantize` and
# `llama-convert-llama2c-to-ggml` once, into target/llama.cpp/ (with
# `llama2c-run`: llama2.c's forward pass as a program), from the
# source that ships inside the `llama-cpp-python` source distribution on
# PyPI (vendor/llama.cpp), with cmake from Debian's packages. Then, with
# `models`, writes the GGUF files the benchmarks decode: random-weight
# stories15M and stories110M checkpoints (from `pool random-checkpoint`),
# converted to GGUF F32 by llama.cpp's own converter and quantized by
# `llama-quantize` to Q8_0, Q4_0 and Q4_K_M.
#
#   scripts/llama-cpp.sh          build the tools (skipped if built)
#   scripts/llama-cpp.sh models   build if needed, then the GGUF files
#
# `pool bench --llama-cpp` finds the tools and files here and runs both
# programs, interleaved, on the same files; without them it says to run
# this script. Not part of CI: the build takes ~10-15 min on 2 cores.
# Native build (-march=native, GGML_NATIVE): llama.cpp at its best on
# this CPU, as a user building it here would get it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/target/llama.cpp"
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
mkdir -p "$out"

build_tools() {
    if [ -x "$out/bin/llama-bench" ] && [ -x "$out/bin/llama-quantize" ] \
        && [ -x "$out/bin/llama-convert-llama2c-to-ggml" ]; then
        echo "llama.cpp tools already built in $out/bin"
        return
    fi
    if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q cmake g++
    fi
    local sdist="$out/llama_cpp_python-$version.tar.gz"
    if [ ! -f "$sdist" ]; then
        # The sdist's address and digest from PyPI's simple index (PEP
        # 503: every file's link carries its sha256; some mirrors and
        # proxies serve the simple index but not the JSON API).
        read -r url sha < <(curl -sSfL "https://pypi.org/simple/llama-cpp-python/" |
            python3 -c '
import re, sys, urllib.parse
index = "https://pypi.org/simple/llama-cpp-python/"
name = "llama_cpp_python-'"$version"'.tar.gz"
for href in re.findall(r"href=\"([^\"]+)\"", sys.stdin.read()):
    path, _, fragment = href.partition("#sha256=")
    if path.endswith("/" + name) and fragment:
        print(urllib.parse.urljoin(index, path), fragment)
        break
') || true
        if [ -z "${url:-}" ]; then
            echo "llama-cpp-python $version: no sdist in PyPI's simple index" >&2
            exit 1
        fi
        echo "downloading $url"
        curl -sSfL -o "$sdist.part" "$url"
        echo "$sha  $sdist.part" | sha256sum -c -
        mv "$sdist.part" "$sdist"
    fi
    rm -rf "$out/src"
    mkdir -p "$out/src"
    tar xzf "$sdist" -C "$out/src" --strip-components=3 \
        "llama_cpp_python-$version/vendor/llama.cpp"
    cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF
    cmake --build "$out/build" -j "$(nproc)" \
        --target llama-bench llama-quantize llama-convert-llama2c-to-ggml
    mkdir -p "$out/bin"
    for tool in llama-bench llama-quantize llama-convert-llama2c-to-ggml; do
        cp "$out/build/bin/$tool" "$out/bin/"
    done
    echo "built: $(ls "$out/bin")"
}

# llama2.c's forward pass as a program of its own (the f32 peer).
build_runner() {
    [ -x "$out/bin/llama2c-run" ] && return
    mkdir -p "$out/bin"
    cc -Ofast -march=native -fopenmp -o "$out/bin/llama2c-run" \
        "$root/benches/c/llama2_run.c" "$root/benches/c/llama2_omp.c" -lm
    echo "built: $out/bin/llama2c-run"
}

make_models() {
    local models="$out/models"
    mkdir -p "$models"
    cargo build --release -q -p pool-cli
    local pool="$root/target/release/pool"
    for shape in stories15M stories110M; do
        local bin="$models/$shape.bin"
        [ -f "$bin" ] || "$pool" random-checkpoint --shape "$shape" "$bin" --seed 42 \
            --tokenizer "$models/tokenizer.bin"
        local f32="$models/$shape-f32.gguf"
        if [ ! -f "$f32" ]; then
            "$out/bin/llama-convert-llama2c-to-ggml" \
                --copy-vocab-from-model "$models/tokenizer.bin" \
                --llama2c-model "$bin" --llama2c-output-model "$f32"
        fi
        for type in Q8_0 Q4_0 Q4_K_M; do
            local gguf="$models/$shape-$type.gguf"
            [ -f "$gguf" ] || "$out/bin/llama-quantize" "$f32" "$gguf" "$type" 2
        done
    done
    ls -la "$models"
}

build_tools
build_runner
if [ "${1:-}" = models ]; then
    make_models
fi

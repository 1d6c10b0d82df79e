#!/bin/sh
# A bias-cancelled A/B of two versions of the decoder, in one process.
#
#   scripts/ab-decoder.sh BASE_REV MODEL [THREADS] [SEQUENCES] [STEPS]
#
# The variant is the working tree's crates/pool-llama/src, the base is
# BASE_REV's; both are built (as crates llama-a and llama-b, against the
# working tree's pool-core and pool-matvec) into one harness that opens
# MODEL with each, then runs SEQUENCES sequences of STEPS tokens on one
# pool of THREADS threads, the two decoders alternating token by token,
# and prints the median of the per-token time ratios. On a shared host
# two builds run as separate processes move by more than the few percent
# a decoder change is worth; token by token in one process they share
# the host's every mood. One bias stays: the copy opened second (b)
# ran about 2 % slower than the first on the Intel host of 2026-12-04 (two
# identical copies read 0.98x). So the harness runs twice with the roles
# swapped and prints the geometric mean of the two directions, which
# cancels it, and the bias itself.
#
# It also counts the tokens whose logits differ in any bit between the
# two: 0 for a change that keeps the arithmetic (a quantized model's
# activations are rounded to 8 bits before each matvec, so a change of an
# ulp or two upstream may show no difference there either). Nothing is written
# outside target/ab-decoder. Not run in CI (minutes, and a model file).
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 BASE_REV MODEL [THREADS] [SEQUENCES] [STEPS]" >&2
    exit 2
fi
base=$1
model=$(realpath "$2")
threads=${3:-2}
sequences=${4:-16}
steps=${5:-64}
root=$(git rev-parse --show-toplevel)
work=$root/target/ab-decoder
rm -rf "$work"
mkdir -p "$work/base" "$work/variant" "$work/a" "$work/b" "$work/harness/src"
git -C "$root" archive "$base" crates/pool-llama/src | tar -x -C "$work/base" --strip-components=2
cp -r "$root/crates/pool-llama/src" "$work/variant/src"

for side in a b; do
    cat > "$work/$side/Cargo.toml" <<EOF
[package]
name = "llama-$side"
version = "0.0.0"
edition = "2021"
publish = false

[lib]
path = "src/lib.rs"

[dependencies]
pool-core = { path = "$root/crates/pool-core" }
pool-matvec = { path = "$root/crates/pool-matvec" }
pool-topo = { path = "$root/crates/pool-topo" }
half = "2"
tracing = { version = "0.1", features = ["log"] }
EOF
done

cat > "$work/harness/Cargo.toml" <<EOF
[package]
name = "ab-decoder"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
llama-a = { path = "../a" }
llama-b = { path = "../b" }
pool-core = { path = "$root/crates/pool-core" }
pool-matvec = { path = "$root/crates/pool-matvec" }

# Not a member of the project's workspace.
[workspace]
EOF
cp "$root/Cargo.lock" "$work/harness/Cargo.lock"

cat > "$work/harness/src/main.rs" <<'EOF'
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

fn main() {
    let arg = |i: usize| std::env::args().nth(i).expect("model threads sequences steps");
    let (path, threads, sequences, steps) = (
        arg(1),
        arg(2).parse::<usize>().expect("threads"),
        arg(3).parse::<usize>().expect("sequences"),
        arg(4).parse::<usize>().expect("steps"),
    );
    let a = llama_a::Model::open(&path).expect("model for a");
    let b = llama_b::Model::open(&path).expect("model for b");
    let pool = pool_core::Pool::new(threads.max(1) - 1);
    let exec: &dyn pool_matvec::RowParallel = &pool;
    let (mut ratios, mut differing, mut tokens) = (Vec::new(), 0, 0);
    for sequence in 0..sequences {
        let (mut sa, mut sb) = (a.new_state(steps), b.new_state(steps));
        let (mut token_a, mut token_b) = (1u32, 1u32);
        for pos in 0..steps.min(sa.positions()) {
            let mut run_a = || {
                let t = Instant::now();
                let logits = a.forward(exec, &mut sa, token_a, pos).to_vec();
                (t.elapsed().as_secs_f64(), logits)
            };
            let mut run_b = || {
                let t = Instant::now();
                let logits = b.forward(exec, &mut sb, token_b, pos).to_vec();
                (t.elapsed().as_secs_f64(), logits)
            };
            // Each goes first every other token.
            let ((ta, la), (tb, lb)) = if (pos + sequence) % 2 == 0 {
                let first = run_a();
                (first, run_b())
            } else {
                let first = run_b();
                (run_a(), first)
            };
            tokens += 1;
            if la.iter().zip(&lb).any(|(x, y)| x.to_bits() != y.to_bits()) {
                differing += 1;
            }
            (token_a, token_b) = (argmax(&la), argmax(&lb));
            // The first token of a sequence warms the cache for the rest.
            if pos > 0 {
                ratios.push(ta / tb);
            }
        }
    }
    println!("{} {differing} {tokens}", median(ratios));
}
EOF

cd "$work/harness"
run() {
    rm -rf "$work/a/src" "$work/b/src"
    cp -r "$work/$1/src" "$work/a/src"
    cp -r "$work/$2/src" "$work/b/src"
    cargo build --release --quiet
    ./target/release/ab-decoder "$model" "$threads" "$sequences" "$steps"
}
# Each line: the median of (a's time / b's time) over every token but each
# sequence's first, then the tokens whose logits differ, of all tokens.
forward=$(run base variant)
backward=$(run variant base)
echo "base as a, variant as b: $forward"
echo "variant as a, base as b: $backward"
echo "$forward $backward" | awk '{
    speedup = sqrt($1 / $4); bias = sqrt($1 * $4);
    printf "the variant is %.4fx the base (1.0 = level; the bias of being opened second %.4f); %d of %d tokens with differing logits\n", speedup, bias, $2, $3
}'

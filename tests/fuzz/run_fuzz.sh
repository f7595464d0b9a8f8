#!/usr/bin/env bash
# Builds the .expr front-end fuzzer (libFuzzer, ASan, UBSan) and runs it on one core, seeded
# from examples/*.expr. Usage: tests/fuzz/run_fuzz.sh [RUNS] (default 1000000).
# Work files (binary, grown corpus, crash artifacts) go to $FUZZ_DIR (default build-fuzz/).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-1000000}
dir=${FUZZ_DIR:-build-fuzz}
mkdir -p "$dir/corpus"

clang++-19 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. tests/fuzz/fuzz_expr.cpp ir/*.cpp frontends/expr/*.cpp -o "$dir/fuzz_expr"

cp examples/*.expr "$dir/corpus/"
"$dir/fuzz_expr" -runs="$runs" -dict=tests/fuzz/expr.dict -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus"

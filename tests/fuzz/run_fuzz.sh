#!/usr/bin/env bash
# Builds one fuzzer (libFuzzer, ASan with LeakSanitizer, UBSan; clang-19) and runs it on one core,
# seeded from its corpus, with its dictionary. Usage: tests/fuzz/run_fuzz.sh NAME [RUNS]
#   expr    the .expr front end (fuzz_expr.cpp), seeded from examples/*.expr
#   npy     the .npy reader (fuzz_npy.cpp), seeded from tests/fuzz/corpus/npy/
#   bundle  the AOT bundle loader (fuzz_bundle.cpp), seeded from tests/fuzz/corpus/bundle/
# RUNS defaults to 1000000. Work files (objects, binary, grown corpus, crash artifacts) go to
# $FUZZ_DIR (default build-fuzz/); sources are compiled through ccache when it is installed.
# A crash, hang (-timeout), leak or sanitizer report stops the run with a nonzero status and
# leaves the input as $FUZZ_DIR/NAME-crash-* (or leak-, timeout-, oom-).
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: tests/fuzz/run_fuzz.sh expr|npy|bundle [RUNS]}
runs=${2:-1000000}
dir=${FUZZ_DIR:-build-fuzz}

case "$name" in
  expr) sources=(ir/*.cpp frontends/expr/*.cpp passes/autodiff.cpp); max_len=4096 ;;  # grad(...) lowers through autodiff
  npy) sources=(ir/*.cpp runtime/npy.cpp); max_len=4096 ;;
  bundle) sources=(ir/*.cpp runtime/*.cpp); max_len=8192 ;;
  *) echo "run_fuzz.sh: unknown fuzzer '$name' (expr, npy or bundle)" >&2; exit 2 ;;
esac

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -I.)
launcher=()
command -v ccache >/dev/null && launcher=(ccache)
objects=()
for src in "${sources[@]}"; do
  obj="$dir/obj-$name/${src%.cpp}.o"  # one tree per fuzzer: two may build at once
  mkdir -p "$(dirname "$obj")"
  "${launcher[@]}" clang++-19 "${flags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  objects+=("$obj")
done
clang++-19 "${flags[@]}" -fsanitize=fuzzer tests/fuzz/fuzz_$name.cpp "${objects[@]}" -ldl -o "$dir/fuzz_$name"

corpus="$dir/corpus-$name"
mkdir -p "$corpus"
seeds=tests/fuzz/corpus/$name
[ "$name" = expr ] && seeds=examples
"$dir/fuzz_$name" -runs="$runs" -dict="tests/fuzz/$name.dict" -max_len=$max_len -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$dir/$name-" \
  "$corpus" "$seeds"

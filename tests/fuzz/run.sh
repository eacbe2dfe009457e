#!/usr/bin/env bash
# run.sh CLANGXX CUDA_ROOT BUILD_DIR [RUNS]: builds the .npy fuzz target with CLANGXX into BUILD_DIR
# (tests/fuzz/CMakeLists.txt) and runs it RUNS inputs (default 200000) from the seed corpus
# tests/data/npy_corpus; new inputs go to BUILD_DIR/corpus, never into the source tree. Any
# finding fails (libFuzzer exits non-zero and writes the input as BUILD_DIR/crash-* or oom-*).
set -euo pipefail
clangxx=$1 cuda_root=$2 build=$3 runs=${4:-200000}
here=$(cd "$(dirname "$0")" && pwd)
cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER="$clangxx" -DCUDAToolkit_ROOT="$cuda_root" >/dev/null
cmake --build "$build" >/dev/null
mkdir -p "$build/corpus"
cd "$build"
./fuzz_npy -runs="$runs" -rss_limit_mb=512 -malloc_limit_mb=256 corpus "$here/../data/npy_corpus" 2>&1 | tail -n 5

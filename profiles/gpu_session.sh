#!/usr/bin/env bash
# profiles/gpu_session.sh: everything one GPU session needs, in one call: configure + build for
# sm_90a, the whole test suite (cpu, gpu, sanitize), run_all, profiles/bench.py (every step's sweep
# and the PyTorch SDPA baselines), profiles/capture.sh all (the Nsight Compute panel of every step
# on its shapes of profiles/ncu_shapes.txt), and the SASS of every kernel.
#
#   OUT=/some/dir bash profiles/gpu_session.sh     # then: python3 profiles/results.py import /some/dir
#
# Writes at most 9 files, no folders, to $OUT: env.txt build.log ctest.log run_all.csv bench.csv inputs_ab.csv
# run.log profiles.tar.gz sass.txt.gz (and bench.csv.partial instead of bench.csv when the call's time runs out
# during the bench stage: the rows measured so far, profiles/bench.py). profiles.tar.gz holds what belongs in profiles/<gpu>/ besides
# bench.csv: NN_name/{metrics.csv,speed_of_light.txt,ncu_raw.csv} from capture.sh and bench.png from
# bench.py; `results.py import` unpacks it there.
#
# STAGES picks the stages (default: all of "build ctest run_all bench gqa candidates splits reduce floor stream capture sass";
# "inputs", profiles/inputs_ab.py into $OUT/inputs_ab.csv, and "decodeab", step 22's variants, only when
# named), e.g. to split
# a session over two calls that share build/: STAGES="build ctest run_all sass", then STAGES="bench
# capture" (each into its own OUT; import both). ARCH (default 90a), CMAKE_ARGS (more configure flags, e.g.
# "-DFA_TEST_CHAIN=OFF": docs/conventions.md), CTEST_JOBS (default 4) and
# CTEST_ARGS (e.g. "-L gpu") tune the build and the tests; BENCH_ARGS (e.g. "--steps 07,08 --no-sdpa
# --merge profiles/h100/bench.csv") and CAPTURE_STEPS (e.g. "07 08") re-measure a few steps.
# STEPS="09 10 11" is the short form of both: bench.py --steps 09,10,11 --merge profiles/<gpu>/bench.csv (and
# --inputs INPUTS where INPUTS is set: uniform, randn or both; randn rows are kept apart from uniform ones)
# (SDPA re-measured in the same run: its forward rows where the steps are forward-only, its backward
# rows where they all have a backward, its decode rows for STEPS="22", all of them otherwise; every other row
# of the committed bench.csv kept, so $OUT/bench.csv is complete) and capture.sh 09 10 11; the summary
# then ends with the tensor-core steps' table against SDPA (results.py show). E.g. one session of about
# 9 minutes: OUT=DIR STEPS="09 10 11" STAGES="build ctest bench capture sass" bash profiles/gpu_session.sh
# A failing stage is reported and the others still run; the exit status is 1 if any failed.
set -euo pipefail
mkdir -p "${OUT:=$PWD/gpu_out}"
OUT=$(cd "$OUT" && pwd)
STAGES=" ${STAGES:-build ctest run_all bench gqa candidates splits reduce floor stream capture sass} "
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:/usr/local/cuda/bin"  # nvcc, ncu, cuobjdump where the image has them only there
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()

# stage NAME FUNCTION: runs FUNCTION if NAME is in $STAGES, reports its time and whether it failed.
stage() {
  [[ $STAGES == *" $1 "* ]] || return 0
  local t0=$SECONDS rc=0
  "$2" || rc=$?
  if ((rc)); then
    echo "== $1: FAILED (exit $rc, $((SECONDS - t0)) s)"
    failed+=("$1")
  else
    echo "== $1: ok ($((SECONDS - t0)) s)"
  fi
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | head -1
  nvcc --version | tail -1
  ncu --version | tail -1
  python3 -c 'import torch; print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")' 2> /dev/null ||
    echo "PyTorch: not installed"
} > "$OUT/env.txt" 2>&1 || true

# pytest for python/tests (python.gpu) where the machine has PyTorch but no pytest: the copy that
# python/vendor_pytest.sh leaves in .whl/pydeps (carry .whl), on the path before CMake looks for it.
[[ -d .whl/pydeps ]] && export PYTHONPATH=$PWD/.whl/pydeps${PYTHONPATH:+:$PYTHONPATH}

build() {
  # shellcheck disable=SC2086  # CMAKE_ARGS: several words
  if ! { cmake --preset default -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90a}" ${CMAKE_ARGS:-} &&
    cmake --build build -j "$(nproc)"; } \
    > "$OUT/build.log" 2>&1; then
    grep -B2 -A8 -E "error|Error" "$OUT/build.log" | head -80
    return 1
  fi
}
# shellcheck disable=SC2086  # CTEST_ARGS: several words
tests() { (cd build && ctest --output-on-failure -j "${CTEST_JOBS:-4}" ${CTEST_ARGS:-}) > "$OUT/ctest.log" 2>&1; }
run_all() { build/bin/run_all --csv > "$OUT/run_all.csv" 2>> "$OUT/run.log"; }
if [[ -n ${STEPS:-} ]]; then  # the short form: these steps re-measured into a complete bench.csv, and captured
  gpu=$(python3 profiles/fa_profiles.py slug "$(head -1 "$OUT/env.txt" | cut -d, -f1)")
  merge="" && [[ -f profiles/$gpu/bench.csv ]] && merge="--merge profiles/$gpu/bench.csv"
  BENCH_ARGS=${BENCH_ARGS:-"--steps $(tr -s ' ' ',' <<< "$STEPS" | sed 's/^,//; s/,$//') $merge${INPUTS:+ --inputs $INPUTS}"}
  CAPTURE_STEPS=${CAPTURE_STEPS:-$STEPS}
fi
# shellcheck disable=SC2086  # BENCH_ARGS, CAPTURE_STEPS: several words
bench() {  # every step's --sweep (--bwd) and the SDPA baselines; the plot goes into the tarball
  python3 profiles/bench.py --out "$OUT/bench.csv" --png "$work/profiles/bench.png" --no-render ${BENCH_ARGS:-} \
    >> "$OUT/run.log" 2>&1
}
# step 11's candidate instances, each pinned, side by side (profiles/candidates.py); into the tarball
candidates() { python3 profiles/candidates.py --out "$work/profiles/step11_candidates.csv" >> "$OUT/run.log" 2>&1; }
# step 22's split counts, each pinned, beside the heuristic's (profiles/decode_splits.py); into the tarball.
# SPLITS_ARGS replaces its shapes and counts, e.g. "--shapes 64:1:1024 --splits 1,2 --rows 16,32" (then into
# history/decode_splits_pinned.csv under the step's folder, so the doc's table of the rule stays as measured)
splits() {
  if [[ -n ${SPLITS_ARGS:-} ]]; then
    mkdir -p "$work/profiles/22_split_kv_decode/history"
    # shellcheck disable=SC2086  # SPLITS_ARGS: several words
    python3 profiles/decode_splits.py ${SPLITS_ARGS} --out "$work/profiles/22_split_kv_decode/history/decode_splits_pinned.csv" \
      >> "$OUT/run.log" 2>&1
  else
    python3 profiles/decode_splits.py --out "$work/profiles/decode_splits.csv" >> "$OUT/run.log" 2>&1
  fi
}
# the L2's rate for dQ's fp32 additions, per way of adding (profiles/microbench/dq_reduce.cu); into the tarball
reduce() {
  mkdir -p "$work/profiles"
  { build/bin/dq_reduce && build/bin/dq_reduce --dim 64 | tail -n +2; } > "$work/profiles/dq_reduce.csv" 2>> "$OUT/run.log"
}
# how fast one kernel reads each decode size (profiles/microbench/read_floor.cu); into the tarball
floor() { mkdir -p "$work/profiles" && build/bin/read_floor > "$work/profiles/read_floor.csv" 2>> "$OUT/run.log"; }
# step 22's copies without its math, at several ring depths and amounts of work per tile
# (profiles/microbench/decode_stream.cu, well under a minute); into the tarball
stream() { mkdir -p "$work/profiles" && build/bin/decode_stream > "$work/profiles/decode_stream.csv" 2>> "$OUT/run.log"; }
# grouped-query attention: the GQA sweeps of the forward steps and SDPA's (enable_gqa) in one run, merged
# into $OUT/bench.csv (after the bench stage) or into a copy of the committed bench.csv
gqa() {
  local gpu base
  gpu=$(python3 profiles/fa_profiles.py slug "$(head -1 "$OUT/env.txt" | cut -d, -f1)")
  base=$OUT/bench.csv && [[ -s $base ]] || base=profiles/$gpu/bench.csv
  python3 profiles/bench.py --steps 11,17,18,19 --gqa-only --merge "$base" --out "$OUT/bench.csv.gqa" --no-plot \
    --no-render >> "$OUT/run.log" 2>&1 && mv "$OUT/bench.csv.gqa" "$OUT/bench.csv"
}
# step 22's variants against each other on the decode shapes, interleaved rounds (profiles/knob_ab.py --decode,
# one arm per variant); into the tarball, only when named. DECODE_AB picks them (default: all five; commas or
# spaces), DECODE_KV the K/V heads (default "32 8 1"); DECODE_PAGED=N: step 23's instead, in pages of N keys
# (DECODE_AB then names step 23's variants)
decodeab() {
  local step=22_split_kv_decode paged=() arms=() v
  [[ -n ${DECODE_PAGED:-} ]] && step=23_paged_kv_decode paged=(--page-size "$DECODE_PAGED")
  DECODE_AB=${DECODE_AB:-one-launch two-launches rows32 unpacked}
  for v in ${DECODE_AB//,/ }; do arms+=(--arm "$v=build/bin/$step#$v"); done
  mkdir -p "$work/profiles/$step"
  # shellcheck disable=SC2086  # DECODE_KV: several numbers
  python3 profiles/knob_ab.py --experiment "$step variants" --decode --kv-heads ${DECODE_KV:-32 8 1} --rounds 2 \
    "${paged[@]}" "${arms[@]}" --out "$work/profiles/$step/variants_ab.csv" >> "$OUT/run.log" 2>&1
}
# uniform against randn inputs, with the SM clock and power per arm (profiles/inputs_ab.py, ~4 minutes)
inputs() { python3 profiles/inputs_ab.py --out "$OUT/inputs_ab.csv" >> "$OUT/run.log" 2>&1; }
# shellcheck disable=SC2086
capture() { bash profiles/capture.sh --no-build --out "$work/profiles" ${CAPTURE_STEPS:-all} >> "$OUT/run.log" 2>&1; }
sass() {
  for obj in $(find build -name 'kernel.cu.o' | sort); do
    echo "### $obj"
    cuobjdump -sass "$obj" | grep -vE '^\s*/\*[0-9a-f]{4}\*/\s*$'
  done 2>&1 | gzip > "$OUT/sass.txt.gz"
}

stage build build
if [[ " ${failed[*]-} " == *" build "* ]]; then exit 1; fi
stage ctest tests
stage run_all run_all
stage bench bench
stage gqa gqa
stage candidates candidates
stage splits splits
stage reduce reduce
stage floor floor
stage stream stream
stage inputs inputs
stage decodeab decodeab
stage capture capture
stage sass sass
if [[ -d $work/profiles ]] && [[ -n $(ls -A "$work/profiles") ]]; then
  tar -C "$work/profiles" -czf "$OUT/profiles.tar.gz" .
fi

echo "== summary"
[[ -f $OUT/ctest.log ]] && grep -E "tests passed|\(Failed\)|Not Run|\*\*\*Failed" "$OUT/ctest.log" | head -30
[[ -f $OUT/run.log ]] && grep -E "^(device|peaks)|FAIL|error|== capture.sh|does not know|PyTorch|matplotlib" "$OUT/run.log" |
  sort -u | head -30
[[ -s $OUT/run_all.csv ]] && python3 profiles/bench.py --show "$OUT/run_all.csv"
[[ -s $OUT/bench.csv ]] && echo "bench.csv rows per step:" &&
  python3 -c 'import csv, collections, sys; print(dict(collections.Counter(r["step"] for r in csv.DictReader(open(sys.argv[1])))))' "$OUT/bench.csv"
[[ -f $OUT/profiles.tar.gz ]] && echo "profiles.tar.gz:" && tar -tzf "$OUT/profiles.tar.gz" | grep -v '/$' | sort | head -40
ls -la "$OUT"
if [[ -s $OUT/bench.csv ]] && grep -qE '^(09|10|11)_' "$OUT/bench.csv"; then  # the short table, last
  echo "== the tensor-core forward steps against SDPA (from $OUT/bench.csv)"
  python3 profiles/results.py show results:tc_climb --bench "$OUT/bench.csv" | sed -n '1,/^$/p'
  python3 profiles/results.py show results:tc_target --bench "$OUT/bench.csv" | sed -n '1,/^\*/p' | grep -v '^\*'
fi
if ((${#failed[@]})); then
  echo "== failed stages: ${failed[*]}"
  exit 1
fi

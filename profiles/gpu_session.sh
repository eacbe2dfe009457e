#!/usr/bin/env bash
# profiles/gpu_session.sh: everything one GPU session needs, in one call: configure + build for
# sm_90a, the whole test suite (cpu, gpu, sanitize), run_all, and every step's --sweep, as CSV.
# Logs and CSVs go to $OUT (default ./gpu_out); a short summary is printed last.
#
#   bash profiles/gpu_session.sh            # then: python3 profiles/results.py <OUT>
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nvcc --version | tail -1; } \
  > "$OUT/env.txt" 2>&1
cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90a} > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -B2 -A8 -E "error" "$OUT/build.log" | head -80; exit 1; }

(cd build && ctest --output-on-failure -j "${CTEST_JOBS:-4}" > "$OUT/ctest.log" 2>&1)
test_rc=$?
build/bin/run_all --csv > "$OUT/run_all.csv" 2> "$OUT/run_all.log"
all_rc=$?
for exe in build/bin/[0-9][0-9]_*; do
  build/bin/$(basename "$exe") --sweep --csv > "$OUT/sweep_$(basename "$exe").csv" 2>> "$OUT/sweep.log" || all_rc=1
done

echo "== ctest (rc $test_rc)"
grep -E "tests passed|Failed|\(Skipped\)|\*\*\*" "$OUT/ctest.log" | head -40
echo "== run_all (rc $all_rc)"
grep -E "^(device|peaks)|check" "$OUT/run_all.log" | head -20
cut -d, -f1,3,4,5,6,7,11,12,13,14 "$OUT"/run_all.csv "$OUT"/sweep_*.csv | column -s, -t

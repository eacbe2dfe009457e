#!/usr/bin/env bash
# profiles/gpu_session.sh: everything one GPU session needs, in one call: configure + build for
# sm_90a, the whole test suite (cpu, gpu, sanitize), run_all and every step's --sweep as CSV,
# Nsight Compute counters for one launch of each step, and the SASS of every kernel.
#
#   OUT=/some/dir bash profiles/gpu_session.sh        # then: python3 profiles/results.py import /some/dir
#
# Writes 8 files to $OUT: env.txt build.log ctest.log run_all.csv sweep.csv run.log ncu.csv sass.txt
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
  ncu --version | tail -1
} > "$OUT/env.txt" 2>&1
{ cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90a} && cmake --build build -j "$(nproc)"; } \
  > "$OUT/build.log" 2>&1 || { grep -B2 -A8 -E "error|Error" "$OUT/build.log" | head -80; exit 1; }

(cd build && ctest --output-on-failure -j "${CTEST_JOBS:-4}" > "$OUT/ctest.log" 2>&1)
test_rc=$?

run_rc=0
build/bin/run_all --csv > "$OUT/run_all.csv" 2> "$OUT/run.log" || run_rc=$?
: > "$OUT/sweep.csv"
sweep() {  # sweep <exe> [flags]: append its --sweep rows (one CSV header in all)
  "$@" --sweep --csv 2>> "$OUT/run.log" | { [[ -s $OUT/sweep.csv ]] && tail -n +2 || cat; } >> "$OUT/sweep.csv"
}
for exe in build/bin/[0-9][0-9]_*; do
  echo "== $exe --sweep" >> "$OUT/run.log"
  sweep "$exe" || run_rc=1
  # Attention steps with a backward pass also sweep fwd + bwd (--device-info exits 2 without one),
  # unless their plain sweep did already (steps whose default problem has the backward: 07+).
  if "$exe" --help | grep -q -- '--bwd' && "$exe" --bwd --device-info > /dev/null 2>&1 &&
    ! grep -q "^$(basename "$exe"),.* bwd," "$OUT/sweep.csv"; then
    echo "== $exe --sweep --bwd" >> "$OUT/run.log"
    sweep "$exe" --bwd || run_rc=1
  fi
done

# One launch per (step, shape) under ncu; each block of CSV is preceded by "# <step> <problem>".
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
metrics+=,l1tex__t_sector_hit_rate.pct
: > "$OUT/ncu.csv"
while read -r step shape; do
  [[ -x build/bin/$step ]] || continue
  echo "# $step $shape" >> "$OUT/ncu.csv"
  ncu --clock-control none --profile-from-start off --csv --metrics "$metrics" \
    build/bin/$step --profile $shape >> "$OUT/ncu.csv" 2>> "$OUT/run.log"
done < profiles/ncu_shapes.txt

for obj in $(find build -name 'kernel.cu.o' | sort); do
  echo "### $obj"
  cuobjdump -sass "$obj" | grep -vE '^\s*/\*[0-9a-f]{4}\*/\s*$'
done > "$OUT/sass.txt" 2>&1

echo "== ctest (rc $test_rc)"
grep -E "tests passed|\(Failed\)|\(Skipped\)|Not Run|\*\*\*Failed" "$OUT/ctest.log" | head -30
echo "== run_all + sweeps (rc $run_rc)"
grep -E "^(device|peaks)|FAIL|error" "$OUT/run.log" | sort -u | head -12
python3 - "$OUT" <<'PY'
import csv, sys, os
for name in ("run_all.csv", "sweep.csv"):
    rows = list(csv.DictReader(open(os.path.join(sys.argv[1], name))))
    print(f"-- {name}")
    for r in rows:
        print(f"{r['step']:<22} {r['problem']:<26} {float(r['time_ms']):9.4f} ms {float(r['rate']):9.1f} {r['unit']:<7}"
              f" {float(r['pct_peak']):5.1f}% {r['peak']:<5} x{float(r['speedup_vs_prev']):5.2f} {r['check']}")
PY

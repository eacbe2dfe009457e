#!/usr/bin/env bash
# One device call (run with carry [".probe/ab3.tar.xz"], OUT set): regs' GPU tests and sanitizers, then base,
# table and regs interleaved on the shapes of ../ab_table.sh (profiles/knob_ab.py, 2 rounds), and ncu's stall reasons of each at
# batch 64, one K/V head, 16384 keys, pages of 16. About 6 minutes on an H200.
set -uo pipefail
t0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/ab3 && tar xJf .probe/ab3.tar.xz -C /tmp/ab3 && P=/tmp/ab3
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT"/gpu.txt
timeout 120 "$P"/test23_regs > "$OUT"/gtest23.txt 2>&1; echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT"/gtest23.txt | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 150 bash tests/sanitize.sh $tool attention "$P"/step23_regs > "$OUT"/san_$tool.txt 2>&1
  echo "$tool rc $?: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT"/san_$tool.txt | sort | uniq -c | tr '\n' ' ') at $((SECONDS-t0)) s"
done
# The arms interleaved by profiles/knob_ab.py (its CSV is what results.py's decode_variants_ab_table reads).
args=()
for shp in "64 1 131072 16" "64 1 16384 16" "64 1 1024 16" "8 1 131072 16" "1 1 131072 16" "1 1 65536 16" \
           "8 8 131072 16" "1 8 16384 16" "1 1 1024 16" "1 32 16384 16" "8 8 16384 1" "64 1 16384 1"; do
  read -r b kv sk pg <<< "$shp"
  args+=(--shape "--batch $b --heads 32 --kv-heads $kv --seq-q 1 --seq-k $sk --head-dim 128 --page-size $pg")
done
python3 profiles/knob_ab.py --experiment "23 offsets in registers" --rounds 2 --out "$OUT"/regs_ab.csv \
  --arm base="$P"/step23_base --arm table="$P"/step23_table --arm regs="$P"/step23_regs "${args[@]}" | tee "$OUT"/ab_summary.txt
echo "timed at $((SECONDS-t0)) s"
for v in base regs; do
  timeout 100 ncu --set full -k regex:decode_split -c 1 -o "$OUT"/ncu_$v "$P"/step23_$v --check --heads 32 --seq-q 1 \
    --head-dim 128 --batch 64 --kv-heads 1 --seq-k 16384 --page-size 16 > "$OUT"/ncu_$v.log 2>&1
  ncu --import "$OUT"/ncu_$v.ncu-rep --page details > "$OUT"/ncu_$v.txt 2>&1
  ncu --import "$OUT"/ncu_$v.ncu-rep --page raw --csv > "$OUT"/raw_$v.csv 2>/dev/null
  grep -E "Duration|Executed Instructions  |Issue Slots Busy" "$OUT"/ncu_$v.txt | sed "s/^/$v /"
done
rm -f "$OUT"/*.ncu-rep
echo "done at $((SECONDS-t0)) s"

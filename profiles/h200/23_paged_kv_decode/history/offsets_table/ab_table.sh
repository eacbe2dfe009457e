#!/usr/bin/env bash
# call 1: step 23 base (HEAD) against table (each row's pool offset found once per tile into shared memory)
set -uo pipefail
t0=$SECONDS
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p /tmp/tb && tar xJf .probe/tb.tar.xz -C /tmp/tb && P=/tmp/tb
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 120 $P/test23_table > $OUT/gtest23.txt 2>&1; echo "gtest rc $?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/gtest23.txt | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 150 bash tests/sanitize.sh $tool attention $P/step23_table > $OUT/san_$tool.txt 2>&1; echo "$tool rc $?: $(grep -h 'ERROR SUMMARY' $OUT/san_$tool.txt | sort | uniq -c | tr '\n' ' ') at $((SECONDS-t0)) s"
done
timeout 60 compute-sanitizer --tool memcheck $P/step23_table --check --batch 1 --heads 32 --kv-heads 1 --seq-q 1 --seq-k 65536 --head-dim 128 --page-size 16 > $OUT/san_wide.txt 2>&1; echo "wide memcheck rc $?: $(grep 'ERROR SUMMARY' $OUT/san_wide.txt)"
for b in base table; do cuobjdump -sass $P/step23_$b > /tmp/$b.sass 2>/dev/null; python3 - $b <<'PY' >> $OUT/sass_counts.txt
import re,sys
cur=None;cnt={}
for l in open(f'/tmp/{sys.argv[1]}.sass'):
    m=re.search(r'Function : (\S+)',l)
    if m: cur=m.group(1); cnt[cur]=[0,0,0]; continue
    if cur and re.match(r'\s+/\*[0-9a-f]{4}\*/\s+\S',l):
        cnt[cur][0]+=1; cnt[cur][1]+='LDGSTS' in l; cnt[cur][2]+=' LDS' in l
for k,v in cnt.items():
    m=re.search(r'decode_splitI(6__half)NS_6ConfigILi(\d+)ELi(\d)ELi(\d+)EEELb(\d)',k)
    if m: print(sys.argv[1], m.groups()[1:], 'instructions', v[0], 'LDGSTS', v[1], 'LDS', v[2])
PY
done
cat $OUT/sass_counts.txt
shapes=("--batch 64 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 64 --kv-heads 1 --seq-k 16384 --page-size 16"
        "--batch 64 --kv-heads 1 --seq-k 1024 --page-size 16" "--batch 8 --kv-heads 1 --seq-k 131072 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 131072 --page-size 16" "--batch 1 --kv-heads 1 --seq-k 65536 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 131072 --page-size 16" "--batch 1 --kv-heads 8 --seq-k 16384 --page-size 16"
        "--batch 1 --kv-heads 1 --seq-k 1024 --page-size 16" "--batch 1 --kv-heads 32 --seq-k 16384 --page-size 16"
        "--batch 8 --kv-heads 8 --seq-k 16384 --page-size 1" "--batch 64 --kv-heads 1 --seq-k 16384 --page-size 1")
for r in 1 2; do
  for shp in "${shapes[@]}"; do
    for v in base table; do
      echo "# $r $v $shp"
      timeout 60 $P/step23_$v --bench --csv --seed 5 --reps 30 --heads 32 --seq-q 1 --head-dim 128 $shp 2>&1 | grep -v '^$' | grep -v "^device\|^peaks\|^seed\|^step,"
    done
  done
  echo "round $r at $((SECONDS-t0)) s" >&2
done > $OUT/ab_table.txt
python3 profiles/h200/23_paged_kv_decode/history/entries_ahead/ab_summary.py $OUT/ab_table.txt $OUT/table_ab.csv "23 offsets table" | tee $OUT/ab_summary.txt
echo "done at $((SECONDS-t0)) s"

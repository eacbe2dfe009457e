#!/usr/bin/env bash
# Device, after device.sh (carry [".probe/l2.tar.xz"], OUT set): step 22 as committed (base22) and with its tiles
# asked of L2 four tiles ahead (ahead4), one launch each under ncu at two shapes: the launch's time, DRAM reads,
# every L2 sector, and the L2 lookups of the SMs' loads, hit and missed -> $OUT/ncu_l2.txt (run/ncu_l2.txt here;
# results.py's l2_ahead_ncu_table). --clock-control none, as profiles/capture.sh runs ncu, said in the output's
# first line: the committed run/ncu_l2.txt was made without it (ncu's default held the clocks at base).
set -uo pipefail
P=/tmp/l2
mkdir -p "$P" && tar xJf .probe/l2.tar.xz -C "$P"
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
m+=,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors.sum
{ echo "# clock-control none"
for s in "--batch 64 --kv-heads 1 --seq-k 131072" "--batch 1 --kv-heads 1 --seq-k 131072"; do
  for v in base22 ahead4; do
    echo "== $v $s"
    # shellcheck disable=SC2086  # $s: the shape's flags, split on purpose
    timeout 60 ncu --clock-control none --metrics "$m" -k regex:decode_split -c 1 "$P/$v" --heads 32 --seq-q 1 --head-dim 128 $s 2>&1 |
      grep -E "^\s+(gpu__|dram__|lts__)|Error|error"
  done
done; } | tee "$OUT"/ncu_l2.txt

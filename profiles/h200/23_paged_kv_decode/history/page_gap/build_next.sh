#!/usr/bin/env bash
# On the CPU machine, with build/ configured (sm_90a): step 22 and step 23 as committed (base), step 23 with
# whole.diff (whole: a tile whose rows all lie before the end copied without a test per row) and with pairs.diff
# (pairs: the offsets of two tiles of 64 keys found every other tile, a row per thread of all four warps), and
# each one's test binary, stripped, into .probe/next.tar.xz for next.sh to carry.
set -euo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$g/../../../../probes.sh" next step23_base=23_paged_kv_decode step22=22_split_kv_decode \
  step23_whole=23_paged_kv_decode:"$g/whole.diff" test23_whole=test_23_paged_kv_decode:"$g/whole.diff" \
  step23_pairs=23_paged_kv_decode:"$g/pairs.diff" test23_pairs=test_23_paged_kv_decode:"$g/pairs.diff"

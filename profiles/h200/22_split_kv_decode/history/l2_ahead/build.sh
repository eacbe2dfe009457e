#!/usr/bin/env bash
# On the CPU machine, with build/ configured (sm_90a): step 22 as committed (base22) and with ahead.diff at two
# distances (ahead4: kL2Ahead 4 tiles, as in the diff; ahead8: 8), step 23 as committed (base23) and with
# paged.diff (paged), and the test binaries of ahead4 and paged, stripped, into .probe/l2.tar.xz for device.sh.
set -euo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$g/../../../../../.probe"
a8=$(cd "$g/../../../../../.probe" && pwd)/ahead8.diff
sed 's/^+constexpr int kL2Ahead = 4;$/+constexpr int kL2Ahead = 8;/' "$g/ahead.diff" > "$a8"
grep -q '^+constexpr int kL2Ahead = 8;$' "$a8"
bash "$g/../../../../probes.sh" l2 base22=22_split_kv_decode ahead4=22_split_kv_decode:"$g/ahead.diff" \
  test_ahead4=test_22_split_kv_decode:"$g/ahead.diff" ahead8=22_split_kv_decode:"$a8" \
  base23=23_paged_kv_decode paged=23_paged_kv_decode:"$g/paged.diff" test_paged=test_23_paged_kv_decode:"$g/paged.diff"

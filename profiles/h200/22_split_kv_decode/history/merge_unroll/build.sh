#!/usr/bin/env bash
# On the CPU machine, with build/ configured (sm_90a): steps 22 and 23 as committed (base22, base23) and with the
# merge's loads 16 in flight (u16_22.diff, u16_23.diff), and the two steps' test binaries with the change,
# stripped, into .probe/merge.tar.xz for device.sh.
set -euo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$g/../../../../probes.sh" merge base22=22_split_kv_decode u16_22=22_split_kv_decode:"$g/u16_22.diff" \
  test_u16_22=test_22_split_kv_decode:"$g/u16_22.diff" base23=23_paged_kv_decode \
  u16_23=23_paged_kv_decode:"$g/u16_23.diff" test_u16_23=test_23_paged_kv_decode:"$g/u16_23.diff"

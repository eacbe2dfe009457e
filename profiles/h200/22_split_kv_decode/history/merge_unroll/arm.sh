#!/usr/bin/env bash
# One arm against the committed steps 22 and 23 (the staged merge here, ../merge_spread/'s noinline):
#   bash arm.sh build DIR NAME        here, with build/ configured (sm_90a): steps 22 and 23 as committed (base22,
#                                     base23), with DIR/NAME_22.diff and DIR/NAME_23.diff (NAME_22, NAME_23) and
#                                     their tests, into .probe/NAME.tar.xz
#   bash arm.sh device DIR NAME RUN   on the device (carry [".probe/NAME.tar.xz"], OUT set): both steps' tests with
#                                     the diffs, then base and NAME interleaved, 3 rounds (device2.sh)
#                                     -> $OUT/NAME.tgz (abRUN_22.csv, abRUN_23.csv, summaries, the tests' output)
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2; }
(($# >= 3)) || usage
dir=$2 name=$3
case $1 in
  build)
    bash "$g/../../../../probes.sh" "$name" base22=22_split_kv_decode "${name}_22=22_split_kv_decode:$dir/${name}_22.diff" \
      "test_${name}_22=test_22_split_kv_decode:$dir/${name}_22.diff" base23=23_paged_kv_decode \
      "${name}_23=23_paged_kv_decode:$dir/${name}_23.diff" "test_${name}_23=test_23_paged_kv_decode:$dir/${name}_23.diff"
    ;;
  device)
    (($# == 4)) || usage
    ARCHIVES=$name TESTED=$name ARMS=$name RUN=$4 TGZ=$name NAME="merge $name" bash "$g/device2.sh"
    ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# The merge after the barrier as a function of its own (noinline_22.diff, noinline_23.diff; README.md, "Next: the
# merge not inlined"), prepared and not yet run.
#   bash noinline.sh build     here, with build/ configured (sm_90a): steps 22 and 23 as committed (base22, base23),
#                              with the diffs (noinline_22, noinline_23) and their tests, into .probe/noinline.tar.xz
#   bash noinline.sh device    on the device (carry [".probe/noinline.tar.xz"], OUT set), one call of about three
#                              minutes: both steps' tests with the diffs, then each step's base and noinline
#                              interleaved, 3 rounds -> $OUT/noinline.tgz (ab7_22.csv, ab7_23.csv, summaries, gpu.txt)
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  build) bash "$g/../merge_unroll/arm.sh" build "$g" noinline ;;
  device) bash "$g/../merge_unroll/arm.sh" device "$g" noinline 7 ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac

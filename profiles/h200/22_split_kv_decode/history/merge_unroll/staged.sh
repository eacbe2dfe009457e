#!/usr/bin/env bash
# The staged merge (staged_22.diff, staged_23.diff; README.md, "Next: the partials staged by cp.async"): measured
# on an H200 (run/ab4_*), not kept.
#   bash staged.sh build     here, with build/ configured (sm_90a): steps 22 and 23 as committed (base22, base23),
#                            with the diffs (staged_22, staged_23) and their tests, stripped, into .probe/staged.tar.xz
#   bash staged.sh device    on the device (carry [".probe/staged.tar.xz"], OUT set), one call of about three
#                            minutes: both steps' tests with the diffs, then each step's base and staged interleaved
#                            by profiles/knob_ab.py, 3 rounds (step 22 on targets.txt, step 23 on paged_targets.txt)
#                            -> $OUT/staged.tgz (ab4_22.csv, ab4_23.csv, summaries, the tests' output, gpu.txt)
set -uo pipefail
g=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  build) bash "$g/arm.sh" build "$g" staged ;;
  device) bash "$g/arm.sh" device "$g" staged 4 ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac

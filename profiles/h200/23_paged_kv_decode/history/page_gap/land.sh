#!/usr/bin/env bash
# Device calls that land pairs.diff (carry [".whl"], for python.gpu's pytest), made back to back while the machine
# is warm; they leave one file, $OUT/land.tgz.
#   bash land.sh start [SECONDS]   build (-DFA_TEST_CHAIN=OFF), the tests of steps 22 and 23, the decode CLI and the
#       Python package (ctest -R "^2[23]_|decode|paged|python", sanitizers of both steps included), then the
#       STEPS="22 23" sweep and ncu panel (gpu_session.sh's bench and capture) started detached; waits up to
#       SECONDS (default 300) for the sweep.
#   bash land.sh wait SECONDS      waits for the sweep; once done, $OUT/land.tgz holds everything.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../../.." || exit 2
export PATH=$PATH:/usr/local/cuda/bin
[[ -d .whl/pydeps ]] && export PYTHONPATH=$PWD/.whl/pydeps${PYTHONPATH:+:$PYTHONPATH}
D=/tmp/fa_land
wait_for() {
  local t0=$SECONDS
  while [[ ! -f $D/rc ]] && ((SECONDS - t0 < $1)); do sleep 5; done
  if [[ -f $D/rc ]]; then echo "sweep rc $(cat "$D/rc")"; tail -25 "$D/sweep.txt"; else
    echo "sweep still running: $(grep -c ',' "$D"/out/bench.csv.partial 2> /dev/null) rows so far"; fi
  tar czf "${OUT:-/tmp}/land.tgz" -C "$D" .
}
case ${1:-} in
  start)
    mkdir -p "$D/out"
    OUT=$D/out STAGES="build" CMAKE_ARGS=-DFA_TEST_CHAIN=OFF bash profiles/gpu_session.sh > "$D/build.txt" 2>&1
    cat "$D/build.txt"
    (cd build && ctest --output-on-failure -j 8 -R "^2[23]_|decode|paged|python") > "$D/ctest_22_23_decode.log" 2>&1
    echo "ctest rc $?: $(grep -hE 'tests passed|Total Test' "$D/ctest_22_23_decode.log" | tr '\n' ' ')"
    setsid bash -c "OUT=$D/out STEPS='22 23' STAGES='bench capture' bash profiles/gpu_session.sh > $D/sweep.txt 2>&1;
      echo \$? > $D/rc" < /dev/null > /dev/null 2>&1 &
    wait_for "${2:-300}"
    ;;
  wait) wait_for "${2:?land.sh wait SECONDS}" ;;
  *) echo "land.sh: say start [SECONDS] or wait SECONDS" >&2; exit 2 ;;
esac

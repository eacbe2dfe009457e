#!/usr/bin/env bash
# profiles/decode_session.sh: a device session for the decode steps (22 and 23) longer than one call: the build
# and their tests in the first call, then their sweep started detached (setsid), which the next calls, made back
# to back while the machine is warm, wait for. Each call leaves one file, $OUT/decode.tgz (everything so far).
#
#   bash profiles/decode_session.sh start [SECONDS]   configure and build (-DFA_TEST_CHAIN=OFF); unless TESTS=0,
#       ctest -R "^2[23]_|decode|paged|python" (steps 22 and 23 with their sanitizers, the decode command-line
#       tests, the Python package's: carry .whl for its pytest); then, detached, gpu_session.sh's bench and capture
#       stages with STEPS="22 23" (the decode sweep of both steps and SDPA's decode rows, merged into
#       profiles/<gpu>/bench.csv; INPUTS=both or randn passes --inputs: randn rows kept apart); waits up to
#       SECONDS (default 300) for it
#   bash profiles/decode_session.sh wait SECONDS      waits for the sweep
# SUITE=1 (with start): once the sweep has ended, the whole suite starts by itself (profiles/suite_detached.sh
# start -j 14, on this build), so that a session's acceptance run, the sweep and then the suite, leaves no gap
# between them; after the sweep's last wait, follow it with `bash profiles/suite_detached.sh wait SECONDS`.
# The build, the tests, the uniform sweep and the capture fit one call together (the sweep's stage times are in
# sweep.txt); the sweep on randn inputs alone took most of one call on an H200 (TESTS=0; its sweep.txt in
# profiles/h200/22_split_kv_decode/history/inputs_randn/sweep/), so INPUTS=both needs two calls. Then here:
# tar xzf decode.tgz -C DIR && python3 profiles/results.py import DIR/out
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export PATH=$PATH:/usr/local/cuda/bin
[[ -d .whl/pydeps ]] && export PYTHONPATH=$PWD/.whl/pydeps${PYTHONPATH:+:$PYTHONPATH}
D=${FA_DECODE_DIR:-/tmp/fa_decode}
wait_for() {
  local t0=$SECONDS
  while [[ ! -f $D/rc ]] && ((SECONDS - t0 < $1)); do sleep 5; done
  if [[ -f $D/rc ]]; then echo "sweep rc $(cat "$D/rc")"; tail -25 "$D/sweep.txt"; else
    echo "sweep still running: $(grep -c ',' "$D"/out/bench.csv.partial 2> /dev/null) rows so far"; fi
  tar czf "${OUT:-/tmp}/decode.tgz" -C "$D" .
}
case ${1:-} in
  start)
    [[ -f $D/pid ]] && kill -0 "$(cat "$D/pid")" 2> /dev/null && { echo "decode_session.sh: a sweep is running" >&2; exit 1; }
    rm -rf "$D" && mkdir -p "$D/out"
    OUT=$D/out STAGES="build" CMAKE_ARGS=-DFA_TEST_CHAIN=OFF bash profiles/gpu_session.sh > "$D/build.txt" 2>&1
    cat "$D/build.txt"
    if [[ ${TESTS:-1} != 0 ]]; then
      (cd build && ctest --output-on-failure -j 8 -R "^2[23]_|decode|paged|python") > "$D/ctest_22_23_decode.log" 2>&1
      echo "ctest rc $?: $(grep -hE 'tests passed|Total Test' "$D/ctest_22_23_decode.log" | tr '\n' ' ')"
    fi
    suite=true
    [[ ${SUITE:-0} == 1 ]] && suite="bash profiles/suite_detached.sh start -j 14 > $D/suite_start.txt 2>&1"
    setsid bash -c "OUT=$D/out STEPS='22 23' STAGES='bench capture' INPUTS='${INPUTS:-}' bash profiles/gpu_session.sh \
      > $D/sweep.txt 2>&1; echo \$? > $D/rc; $suite" < /dev/null > /dev/null 2>&1 &
    echo $! > "$D/pid"
    wait_for "${2:-300}"
    ;;
  wait) wait_for "${2:?decode_session.sh wait SECONDS}" ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
  *) echo "decode_session.sh: say start [SECONDS] or wait SECONDS" >&2; exit 2 ;;
esac

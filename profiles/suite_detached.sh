#!/usr/bin/env bash
# profiles/suite_detached.sh: the whole test suite in one ctest run that outlives a device call.
# On an H100 the suite, sanitizers included, takes longer at -j12 than one device call may run (its
# "Total Test time" in ctest.log says how long), and a call's processes end when it returns, except one
# started in a session of its own (setsid), which runs on while the machine is held. So one call builds and
# starts the suite detached, and the next calls, made back to back while the machine is warm, wait for it
# and collect its logs.
#
#   bash profiles/suite_detached.sh start [-j N]     # needs a built build/; starts ctest detached, returns at once
#   bash profiles/suite_detached.sh wait SECONDS     # waits up to SECONDS for it to end; prints how many tests
#                                                  # have finished, and the summary once it has; with OUT set,
#                                                  # leaves the logs in $OUT/suite.tgz
#
# State in $FA_SUITE_DIR (default /tmp/fa_suite): ctest.log, LastTest.log (pytest's counts), rc once done.
# Exit status: start: 0 started, 1 already running or nothing built; wait: 0 done and passed, 1 done and
# failed (or never started), 3 still running; 2 bad usage.
# Typical use (two calls, the machine kept warm between them):
#   call 1: cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build build -j16 &&
#           bash profiles/suite_detached.sh start && bash profiles/suite_detached.sh wait 450
#   call 2: bash profiles/suite_detached.sh wait 560
# Most of the suite's time is the fixtures chain of the backward steps (each step's GPU tests wait for its
# PREV's); configuring with -DFA_TEST_CHAIN=OFF lets them all start at once (docs/conventions.md).
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
dir=${FA_SUITE_DIR:-/tmp/fa_suite}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
(($#)) || { usage >&2; echo "suite_detached.sh: say start or wait" >&2; exit 2; }

case $1 in
  -h | --help) usage; exit 0 ;;
  start)
    jobs=12
    if (($# == 3)) && [[ $2 == -j && $3 =~ ^[1-9][0-9]*$ ]]; then jobs=$3
    elif (($# != 1)); then echo "suite_detached.sh: start takes only -j N (N whole)" >&2; exit 2; fi
    [[ -f build/CTestTestfile.cmake ]] || { echo "suite_detached.sh: no build/ with tests: configure and build first" >&2; exit 1; }
    if [[ -f $dir/pid && ! -f $dir/rc ]] && kill -0 "$(cat "$dir/pid")" 2> /dev/null; then
      echo "suite_detached.sh: a suite is already running (pid $(cat "$dir/pid"), logs in $dir)" >&2
      exit 1
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    # pytest for python.gpu where the machine has PyTorch but no pytest (python/vendor_pytest.sh, carried .whl)
    [[ -d .whl/pydeps ]] && export PYTHONPATH=$PWD/.whl/pydeps${PYTHONPATH:+:$PYTHONPATH}
    export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer where the image has it only there
    setsid bash -c 'ctest --test-dir build -j "$1" --timeout 600 --output-on-failure > "$2/ctest.log" 2>&1
                    rc=$?; cp build/Testing/Temporary/LastTest.log "$2/" 2> /dev/null; echo $rc > "$2/rc"' \
      _ "$jobs" "$dir" < /dev/null > /dev/null 2>&1 &
    echo $! > "$dir/pid"
    echo "suite_detached.sh: started ctest -j $jobs (pid $!), logs in $dir"
    ;;
  wait)
    (($# == 2)) && [[ $2 =~ ^[0-9]+$ ]] || { echo "suite_detached.sh: wait takes whole seconds" >&2; exit 2; }
    [[ -f $dir/pid ]] || { echo "suite_detached.sh: no suite started (nothing in $dir)" >&2; exit 1; }
    end=$((SECONDS + $2))
    while [[ ! -f $dir/rc ]] && ((SECONDS < end)); do
      kill -0 "$(cat "$dir/pid")" 2> /dev/null || break  # ended without writing rc: killed
      sleep 2
    done
    done_n=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$dir/ctest.log" 2> /dev/null)
    total=$(grep -m1 -oE '^ *[0-9]+/[0-9]+ Test' "$dir/ctest.log" 2> /dev/null | grep -oE '/[0-9]+' | tr -d /)
    echo "suite_detached.sh: ${done_n:-0} of ${total:-?} tests finished"
    grep -E '\*\*\*|tests passed|Total Test time' "$dir/ctest.log" 2> /dev/null | head -40
    grep -hE '^(=+ )?[0-9]+ passed' "$dir/LastTest.log" 2> /dev/null | head -5  # pytest's counts
    [[ -n ${OUT:-} ]] && tar czf "$OUT/suite.tgz" -C "$dir" . 2> /dev/null
    if [[ -f $dir/rc ]]; then
      rc=$(cat "$dir/rc")
      echo "suite_detached.sh: done, ctest exit $rc"
      ((rc == 0)) && exit 0 || exit 1
    fi
    kill -0 "$(cat "$dir/pid")" 2> /dev/null && exit 3
    echo "suite_detached.sh: the suite ended without finishing (killed?)" >&2
    exit 1
    ;;
  *) echo "suite_detached.sh: unknown command '$1' (start or wait; see --help)" >&2; exit 2 ;;
esac

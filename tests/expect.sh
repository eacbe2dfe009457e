#!/usr/bin/env bash
# expect.sh [--gpu] CODE REGEX COMMAND...: runs COMMAND, passes iff it exits with CODE and its
# output (stdout + stderr) matches the extended regex REGEX. Used for the CLI / bad-input tests.
# With --gpu the check needs a GPU the step runs on: a command that reports "no CUDA device"
# (exit 3, or a test binary's exit 77) or a step built for another GPU (exit 4, StepInfo::needs_cc)
# skips (77), unless that is the exit code expected.
set -u
gpu=0
[[ $1 == --gpu ]] && { gpu=1; shift; }
code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
if [[ $gpu == 1 && $rc != "$code" ]]; then
  if [[ $rc == 3 || $rc == 77 ]] && grep -q "no CUDA device" <<< "$out"; then
    echo "SKIPPED: $(grep -m1 -o "no CUDA device.*" <<< "$out")"  # the command's own words: what is needed
    exit 77
  fi
  if [[ $rc == 4 ]] && grep -q "needs a compute capability" <<< "$out"; then
    echo "SKIPPED: $(grep -m1 "needs a compute capability" <<< "$out")"
    exit 77
  fi
fi
if [[ $gpu == 1 && $rc == 77 ]] && grep -q "SKIPPED: no CUDA device" <<< "$out"; then
  echo "SKIPPED: $(grep -m1 -o "no CUDA device.*" <<< "$out")"
  exit 77
fi
printf '%s\n' "$out" | head -n 40
if [[ $rc -ne $code ]]; then
  echo "FAIL: exit code $rc, expected $code"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "FAIL: output does not match /$regex/"
  exit 1
fi
echo "ok: exit $rc, output matches /$regex/"

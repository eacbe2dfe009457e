#!/usr/bin/env bash
# expect.sh [--gpu] CODE REGEX COMMAND...: runs COMMAND, passes iff it exits with CODE and its
# output (stdout + stderr) matches the extended regex REGEX. Used for the CLI / bad-input tests.
# With --gpu the check needs a GPU: a command that reports "no CUDA device" (exit 3) skips (77).
set -u
gpu=0
[[ $1 == --gpu ]] && { gpu=1; shift; }
code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
if [[ $gpu == 1 && $rc == 3 ]] && grep -q "no CUDA device" <<< "$out"; then
  echo "SKIPPED: no CUDA device"
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

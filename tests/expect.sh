#!/usr/bin/env bash
# expect.sh CODE REGEX COMMAND...: runs COMMAND, passes iff it exits with CODE and its output
# (stdout + stderr) matches the extended regex REGEX. Used for the CLI / bad-input tests.
set -u
code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
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

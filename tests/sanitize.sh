#!/usr/bin/env bash
# sanitize.sh TOOL EXE ARGS...: EXE ARGS under compute-sanitizer --tool TOOL; any finding fails.
# Exits 77 (ctest: skipped) with a message where there is no sanitizer or no CUDA device.
set -u
tool=$1
shift
san=$(command -v compute-sanitizer || true)
[[ -z $san && -x /usr/local/cuda/bin/compute-sanitizer ]] && san=/usr/local/cuda/bin/compute-sanitizer
if [[ -z $san ]]; then
  echo "SKIPPED: compute-sanitizer not found (it ships with the CUDA toolkit)"
  exit 77
fi
"$1" --device-info >/dev/null 2>&1
if [[ $? -eq 3 ]]; then
  echo "SKIPPED: no CUDA device"
  exit 77
fi
exec "$san" --tool "$tool" --error-exitcode 99 "$@"

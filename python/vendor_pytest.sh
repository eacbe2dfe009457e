#!/usr/bin/env bash
# python/vendor_pytest.sh: copies this machine's pytest (Debian's python3-pytest, pure Python) and
# what it imports into .whl/pydeps/ (git-ignored), for a machine that has PyTorch but no pytest and
# no network: the device machine. Carry .whl to it and put .whl/pydeps on PYTHONPATH
# (profiles/gpu_session.sh does when the folder is there), so that CMake finds "pytest, torch" and
# the python.gpu test runs instead of skipping.
#
#   bash python/vendor_pytest.sh        # then run(..., carry=[".whl"])
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=$(/usr/bin/python3 -c 'import os, pytest; print(os.path.dirname(os.path.dirname(pytest.__file__)))' 2>/dev/null) ||
  { echo "vendor_pytest.sh: no pytest for /usr/bin/python3 (apt-get install python3-pytest)" >&2; exit 1; }
mkdir -p .whl/pydeps
for m in pytest _pytest pluggy iniconfig py py.py attr attrs packaging exceptiongroup tomli; do
  for p in "$src/$m" "$src/$m"-*.dist-info "$src/$m"-*.egg-info; do
    [[ -e $p ]] && cp -r "$p" .whl/pydeps/
  done
done
python3 -c 'import sys; sys.path[:0] = [".whl/pydeps"]; import pytest; print("vendored pytest", pytest.__version__, "into .whl/pydeps:", pytest.__file__)'

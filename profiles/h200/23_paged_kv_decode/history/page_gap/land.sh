#!/usr/bin/env bash
# The device calls that tested and swept step 23 once pairs.diff landed (carry [".whl"]), as they ran in commit
# cf50bac: `land.sh start 400` then made one call of everything (build, the tests of steps 22 and 23, the decode
# command-line tests and the Python package's, the STEPS="22 23" sweep and ncu panel), into $OUT/land.tgz. The same
# session now lives in profiles/decode_session.sh (its file is $OUT/decode.tgz); this runs it.
exec env FA_DECODE_DIR=/tmp/fa_land bash "$(dirname "${BASH_SOURCE[0]}")/../../../../decode_session.sh" "$@"

#!/bin/bash
# pytest_test.sh — runs the Python package's pytest suite under bazel test:
# KVACT_LIB = the runfiles' libkvact.so ($1), the layout probe ($2),
# bench.py's C anchor ($3).
set -euo pipefail
export KVACT_LIB="$PWD/$1" KVACT_LAYOUT_PROBE="$PWD/$2" KVACT_CALL_ANCHOR="$PWD/$3"
export PYTHONPATH="$PWD/python" HOME="${TEST_TMPDIR:-/tmp}" PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests

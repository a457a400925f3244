#!/bin/bash
# pytest_test.sh — runs the Python package's pytest suite under bazel test:
# KVACT_LIB = the runfiles' libkvact.so ($1), the layout probe ($2), kvactd ($3),
# bench.py's C anchor ($4).
# A sanitizer build of libkvact.so gets its runtime preloaded
# (python/sanitizer_preload.sh).
set -euo pipefail
export KVACT_LIB="$PWD/$1" KVACT_LAYOUT_PROBE="$PWD/$2" KVACT_KVACTD="$PWD/$3"
export KVACT_CALL_ANCHOR="$PWD/$4"
export PYTHONPATH="$PWD/python" HOME="${TEST_TMPDIR:-/tmp}" PYTHONDONTWRITEBYTECODE=1
. "$PWD/python/sanitizer_preload.sh"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests

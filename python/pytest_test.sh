#!/bin/bash
# pytest_test.sh — runs the Python package's pytest suite under bazel test:
# KVACT_LIB = the runfiles' libkvact.so ($1), the layout probe ($2), kvactd ($3),
# bench.py's C anchor ($4).
# A sanitizer build of libkvact.so needs its runtime loaded before Python's
# own libraries: whatever libasan/libubsan/libtsan it links goes into
# LD_PRELOAD. The interpreter and torch are not instrumented, so leak
# reports would be theirs: leak detection is off (kva_memcheck still runs).
set -euo pipefail
export KVACT_LIB="$PWD/$1" KVACT_LAYOUT_PROBE="$PWD/$2" KVACT_KVACTD="$PWD/$3"
export KVACT_CALL_ANCHOR="$PWD/$4"
export PYTHONPATH="$PWD/python" HOME="${TEST_TMPDIR:-/tmp}" PYTHONDONTWRITEBYTECODE=1
preload=$(ldd "$KVACT_LIB" | awk '/lib(asan|ubsan|tsan)\.so/ {print $3}' | paste -sd: -)
if [ -n "$preload" ]; then
  export LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
fi
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests

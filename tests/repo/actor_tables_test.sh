#!/usr/bin/env bash
# Runs actor_tables_test.py over the source tree in the test's runfiles
# (the working directory holds l1/, l2/ and gpu/ as data).
set -euo pipefail
exec python3 "$1" .

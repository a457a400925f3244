#!/bin/bash
# run.sh — python/tests/sglang_real (KvactStorage against the real SGLang) under
# the SGLang peer environment's interpreter (tools/peers/setup.sh).
#
#   python/tests/sglang_real/run.sh [LIBKVACT_SO] [--kvactd=PATH] [pytest args...]
#
# LIBKVACT_SO defaults to $KVACT_LIB, then bazel-bin/libkvact.so; kvactd (for
# the cases that share one between processes) to $KVACT_KVACTD, then
# bazel-bin/tools/kvactd. The
# environment is $KVACT_SGLANG_VENV (default /opt/kvact-peers/sglang). A missing
# environment or library is a failure (exit 2), never a skip: run
# tools/peers/setup.sh and bazel build //:kvact_shared first.
# Works from the repository and from a bazel runfiles tree (//python:sglang_real_test).
set -euo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$PWD"  # bazel test: the runfiles tree of the workspace
else
  root="$(cd "$(dirname "$0")/../../.." && pwd)"
fi
lib="${KVACT_LIB:-$root/bazel-bin/libkvact.so}"
kvactd="${KVACT_KVACTD:-$root/bazel-bin/tools/kvactd}"
if [ $# -gt 0 ] && [[ "$1" == *.so* ]]; then lib="$1"; shift; fi
if [ $# -gt 0 ] && [[ "$1" == --kvactd=* ]]; then kvactd="${1#--kvactd=}"; shift; fi
. "$root/python/peer_env.sh" sglang_real "$root" "$lib" sglang
case "$kvactd" in /*) ;; *) kvactd="$PWD/$kvactd" ;; esac
export KVACT_KVACTD="$kvactd"
if [ -n "${TEST_TMPDIR:-}" ]; then  # torch's caches, pytest's tmp_path
  export HOME="$TEST_TMPDIR" TMPDIR="$TEST_TMPDIR"
fi
cd "$root"
# --confcutdir: python/tests/conftest.py (Debian's suite) keeps this folder out
# of its collection and is not loaded here. --disable-warnings: SGLang's imports
# warn about GPU kernels (flashinfer, cutlass) that a CPU run never loads.
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider --disable-warnings \
  --confcutdir=python/tests/sglang_real --rootdir=python/tests/sglang_real \
  python/tests/sglang_real "$@"

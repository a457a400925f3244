#!/bin/bash
# run.sh — python/tests/vllm_real (KvactConnector against the real vLLM) under
# the vLLM peer environment's interpreter (tools/peers/setup.sh).
#
#   python/tests/vllm_real/run.sh [LIBKVACT_SO] [pytest args...]
#
# LIBKVACT_SO defaults to $KVACT_LIB, then bazel-bin/libkvact.so. The
# environment is $KVACT_VLLM_VENV (default /opt/kvact-peers/vllm). A missing
# environment or library is a failure (exit 2), never a skip: run
# tools/peers/setup.sh and bazel build //:kvact_shared first.
# Works from the repository and from a bazel runfiles tree (//python:vllm_real_test).
set -euo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$PWD"  # bazel test: the runfiles tree of the workspace
else
  root="$(cd "$(dirname "$0")/../../.." && pwd)"
fi
lib="${KVACT_LIB:-$root/bazel-bin/libkvact.so}"
if [ $# -gt 0 ] && [[ "$1" == *.so* ]]; then lib="$1"; shift; fi
venv="${KVACT_VLLM_VENV:-/opt/kvact-peers/vllm}"

if [ ! -x "$venv/bin/python" ]; then
  echo "vllm_real: no vLLM environment at $venv; run tools/peers/setup.sh" >&2
  exit 2
fi
if [ ! -f "$lib" ]; then
  echo "vllm_real: no libkvact.so at $lib; bazel build //:kvact_shared, or pass its path" >&2
  exit 2
fi
case "$lib" in /*) ;; *) lib="$PWD/$lib" ;; esac
kvactd="${KVACT_KVACTD:-$root/bazel-bin/tools/kvactd}"  # test_scheduler_e2e's shared kvactd
case "$kvactd" in /*) ;; *) kvactd="$PWD/$kvactd" ;; esac

export KVACT_LIB="$lib" KVACT_KVACTD="$kvactd" PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
if [ -n "${TEST_TMPDIR:-}" ]; then  # vLLM's and torch's caches, pytest's tmp_path
  export HOME="$TEST_TMPDIR" TMPDIR="$TEST_TMPDIR"
fi
cd "$root"
# --confcutdir: python/tests/conftest.py (Debian's suite) keeps this folder out
# of its collection and is not loaded here.
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --confcutdir=python/tests/vllm_real --rootdir=python/tests/vllm_real \
  python/tests/vllm_real "$@"

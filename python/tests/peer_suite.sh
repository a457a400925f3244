#!/bin/bash
# peer_suite.sh — runs a peer suite (python/tests/SUITE) under its peer
# environment's interpreter (tools/peers/setup.sh); each suite's run.sh is this with its
# folder and peer named.
#
#   python/tests/peer_suite.sh SUITE PEER [LIBKVACT_SO] [--kvactd=PATH] [pytest args...]
#
# LIBKVACT_SO defaults to $KVACT_LIB, then bazel-bin/libkvact.so; kvactd (for the cases
# that share one between processes) to $KVACT_KVACTD, then bazel-bin/tools/kvactd. The
# environment is python/peer_env.sh's for PEER. A missing environment or library is a
# failure (exit 2), never a skip: run tools/peers/setup.sh and bazel build
# //:kvact_shared first. Works from the repository and from a bazel runfiles tree
# (//python:vllm_real_test, //python:sglang_real_test, //python:lmcache_side_test).
set -euo pipefail
suite=$1 peer=$2
shift 2
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$PWD"  # bazel test: the runfiles tree of the workspace
else
  root="$(cd "$(dirname "$0")/../.." && pwd)"
fi
lib="${KVACT_LIB:-$root/bazel-bin/libkvact.so}"
kvactd="${KVACT_KVACTD:-$root/bazel-bin/tools/kvactd}"
if [ $# -gt 0 ] && [[ "$1" == *.so* ]]; then lib="$1"; shift; fi
if [ $# -gt 0 ] && [[ "$1" == --kvactd=* ]]; then kvactd="${1#--kvactd=}"; shift; fi
. "$root/python/peer_env.sh" "$suite" "$root" "$lib" "$peer"
case "$kvactd" in /*) ;; *) kvactd="$PWD/$kvactd" ;; esac
export KVACT_KVACTD="$kvactd"
if [ -n "${TEST_TMPDIR:-}" ]; then  # the engines' and torch's caches, pytest's tmp_path
  export HOME="$TEST_TMPDIR" TMPDIR="$TEST_TMPDIR"
fi
cd "$root"
# --confcutdir: python/tests/conftest.py (Debian's suite) keeps this folder out of its
# collection and is not loaded here (peer_support.py loads it under another name).
# --disable-warnings: the engines' imports warn about GPU kernels a CPU run never loads.
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider --disable-warnings \
  --confcutdir="python/tests/$suite" --rootdir="python/tests/$suite" \
  "python/tests/$suite" "$@"

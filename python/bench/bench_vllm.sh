#!/bin/bash
# bench_vllm.sh — python/bench/bench_vllm.py (KvactConnector's cost with vLLM's own
# objects on CPU) under the vLLM peer environment's interpreter, as
# python/tests/vllm_real/run.sh runs the suite.
#
#   python/bench/bench_vllm.sh [LIBKVACT_SO] [--quick] [--reps R] [--sizes 1,16,128]
#                              [--parts scheduler,worker,eviction] [--json FILE]
#
# LIBKVACT_SO defaults to $KVACT_LIB, then bazel-bin/libkvact.so; the environment is
# $KVACT_VLLM_VENV (default /opt/kvact-peers/vllm). A missing one exits 2: run
# tools/peers/setup.sh and bazel build //:kvact_shared first.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
lib="${KVACT_LIB:-$root/bazel-bin/libkvact.so}"
if [ $# -gt 0 ] && [[ "$1" == *.so* ]]; then lib="$1"; shift; fi
venv="${KVACT_VLLM_VENV:-/opt/kvact-peers/vllm}"

if [ ! -x "$venv/bin/python" ]; then
  echo "bench_vllm: no vLLM environment at $venv; run tools/peers/setup.sh" >&2
  exit 2
fi
if [ ! -f "$lib" ]; then
  echo "bench_vllm: no libkvact.so at $lib; bazel build //:kvact_shared, or pass its path" >&2
  exit 2
fi
case "$lib" in /*) ;; *) lib="$PWD/$lib" ;; esac

export KVACT_LIB="$lib" PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
cd "$root"
exec "$venv/bin/python" python/bench/bench_vllm.py "$@"

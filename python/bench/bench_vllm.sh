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
. "$root/python/peer_env.sh" bench_vllm "$root" "$lib"
cd "$root"
exec "$venv/bin/python" python/bench/bench_vllm.py "$@"

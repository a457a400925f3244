#!/bin/bash
# bench_sglang.sh — python/bench/bench_sglang.py (kvact as SGLang's HiCache storage
# backend beside SGLang's HiCacheFile and MooncakeStore, on CPU) under the mooncake
# peer environment (SGLang 0.5.23's packages and Mooncake's store: tools/peers/setup.sh),
# with a mooncake_master of its own.
#
#   python/bench/bench_sglang.sh [LIBKVACT_SO] [--pages 64] [--reps 5]
#                                [--layouts page_first,...] [--json FILE]
#
# Mooncake's services listen on every address, so the master and the benchmark run in
# a network namespace of their own with only loopback up (unshare --net as root, with
# --user --map-root-user otherwise); the master is stopped when the run ends. A missing
# environment or library exits 2: run tools/peers/setup.sh and bazel build
# //:kvact_shared first.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
lib="${KVACT_LIB:-$root/bazel-bin/libkvact.so}"
if [ $# -gt 0 ] && [[ "$1" == *.so* ]]; then lib="$1"; shift; fi
. "$root/python/peer_env.sh" bench_sglang "$root" "$lib" mooncake
cd "$root"
ns=(unshare --net)
[ "$(id -u)" = 0 ] || ns=(unshare --user --map-root-user --net)
export VENV="$venv" GLOG_minloglevel=1  # Mooncake's INFO lines off
exec "${ns[@]}" bash -c '
set -euo pipefail
ip link set lo up
log=$(mktemp)
"$VENV/bin/mooncake_master" --rpc_port=50051 --metrics_port=9003 \
  --enable_http_metadata_server=false >"$log" 2>&1 &
master=$!
trap "kill $master 2>/dev/null; wait $master 2>/dev/null; rm -f $log" EXIT
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/50051) 2>/dev/null && break
  kill -0 $master 2>/dev/null || { cat "$log" >&2; echo "bench_sglang: mooncake_master died" >&2; exit 2; }
  sleep 0.1
done
"$VENV/bin/python" python/bench/bench_sglang.py --mooncake 127.0.0.1:50051 "$@"
' bash "$@"

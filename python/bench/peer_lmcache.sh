#!/bin/bash
# peer_lmcache.sh — python/bench/peer_lmcache.py (LMCache's StorageManager beside kvact's,
# embedded and through kvactd: the same calls, the same sizes, in one run) under the
# LMCache peer environment's interpreter (tools/peers/setup.sh lmcache), as
# python/tests/lmcache_side/run.sh runs the suite.
#
#   python/bench/peer_lmcache.sh [LIBKVACT_SO] [--kvactd=PATH] [--reps 5] [--iters 300]
#       [--parts control,data,mock,disk,redis] [--keys 1,16,64] [--sizes-mib 2,8,32]
#       [--dir /var/tmp] [--json FILE]      (python/bench/peer_lmcache.py --help: the rest)
#
# LIBKVACT_SO defaults to $KVACT_LIB, then bazel-bin/libkvact.so; kvactd to $KVACT_KVACTD,
# then bazel-bin/tools/kvactd. Build them optimized for figures:
# bazel build -c opt //:kvact_shared //tools:kvactd. The redis part starts a
# redis-server of its own on loopback (skipped, with the reason, without one). A missing
# environment or library exits 2.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
lib="${KVACT_LIB:-$root/bazel-bin/libkvact.so}"
kvactd="${KVACT_KVACTD:-$root/bazel-bin/tools/kvactd}"
if [ $# -gt 0 ] && [[ "$1" == *.so* ]]; then lib="$1"; shift; fi
if [ $# -gt 0 ] && [[ "$1" == --kvactd=* ]]; then kvactd="${1#--kvactd=}"; shift; fi
. "$root/python/peer_env.sh" peer_lmcache "$root" "$lib" lmcache
case "$kvactd" in /*) ;; *) kvactd="$PWD/$kvactd" ;; esac
export KVACT_KVACTD="$kvactd"
cd "$root"
exec "$venv/bin/python" python/bench/peer_lmcache.py "$@"

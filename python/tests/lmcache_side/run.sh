#!/bin/bash
# run.sh — python/tests/lmcache_side (LMCache's StorageManager tests on LMCache and on
# kvact, and a tiny run of python/bench/peer_lmcache.py) under the LMCache peer
# environment's interpreter: python/tests/peer_suite.sh.
#
#   python/tests/lmcache_side/run.sh [LIBKVACT_SO] [--kvactd=PATH] [pytest args...]
# bazel test runs a copy named after the target, from the runfiles tree's root
here=${TEST_SRCDIR:+$PWD/python/tests/lmcache_side}
exec "${here:-$(dirname "$0")}/../peer_suite.sh" lmcache_side lmcache "$@"

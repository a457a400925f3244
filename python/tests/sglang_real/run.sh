#!/bin/bash
# run.sh — python/tests/sglang_real (KvactHiCacheStorage against the real SGLang) under the
# SGLang peer environment's interpreter: python/tests/peer_suite.sh.
#
#   python/tests/sglang_real/run.sh [LIBKVACT_SO] [--kvactd=PATH] [pytest args...]
# bazel test runs a copy named after the target, from the runfiles tree's root
here=${TEST_SRCDIR:+$PWD/python/tests/sglang_real}
exec "${here:-$(dirname "$0")}/../peer_suite.sh" sglang_real sglang "$@"

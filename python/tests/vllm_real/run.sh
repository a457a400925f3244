#!/bin/bash
# run.sh — python/tests/vllm_real (KvactConnector against the real vLLM) under the vLLM
# peer environment's interpreter: python/tests/peer_suite.sh.
#
#   python/tests/vllm_real/run.sh [LIBKVACT_SO] [--kvactd=PATH] [pytest args...]
# bazel test runs a copy named after the target, from the runfiles tree's root
here=${TEST_SRCDIR:+$PWD/python/tests/vllm_real}
exec "${here:-$(dirname "$0")}/../peer_suite.sh" vllm_real vllm "$@"

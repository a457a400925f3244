# peer_env.sh — sourced by what runs kvact under a peer engine's environment
# (tools/peers/setup.sh): tests/vllm_real/run.sh and bench/bench_vllm.sh (vLLM),
# tests/sglang_real/run.sh (SGLang), bench/bench_sglang.sh (SGLang and Mooncake),
# tests/lmcache_side/run.sh and bench/peer_lmcache.sh (LMCache).
#
#   . python/peer_env.sh NAME ROOT LIB [PEER]
#
# PEER (vllm unless given; sglang; mooncake; lmcache) selects the environment:
# $KVACT_VLLM_VENV (default /opt/kvact-peers/vllm), $KVACT_SGLANG_VENV (default
# /opt/kvact-peers/sglang), $KVACT_MOONCAKE_VENV (default
# /opt/kvact-peers/mooncake: sglang's packages and Mooncake's store) or
# $KVACT_LMCACHE_VENV (default /opt/kvact-peers/lmcache). A missing environment or library exits 2 (never a
# skip), naming NAME. Sets $venv; exports KVACT_LIB (LIB, made absolute),
# PYTHONPATH (ROOT/python) and the flags that keep the engines and Hugging
# Face offline; preloads the sanitizer runtime a sanitizer build of the
# library needs.
peer_name=$1 peer_root=$2 KVACT_LIB=$3 peer=${4:-vllm}
case "$peer" in
  vllm) venv="${KVACT_VLLM_VENV:-/opt/kvact-peers/vllm}" ;;
  sglang) venv="${KVACT_SGLANG_VENV:-/opt/kvact-peers/sglang}" ;;
  mooncake) venv="${KVACT_MOONCAKE_VENV:-/opt/kvact-peers/mooncake}" ;;
  lmcache) venv="${KVACT_LMCACHE_VENV:-/opt/kvact-peers/lmcache}" ;;
  *) echo "$peer_name: unknown peer '$peer' (vllm, sglang, mooncake, lmcache)" >&2; exit 2 ;;
esac
if [ ! -x "$venv/bin/python" ]; then
  echo "$peer_name: no $peer environment at $venv; run tools/peers/setup.sh $peer" >&2
  exit 2
fi
if [ ! -f "$KVACT_LIB" ]; then
  echo "$peer_name: no libkvact.so at $KVACT_LIB; bazel build //:kvact_shared, or pass its path" >&2
  exit 2
fi
case "$KVACT_LIB" in /*) ;; *) KVACT_LIB="$PWD/$KVACT_LIB" ;; esac
export KVACT_LIB PYTHONPATH="$peer_root/python" PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
. "$peer_root/python/sanitizer_preload.sh"
